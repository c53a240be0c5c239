"""Lighter's public REST reads: markets, books, trades, accounts, keys, nonces, txs, blocks,
candles and fundings, answered from the caches, never over the network, but for ``block`` and
``blocks``, which ask the committer (``CommitmentSource``; counted as cache fallbacks).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from aiohttp import web

from raydex.codecs import ALL_API_KEYS, MAX_48, MAX_API_KEY_INDEX, OrderRecord, ResultCode
from raydex.codecs.signing import parse_l1_address

from ..cache import RESOLUTIONS, LevelOrders, Levels
from ..views import common as views
from ..views import public as public_views
from .context import ReadContext
from .errors import ApiError
from .params import int_param

__all__ = ["CommitmentSource", "PublicReads"]


class CommitmentSource(Protocol):
    """Where ``block``/``blocks`` read state commitments (the committer; off the hot path)."""

    async def commitment(self, height: int) -> dict[str, Any] | None: ...

    async def latest(self, limit: int) -> list[dict[str, Any]]: ...


class PublicReads:
    """The public read handlers of one app."""

    def __init__(self, ctx: ReadContext, commitments: CommitmentSource | None) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self.config = ctx.config
        self.counters = ctx.counters
        self.commitments = commitments

    def _limit(self, q: Mapping[str, Any]) -> int:
        return int_param(
            q, "limit", 1, self.config.max_list_limit, default=self.config.max_list_limit
        )

    async def info(self, request: web.Request) -> web.Response:
        """``Status`` (``GET /``) and ``ZkLighterInfo`` (``GET /info``) in one body. Lighter
        answers ``status: 200`` and the time in seconds (ccxt's ``fetch_status`` checks 200)."""
        return self.ctx.ok(
            {
                "status": 200,
                "contract_address": "",
                "network_id": self.config.network_id,
                "timestamp": int(time.time()),
                "height": self.state.height,
            }
        )

    async def order_books(self, request: web.Request) -> web.Response:
        st = self.state
        books = [views.market_summary(st.markets[mi]) for mi in self.ctx.markets(request.query)]
        return self.ctx.ok({"order_books": books})

    async def order_book_details(self, request: web.Request) -> web.Response:
        st = self.state
        details = [
            views.market_detail(st.markets[mi], st.stats[mi])
            for mi in self.ctx.markets(request.query)
        ]
        return self.ctx.ok({"order_book_details": details, "spot_order_book_details": []})

    async def order_book_orders(self, request: web.Request) -> web.Response:
        st = self.state
        mi = self.ctx.market(request.query)
        limit = self._limit(request.query)
        m = st.markets[mi]
        ts = st.timestamp_ns // 1_000_000
        book = st.books[mi]
        bid_orders, ask_orders = st.level_orders[mi]
        return self.ctx.ok(
            {
                "total_asks": sum(map(len, ask_orders.values())),
                "asks": [views.simple_order(o, m, ts) for o in _best(book.asks, ask_orders, limit)],
                "total_bids": sum(map(len, bid_orders.values())),
                "bids": [views.simple_order(o, m, ts) for o in _best(book.bids, bid_orders, limit)],
            }
        )

    async def asset_details(self, request: web.Request) -> web.Response:
        """USDC only (ccxt's ``load_markets`` reads it); ``asset_id`` 0 or absent means all."""
        aid = int_param(request.query, "asset_id", 0, 2**31 - 1, default=0)
        if aid not in (0, views.USDC_ASSET_ID):
            raise ApiError(int(ResultCode.NOT_FOUND), f"asset {aid} not found", 404)
        return self.ctx.ok({"asset_details": [views.usdc_asset_detail()]})

    async def recent_trades(self, request: web.Request) -> web.Response:
        st = self.state
        mi = self.ctx.market(request.query)
        limit = self._limit(request.query)
        m = st.markets[mi]
        rows = list(st.trades[mi])[-limit:]
        rows.reverse()
        return self.ctx.ok({"trades": [views.trade(r, m) for r in rows]})

    def _by_l1(self, text: Any) -> tuple[bytes, int]:
        """(L1 address, its account) for ``text`` (``0x`` + 40 hex), else ApiError."""
        raw = parse_l1_address(text)
        if raw is None:
            raise ApiError(
                int(ResultCode.INVALID_PARAM), "l1_address must be 0x + 40 hex digits (not zero)"
            )
        ai = self.state.by_l1.get(raw)
        if ai is None or ai not in self.state.accounts:
            raise ApiError(
                int(ResultCode.ACCOUNT_NOT_FOUND), f"no account for L1 address {text}", 404
            )
        return raw, ai

    async def accounts_by_l1_address(self, request: web.Request) -> web.Response:
        """``SubAccounts`` of ``l1_address``: its master account, then its sub-accounts in
        creation order."""
        raw, ai = self._by_l1(request.query.get("l1_address"))
        st = self.state
        return self.ctx.ok(views.sub_accounts(st, raw, [ai, *st.sub_accounts.get(ai, ())]))

    async def account(self, request: web.Request) -> web.Response:
        q = request.query
        by = q.get("by", "index")
        if by == "l1_address":
            ai = self._by_l1(q.get("value"))[1]
        elif by == "index":
            ai = int_param(q, "value", 0, MAX_48)
        else:
            raise ApiError(int(ResultCode.INVALID_PARAM), "by must be index or l1_address")
        acct = self.state.accounts.get(ai)
        if acct is None:
            raise ApiError(int(ResultCode.ACCOUNT_NOT_FOUND), f"account {ai} not found", 404)
        return self.ctx.ok(
            {"total": 1, "accounts": [views.account(self.state, ai, acct)], "next_cursor": ""}
        )

    async def fast_withdraw(self, request: web.Request) -> web.Response:
        """``fastwithdraw``, ``fastwithdraw/info``, ``fastbridge/info``: Lighter's fast withdrawals
        through its bridge, which raydex does not run (its withdrawals complete in their block):
        refused with ``FEATURE_NOT_SUPPORTED`` naming the feature."""
        raise ApiError(
            int(ResultCode.FEATURE_NOT_SUPPORTED),
            "fast withdrawals (Lighter's bridge) are not executed by raydex: use a Withdraw "
            "(tx 13), which completes in its block",
        )

    async def api_keys(self, request: web.Request) -> web.Response:
        q = request.query
        ai = int_param(q, "account_index", 0, MAX_48)
        ki = int_param(q, "api_key_index", 0, ALL_API_KEYS, default=ALL_API_KEYS)
        if ai not in self.state.accounts:
            raise ApiError(int(ResultCode.ACCOUNT_NOT_FOUND), f"account {ai} not found", 404)
        st = self.state
        ts = st.timestamp_ns // 1_000_000
        indexes = st.account_keys.get(ai, set())
        if ki != ALL_API_KEYS:
            indexes = {ki} & indexes
        keys = [
            {
                "account_index": ai,
                "api_key_index": k,
                "nonce": int(r.nonce),
                "public_key": bytes(r.pub_key).hex(),
                "transaction_time": ts,
            }
            for k in sorted(indexes)
            for r in (st.api_keys[(ai, k)],)
        ]
        return self.ctx.ok({"api_keys": keys})

    async def next_nonce(self, request: web.Request) -> web.Response:
        q = request.query
        ai = int_param(q, "account_index", 0, MAX_48)
        ki = int_param(q, "api_key_index", 0, MAX_API_KEY_INDEX)
        nonce = self.state.next_nonce(ai, ki)
        if nonce is None:
            if ai not in self.state.accounts:
                raise ApiError(int(ResultCode.ACCOUNT_NOT_FOUND), f"account {ai} not found", 404)
            nonce = 0  # an unused key slot: the nonce a ChangePubKey setting it carries
        return self.ctx.ok({"nonce": nonce})

    async def tx(self, request: web.Request) -> web.Response:
        q = request.query
        if q.get("by", "hash") != "hash":
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=hash is supported")
        value = q.get("value", "")
        try:
            h = bytes.fromhex(value.removeprefix("0x"))
        except ValueError:
            raise ApiError(int(ResultCode.INVALID_PARAM), "value must be a hex hash") from None
        rec = self.state.txs.get(h)
        if rec is None:
            raise ApiError(int(ResultCode.NOT_FOUND), "tx not found", 404)
        body = views.tx_record(rec, public_views.tx_info(self.state.history, rec))
        return self.ctx.ok(body)

    async def txs(self, request: web.Request) -> web.Response:
        """``Txs``: ``limit`` (1..100) txs in execution order, from ``sequence_index >= index``
        when ``index`` is given, else the newest."""
        q = request.query
        limit = int_param(q, "limit", 1, 100)
        hist = self.state.history
        top = public_views.MAX_LIGHTER_TX_TYPE
        if q.get("index") is None:
            rows = hist.latest(limit, top)
        else:
            rows = hist.since(int_param(q, "index", 0, 2**63 - 1), limit, self.state.seq, top)
        return self.ctx.ok({"txs": public_views.tx_list(hist, rows)})

    async def block_txs(self, request: web.Request) -> web.Response:
        """``Txs`` of one block, ``by=block_height`` (raydex's height of a block is its seq)."""
        q = request.query
        if q.get("by", "block_height") not in ("block_height", "height"):
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=block_height is supported")
        seq = int_param(q, "value", 1, 2**63 - 1)
        hist = self.state.history
        rows = hist.block(seq)
        if rows is None:
            raise ApiError(int(ResultCode.NOT_FOUND), f"block {seq} not found", 404)
        return self.ctx.ok({"txs": public_views.tx_list(hist, list(rows))})

    async def exchange_stats(self, request: web.Request) -> web.Response:
        return self.ctx.ok(public_views.exchange_stats(self.state))

    async def announcement(self, request: web.Request) -> web.Response:
        return self.ctx.ok({"announcements": []})

    async def funding_rates(self, request: web.Request) -> web.Response:
        return self.ctx.ok({"funding_rates": public_views.funding_rates(self.state)})

    async def fundings(self, request: web.Request) -> web.Response:
        """``Fundings`` of one market: its hourly settlements (or their daily sums) with
        ``start_timestamp <= time <= end_timestamp`` in seconds; ``count_back`` > 0: the newest
        that many."""
        q = request.query
        mi = self.ctx.market(q)
        res = q.get("resolution", "1h")
        width = public_views.FUNDING_RESOLUTIONS.get(res)
        if width is None:
            raise ApiError(int(ResultCode.INVALID_PARAM), "resolution must be 1h or 1d")
        start = int_param(q, "start_timestamp", 0, 5_000_000_000_000)
        end = int_param(q, "end_timestamp", 0, 5_000_000_000_000)
        count = int_param(q, "count_back", 0, 2**31 - 1, default=0)
        rows = list(self.state.history.settlements.get(mi, ()))
        m = self.state.markets[mi]
        return self.ctx.ok(
            {
                "resolution": res,
                "fundings": public_views.fundings(rows, m, width, start, end, count),
            }
        )

    async def candles(self, request: web.Request) -> web.Response:
        """``Candles`` of one market at one of Lighter's resolutions, ``t`` in
        ``[start_timestamp, end_timestamp]`` (ms), at most 500 (``count_back`` > 0: that many)."""
        q = request.query
        mi = self.ctx.market(q)
        res = q.get("resolution", "")
        if res not in RESOLUTIONS:
            raise ApiError(
                int(ResultCode.INVALID_PARAM), f"resolution must be one of {', '.join(RESOLUTIONS)}"
            )
        start = int_param(q, "start_timestamp", 0, 5_000_000_000_000)
        end = int_param(q, "end_timestamp", 0, 5_000_000_000_000)
        count_back = int_param(q, "count_back", 0, 2**31 - 1, default=0)
        rows = self.state.history.candles.window(mi, res, start, end, count_back)
        return self.ctx.ok(public_views.candles(res, rows, self.state.markets[mi]))

    async def current_height(self, request: web.Request) -> web.Response:
        return self.ctx.ok({"height": self.state.seq})

    async def block(self, request: web.Request) -> web.Response:
        q = request.query
        if q.get("by", "height") != "height":
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=height is supported")
        height = int_param(q, "value", 1, 2**63 - 1)
        self.counters.cache_fallbacks += 1
        found = None if self.commitments is None else await self.commitments.commitment(height)
        if found is None:
            raise ApiError(int(ResultCode.NOT_FOUND), "no commitment for that height (yet)", 404)
        return self.ctx.ok({"total": 1, "blocks": [found]}, cached=False)

    async def blocks(self, request: web.Request) -> web.Response:
        limit = int_param(request.query, "limit", 1, 100, 10)
        self.counters.cache_fallbacks += 1
        found = [] if self.commitments is None else await self.commitments.latest(limit)
        return self.ctx.ok({"total": len(found), "blocks": found}, cached=False)


def _best(levels: Levels, orders: LevelOrders, limit: int) -> list[OrderRecord]:
    """The first ``limit`` resting orders of one side, best price first, by order index within a
    level: a walk over the book's levels (already sorted) that stops at ``limit``. Cost:
    O(levels visited + orders at them), not O(orders on the side)."""
    out: list[OrderRecord] = []
    for price, _ in levels:
        level = orders.get(price)
        if level:
            out.extend(level[oi] for oi in sorted(level))
            if len(out) >= limit:
                return out[:limit]
    return out
