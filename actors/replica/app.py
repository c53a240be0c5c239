"""The replica's aiohttp app: Lighter's REST under ``/api/v1/`` and the ``/stream`` WebSocket.

::

    client ──HTTP/WS──► build_app(state, execute_txs, fanout, ...)
                          │ reads: http.PublicReads, http.PrivateReads over the caches (no copies)
                          │ sendTx: http.TxSubmission: decode ─► door ─► dry-run ─► execute_txs
                          │ /stream: ws.Stream: subscriptions, tx frames, replies via the fan-out
                          ▼
    ReplicaService (owner) ── state.apply_block ─► fanout.publish(Applied) ─► subscribers

- Every JSON answer carries ``code`` (200 on success) and the ``seq`` of the block it reflects;
  errors are answered as ``http/errors.py`` says. Every request is first charged its weight to
  its IP's budget (``http/limits.py``: 429 beyond).
- The app never awaits anything but ``execute_txs``, a commitment read and the client's own
  socket; the caches are only written by the apply loop, which runs on the same event loop, so a
  handler sees one consistent block between awaits.

Caller duties: create the :class:`Fanout` and run the apply loop on the app's event loop
(``state.apply_block`` then ``fanout.publish``); ``execute_txs`` must return one ``TxOutcome`` per
tx, after the block holding them was applied to ``state`` (so ``nextNonce`` is current when the
client gets its answer), or raise :class:`ApiError`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from raydex.observability.metrics import ApiCounters

from .cache import ReplicaState
from .hooks import ReplicaHooks
from .http import (
    Admission,
    ApiConfig,
    CommitmentSource,
    ExecuteTxs,
    FastSend,
    Limits,
    PrivateReads,
    PublicReads,
    RateLimited,
    ReadContext,
    TxSubmission,
    error_middleware,
    rest_weight,
)
from .ws import Fanout, Stream

__all__ = ["ADMISSION", "API_CONFIG", "FAST_SEND", "LIMITS", "build_app"]

#: the app's :class:`Limits` (its owner reports ``stats()``)
LIMITS = web.AppKey("limits", Limits)

#: the app's overload door (its owner reports ``stats()``)
ADMISSION = web.AppKey("admission", Admission)

#: ``sendTx``/``sendTxBatch`` for the fast lane (fastlane.py), answered as the app answers them
FAST_SEND = web.AppKey("fast_send", FastSend)

#: the app's knobs (the fast lane reads ``max_body_bytes``)
API_CONFIG = web.AppKey("api_config", ApiConfig)


def build_app(
    state: ReplicaState,
    execute_txs: ExecuteTxs,
    fanout: Fanout,
    *,
    counters: ApiCounters | None = None,
    config: ApiConfig | None = None,
    commitments: CommitmentSource | None = None,
    hooks: ReplicaHooks | None = None,
    queue_delay: Callable[[], float] | None = None,
) -> web.Application:
    """The replica's aiohttp app over ``state``; WebSocket clients are served through ``fanout``
    (its owner publishes each applied block to it), handlers count into ``counters``. ``hooks``:
    a probe told about each dry-run, middlewares around every handler. ``queue_delay``: seconds
    the oldest tx on its way to the sequencer has waited (the door's signal; None: no door).
    See the module docstring."""
    cfg = config if config is not None else ApiConfig()
    hk = hooks if hooks is not None else ReplicaHooks()
    limits = Limits(cfg)
    admission = Admission(queue_delay, cfg.admission_max_delay_s)
    counters = counters if counters is not None else ApiCounters()
    reads = ReadContext(state, counters, cfg)
    public = PublicReads(reads, commitments)
    private = PrivateReads(reads)
    txs = TxSubmission(state, execute_txs, counters, cfg, limits, admission, hk.probe)
    stream = Stream(state, fanout, limits, cfg, txs)

    @web.middleware
    async def _budget(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        wait = limits.charge_ip(request.remote, rest_weight(request.path))
        if wait:
            raise RateLimited(wait, "requests from this IP")
        return await handler(request)

    app = web.Application(
        client_max_size=cfg.max_body_bytes, middlewares=[error_middleware, _budget, *hk.middlewares]
    )
    app[LIMITS] = limits
    app[ADMISSION] = admission
    app[FAST_SEND] = txs.fast_send
    app[API_CONFIG] = cfg
    r = app.router
    r.add_get("/", public.info)
    r.add_get("/info", public.info)
    r.add_get("/stream", stream.handle)
    for path, handler in (
        ("info", public.info),
        ("orderBooks", public.order_books),
        ("orderBookDetails", public.order_book_details),
        ("orderBookOrders", public.order_book_orders),
        ("recentTrades", public.recent_trades),
        ("assetDetails", public.asset_details),
        ("account", public.account),
        ("accountsByL1Address", public.accounts_by_l1_address),
        ("apikeys", public.api_keys),
        ("nextNonce", public.next_nonce),
        ("tx", public.tx),
        ("currentHeight", public.current_height),
        ("block", public.block),
        ("blocks", public.blocks),
        ("txs", public.txs),
        ("blockTxs", public.block_txs),
        ("exchangeStats", public.exchange_stats),
        ("announcement", public.announcement),
        ("candles", public.candles),
        ("funding-rates", public.funding_rates),
        ("fundings", public.fundings),
        ("accountActiveOrders", private.account_active_orders),
        ("accountInactiveOrders", private.account_inactive_orders),
        ("accountOrders", private.account_orders),
        ("trades", private.trades),
        ("deposit/history", private.deposit_history),
        ("withdraw/history", private.withdraw_history),
        ("transfer/history", private.transfer_history),
        ("positionFunding", private.position_funding),
        ("liquidations", private.liquidations),
        ("pnl", private.pnl),
        ("accountTxs", private.account_txs),
        ("accountLimits", private.account_limits),
        ("accountMetadata", private.account_metadata),
        ("transferFeeInfo", private.transfer_fee_info),
        ("fastwithdraw/info", public.fast_withdraw),
        ("fastbridge/info", public.fast_withdraw),
    ):
        r.add_get(f"/api/v1/{path}", handler)
    r.add_post("/api/v1/fastwithdraw", public.fast_withdraw)
    r.add_get("/api/v1/", public.info)
    r.add_post("/api/v1/sendTx", txs.send_tx)
    r.add_post("/api/v1/sendTxBatch", txs.send_tx_batch)

    async def _shutdown(app: web.Application) -> None:
        await fanout.close()  # the app's WebSocket connections end with the app

    app.on_shutdown.append(_shutdown)
    return app
