"""Lighter's authenticated REST reads: an account's orders, fills, flows, fundings,
liquidations, pnl, txs and transfer fee, from the caches and the per-account ledger
(``cache/ledger.py``).

The request's auth token (``Authorization`` header or ``auth`` parameter, auth.py) must speak for
the account, else the refusal (HTTP 401/403) and nothing is served; ``accountTxs`` too, as on
Lighter (its list of an account's txs is a private read; one tx by hash, ``tx``, is public).
``accountMetadata`` is read without a token; ``trades`` without ``account_index`` is the
market's public tape.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from raydex.codecs import MAX_48, ResultCode, TxType
from raydex.engine.rules import transfer_fee

from ..views import common as views
from ..views import private as private_views
from ..views import public as public_views
from . import auth
from .context import ReadContext
from .errors import ApiError
from .params import int_param

__all__ = ["PrivateReads"]

_WITHDRAW = int(TxType.WITHDRAW)
_TRANSFER = int(TxType.TRANSFER)


class PrivateReads:
    """The authenticated read handlers of one app."""

    def __init__(self, ctx: ReadContext) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self.config = ctx.config

    def _account_param(self, q: Mapping[str, Any], name: str = "account_index") -> int:
        ai = int_param(q, name, 0, MAX_48)
        if ai not in self.state.accounts:
            raise ApiError(int(ResultCode.ACCOUNT_NOT_FOUND), f"account {ai} not found", 404)
        return ai

    def _authorize(self, request: web.Request, account: int) -> None:
        """The request's token (``Authorization`` header or ``auth`` parameter) speaks for
        ``account``, else the refusal (auth.py's code, HTTP 401/403): nothing is served."""
        token = auth.token_of(request.headers, request.query)
        try:
            auth.require_account(
                token, account, time.time(), self.state, self.config.auth_max_lifetime_s
            )
        except auth.AuthError as e:
            raise ApiError(e.code, e.message, e.status) from None

    def _private(
        self, request: web.Request, name: str = "account_index", paged: bool = False
    ) -> int:
        """The account of a private read, authorized; ``cursor`` paging only where ``paged``."""
        q = request.query
        ai = self._account_param(q, name)
        self._authorize(request, ai)
        if q.get("cursor") and not paged:
            raise ApiError(int(ResultCode.INVALID_PARAM), "cursor paging is not supported")
        return ai

    def _list_limit(self, q: Mapping[str, Any]) -> int:
        return int_param(q, "limit", 1, 100, default=100)

    async def transfer_fee_info(self, request: web.Request) -> web.Response:
        """``TransferFeeInfo``: the ``USDCFee`` a transfer from ``account_index`` to
        ``to_account_index`` (any other account when absent) must carry at least, by the
        engine's rule (``raydex.engine.rules.transfer_fee``)."""
        ai = self._private(request)
        q = request.query
        same_master = False
        if q.get("to_account_index") is not None:
            to = self._account_param(q, "to_account_index")
            same_master = self.state.master_of(to) == self.state.master_of(ai)
        return self.ctx.ok({"transfer_fee_usdc": transfer_fee(same_master)})

    async def account_active_orders(self, request: web.Request) -> web.Response:
        """``Orders``: the account's active orders (of ``market_id``; 255 or absent: all):
        resting ones and waiting conditional ones (stop-loss / take-profit, grouped children,
        TWAPs), by order index."""
        ai = self._private(request)
        markets = self.ctx.markets(request.query)
        rows = private_views.active_orders(self.state, ai, lambda mi, _coi: mi in markets)
        return self.ctx.ok({"orders": [view for _, view in rows]})

    async def account_inactive_orders(self, request: web.Request) -> web.Response:
        """``Orders``: the account's orders that left the book, newest first, ``limit`` of them
        (of ``market_id``, and ``ask_filter`` 0 bids / 1 asks / -1 both)."""
        ai = self._private(request)
        q = request.query
        limit = int_param(q, "limit", 1, 100)
        markets = set(self.ctx.markets(q))
        side = int_param(q, "ask_filter", -1, 1, default=-1)
        log = self.state.ledger.log(ai)
        out: list[dict[str, Any]] = []
        for d in reversed(log.orders if log is not None else ()):
            o = d.order
            if o.market_index in markets and (side < 0 or o.is_ask == side):
                out.append(private_views.done_order(d, self.state.markets[o.market_index]))
                if len(out) >= limit:
                    break
        return self.ctx.ok({"orders": out})

    async def account_orders(self, request: web.Request) -> web.Response:
        """``Orders`` by ``client_order_indexes`` (comma-separated, at most 20): the account's
        resting orders and the orders of its ledger that left the book, newest first. The
        account defaults to the token's."""
        q = request.query
        if q.get("account_index") is None:
            token = auth.token_of(request.headers, q)
            try:
                ai = auth.authenticate(
                    token or "", time.time(), self.state, self.config.auth_max_lifetime_s
                )[0]
            except auth.AuthError as e:
                raise ApiError(e.code, e.message, e.status) from None
            if ai not in self.state.accounts:
                raise ApiError(int(ResultCode.ACCOUNT_NOT_FOUND), f"account {ai} not found", 404)
        else:
            ai = self._private(request)
        raw = q.get("client_order_indexes", "")
        parts = raw.split(",") if raw else []
        if not 1 <= len(parts) <= 20:
            raise ApiError(
                int(ResultCode.INVALID_PARAM), "client_order_indexes: 1 to 20 comma-separated"
            )
        wanted = {int_param({"c": p.strip()}, "c", 0, MAX_48) for p in parts}
        st = self.state
        active = private_views.active_orders(st, ai, lambda _mi, coi: coi in wanted)
        out = [view for _, view in reversed(active)]
        log = st.ledger.log(ai)
        for d in reversed(log.orders if log is not None else ()):
            if d.order.client_order_index in wanted:
                out.append(private_views.done_order(d, st.markets[d.order.market_index]))
        return self.ctx.ok({"orders": out})

    async def trades(self, request: web.Request) -> web.Response:
        """``Trades``: with ``account_index``, the account's own fills (authenticated), newest
        first (``sort_dir=asc``: oldest first); without, the market's tape (``market_id``
        required). Paged by ``cursor``: the ``next_cursor`` of a full page (a trade id)."""
        q = request.query
        limit = self._list_limit(q)
        if q.get("sort_by", "timestamp") not in ("timestamp", "trade_id", "block_height"):
            raise ApiError(int(ResultCode.INVALID_PARAM), "sort_by must be timestamp or trade_id")
        asc = q.get("sort_dir", "desc") == "asc"
        after = int_param(q, "cursor", 0, 2**63 - 1, default=-1)
        if q.get("account_index") is None:
            mi = self.ctx.market(q)
            rows_in: list[Any] = list(self.state.trades[mi])
            ai, markets, side = -1, {mi}, -1
        else:
            ai = self._private(request, paged=True)
            markets = set(self.ctx.markets(q))
            side = int_param(q, "ask_filter", -1, 1, default=-1)
            log = self.state.ledger.log(ai)
            rows_in = list(log.trades) if log is not None else []
        rows = []
        for row in rows_in if asc else reversed(rows_in):
            t = row.trade
            if after >= 0 and (t.trade_id <= after if asc else t.trade_id >= after):
                continue
            if t.market_index not in markets:
                continue
            if side >= 0:
                mine_ask = t.taker_is_ask if t.taker_account_index == ai else not t.taker_is_ask
                if int(mine_ask) != side:
                    continue
            rows.append(row)
            if len(rows) >= limit:
                break
        markets_ = self.state.markets
        body: dict[str, Any] = {
            "trades": [views.trade(r, markets_[r.trade.market_index]) for r in rows]
        }
        if len(rows) == limit:
            body["next_cursor"] = str(rows[-1].trade.trade_id)
        return self.ctx.ok(body)

    def _flows(self, ai: int) -> list[Any]:
        log = self.state.ledger.log(ai)
        return list(reversed(log.flows)) if log is not None else []

    async def deposit_history(self, request: web.Request) -> web.Response:
        ai = self._private(request)
        rows = [private_views.deposit(f) for f in self._flows(ai) if private_views.is_deposit(f)]
        return self.ctx.ok({"deposits": rows, "cursor": ""})

    async def withdraw_history(self, request: web.Request) -> web.Response:
        ai = self._private(request)
        rows = [private_views.withdrawal(f) for f in self._flows(ai) if f.tx_type == _WITHDRAW]
        return self.ctx.ok({"withdraws": rows, "cursor": ""})

    async def transfer_history(self, request: web.Request) -> web.Response:
        ai = self._private(request)
        rows = [private_views.transfer(f, ai) for f in self._flows(ai) if f.tx_type == _TRANSFER]
        return self.ctx.ok({"transfers": rows, "cursor": ""})

    async def position_funding(self, request: web.Request) -> web.Response:
        """``PositionFundings``: the account's funding payments, newest first."""
        ai = self._private(request)
        q = request.query
        limit = self._list_limit(q)
        markets = set(self.ctx.markets(q))
        log = self.state.ledger.log(ai)
        pays = list(log.fundings) if log is not None else []
        out: list[dict[str, Any]] = []
        for i in range(len(pays) - 1, -1, -1):
            p = pays[i]
            if p.market_index in markets:
                m = self.state.markets[p.market_index]
                out.append(private_views.position_funding(p, m, p.block_height))
                if len(out) >= limit:
                    break
        return self.ctx.ok({"position_fundings": out})

    async def liquidations(self, request: web.Request) -> web.Response:
        """``LiquidationInfos``: the account's positions taken over by liquidation, newest
        first."""
        ai = self._private(request)
        q = request.query
        limit = self._list_limit(q)
        markets = set(self.ctx.markets(q))
        st = self.state
        log = st.ledger.log(ai)
        collateral = st.accounts[ai].collateral
        rows = [
            private_views.liquidation(x, st.markets[x.event.market_index], collateral)
            for x in reversed(log.liquidations if log is not None else ())
            if x.event.market_index in markets
        ][:limit]
        return self.ctx.ok({"liquidations": rows})

    async def pnl(self, request: web.Request) -> web.Response:
        """``AccountPnL``: per ``resolution`` bucket (1h or 1d) in ``[start_timestamp,
        end_timestamp]`` (s), the account's realized pnl, inflow, outflow and volume in USDC;
        ``count_back`` > 0: the newest that many buckets."""
        q = request.query
        if q.get("by", "index") != "index":
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=index is supported")
        ai = self._private(request, "value")
        res = q.get("resolution", "1h")
        width = public_views.FUNDING_RESOLUTIONS.get(res)
        if width is None:
            raise ApiError(int(ResultCode.INVALID_PARAM), "resolution must be 1h or 1d")
        start = int_param(q, "start_timestamp", 0, 5_000_000_000_000, default=0)
        end = int_param(q, "end_timestamp", 0, 5_000_000_000_000, default=5_000_000_000_000)
        count = int_param(q, "count_back", 0, 10_000, default=0)
        log = self.state.ledger.log(ai)
        rows = private_views.pnl(list(log.pnl) if log is not None else [], width, start, end)
        return self.ctx.ok({"resolution": res, "pnl": rows[-count:] if count else rows})

    async def account_txs(self, request: web.Request) -> web.Response:
        """``Txs``: the account's own txs, newest first (``by=account_index``); authorized like
        the other private histories (a public caller sees nothing of the list)."""
        q = request.query
        if q.get("by", "account_index") != "account_index":
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=account_index is supported")
        ai = self._private(request, "value")
        limit = self._list_limit(q)
        if q.get("index") is not None:
            raise ApiError(int(ResultCode.INVALID_PARAM), "index paging is not supported")
        log = self.state.ledger.log(ai)
        recs = list(log.txs)[::-1][:limit] if log is not None else []
        return self.ctx.ok({"txs": public_views.tx_list(self.state.history, recs)})

    async def account_limits(self, request: web.Request) -> web.Response:
        self._private(request)
        return self.ctx.ok(private_views.account_limits())

    async def account_metadata(self, request: web.Request) -> web.Response:
        q = request.query
        if q.get("by", "index") != "index":
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=index is supported")
        ai = self._account_param(q, "value")
        return self.ctx.ok({"account_metadatas": [private_views.account_metadata(ai)]})
