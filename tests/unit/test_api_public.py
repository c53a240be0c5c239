"""The public reads of issue 11 (candles, exchangeStats, txs, blockTxs, tx with its info,
announcement): Lighter's shapes, validated strictly by lighter-sdk's models, and their contents
checked against what was traded. Real aiohttp server on 127.0.0.1, real BlockProducer; time is
driven through ``LocalExchange.clock`` so candle buckets are exact."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from aiohttp.test_utils import TestServer
from kit.api import with_served
from pydantic import BaseModel

from raydex.actors.local import LocalExchange, Trader
from raydex.actors.replica import ReplicaState
from raydex.actors.replica.cache.candles import RESOLUTIONS, Candles
from raydex.codecs import ResultCode, SetMarkPrice, TradeExecuted, tx_to_json_str, tx_type_of

with warnings.catch_warnings():  # the SDK's own imports of deprecated websockets APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import lighter.models as models

T = TypeVar("T")
MIN = 60_000
#: 2026-01-05 00:00 UTC, a Monday (ms)
T0 = 1_767_571_200_000


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class Rig:
    def __init__(self, ex: LocalExchange, state: ReplicaState, server: TestServer) -> None:
        self.ex, self.state, self.server = ex, state, server
        self.http: aiohttp.ClientSession
        self.now_ms = T0
        ex.clock = lambda: self.now_ms * 1_000_000

    async def get(self, path: str, **params: Any) -> tuple[int, dict[str, Any]]:
        async with self.http.get(str(self.server.make_url(path)), params=params) as r:
            return r.status, await r.json()

    async def valid(self, model: type[BaseModel], path: str, **params: Any) -> dict[str, Any]:
        status, body = await self.get(path, **params)
        assert status == 200, (path, body)
        model.model_validate(body, strict=True)
        return body

    async def send(self, tx: Any) -> dict[str, Any]:
        form = {"tx_type": str(tx_type_of(type(tx))), "tx_info": tx_to_json_str(tx)}
        async with self.http.post(str(self.server.make_url("/api/v1/sendTx")), data=form) as r:
            body: dict[str, Any] = await r.json()
        assert body["code"] == 200, body
        return body

    async def trade(self, a: Trader, b: Trader, price: int, size: int) -> dict[str, Any]:
        """``a`` rests an ask, ``b`` takes it: one trade at ``price``; the taker's answer."""
        await self.send(a.order(price, size, 1))
        return await self.send(b.order(price, size, 0))


def with_rig(body: Callable[[Rig, list[Trader]], Awaitable[None]], n: int = 2) -> None:
    with_served([Trader(10 + i) for i in range(n)], Rig, body)


# ---- candles ------------------------------------------------------------------------------------


def test_candles_hold_open_high_low_close_and_volumes_of_the_trades_in_each_bucket() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        r.now_ms = T0 + 10_000
        await r.trade(a, b, 300_000, 100)  # 3000.00 x 0.0100
        r.now_ms = T0 + 50_000
        await r.trade(a, b, 301_000, 200)
        await r.trade(a, b, 299_500, 300)
        r.now_ms = T0 + MIN + 1  # the next minute
        await r.trade(a, b, 300_500, 400)
        q = {"market_id": 0, "start_timestamp": T0, "end_timestamp": T0 + 3_600_000}
        one = await r.valid(models.Candles, "/api/v1/candles", resolution="1m", count_back=0, **q)
        assert one["r"] == "1m"
        got = [(c["t"], c["o"], c["h"], c["l"], c["c"], c["v"]) for c in one["c"]]
        assert got == [
            (T0, 3000.0, 3010.0, 2995.0, 2995.0, 0.06),
            (T0 + MIN, 3005.0, 3005.0, 3005.0, 3005.0, 0.04),
        ]
        quote = 300_000 * 100 + 301_000 * 200 + 299_500 * 300
        assert one["c"][0]["V"] == quote / 10**6
        trade_ids = [t.trade.trade_id for t in r.state.trades[0]]
        assert [c["i"] for c in one["c"]] == [trade_ids[2], trade_ids[3]]
        hour = await r.valid(models.Candles, "/api/v1/candles", resolution="1h", count_back=0, **q)
        assert [(c["t"], c["o"], c["h"], c["l"], c["c"], c["v"]) for c in hour["c"]] == [
            (T0, 3000.0, 3010.0, 2995.0, 3005.0, 0.1)
        ]
        week = await r.valid(
            models.Candles,
            "/api/v1/candles",
            resolution="1w",
            count_back=0,
            **{**q, "start_timestamp": 0},
        )  # weeks start on the epoch's weekday (Thursday): this Monday is inside one
        assert week["c"][0]["t"] == T0 - T0 % (7 * 24 * 60 * MIN)
        last = await r.valid(models.Candles, "/api/v1/candles", resolution="1m", count_back=1, **q)
        assert [c["t"] for c in last["c"]] == [T0 + MIN]
        empty = await r.valid(
            models.Candles,
            "/api/v1/candles",
            market_id=0,
            resolution="5m",
            start_timestamp=T0 + 3_600_000,
            end_timestamp=T0 + 7_200_000,
            count_back=0,
        )
        assert empty["c"] == []

    with_rig(body)


def test_bad_candle_requests_get_clear_codes_and_every_lighter_resolution_is_served() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        q = {"start_timestamp": 0, "end_timestamp": T0, "count_back": 0}
        for res in ("1m", "5m", "15m", "30m", "1h", "4h", "12h", "1d", "1w"):
            await r.valid(models.Candles, "/api/v1/candles", market_id=0, resolution=res, **q)
        checks = [
            ({"market_id": 0, "resolution": "2m", **q}, 400, ResultCode.INVALID_PARAM),
            ({"market_id": 0, "resolution": "1m"}, 400, ResultCode.INVALID_PARAM),
            ({"market_id": 9, "resolution": "1m", **q}, 404, ResultCode.MARKET_NOT_FOUND),
            (
                {"market_id": 0, "resolution": "1m", **q, "end_timestamp": "soon"},
                400,
                ResultCode.INVALID_PARAM,
            ),
        ]
        for params, status, code in checks:
            got, reply = await r.get("/api/v1/candles", **params)
            assert (got, reply["code"]) == (status, code), params
            assert reply["message"]

    with_rig(body)


def test_candles_keep_a_bounded_history_per_resolution() -> None:
    from raydex.actors.replica.cache.candles import KEEP
    from raydex.actors.replica.cache.rows import TradeRow

    c = Candles()
    for i in range(KEEP + 5):
        t = TradeExecuted(0, i + 1, 300_000 + i, 10, 1, 2, 3, 4, 0, 0, 0)
        c.add({0: [TradeRow(t, b"", i, T0 + i * MIN)]})
    ones = c.window(0, "1m", 0, 2**62, 0)
    assert len(ones) == 500 and ones[-1][0] == T0 + (KEEP + 4) * MIN
    assert len(c.window(0, "1m", 0, 2**62, 2_000)) == 500
    assert c.window(0, "1h", 0, 2**62, 0)[0][0] == T0  # the oldest hour is still there
    assert set(RESOLUTIONS) == {"1m", "5m", "15m", "30m", "1h", "4h", "12h", "1d", "1w"}


def test_queued_candles_are_folded_by_the_next_read_and_never_wait_past_the_bound() -> None:
    # apply_block only queues a block's trades (History.add); the replica folds them after the
    # block's fan-out, and any read folds what is still queued first
    from raydex.actors.replica.cache.candles import MAX_PENDING
    from raydex.actors.replica.cache.rows import TradeRow

    def block(i: int) -> dict[int, list[TradeRow]]:
        t = TradeExecuted(0, i + 1, 300_000 + 7 * (i % 5), 10 + i, 1, 2, 3, 4, 0, 0, 0)
        return {0: [TradeRow(t, b"", i, T0 + i * 7_000)]}

    queued, folded = Candles(), Candles()
    for i in range(30):
        queued.queue(block(i))
        folded.add(block(i))
    assert queued.last(0, "1m") == folded.last(0, "1m")  # read right after queueing
    for i in range(30, 40):
        queued.queue(block(i))
        folded.add(block(i))
    for res in RESOLUTIONS:
        assert queued.window(0, res, 0, 2**62, 0) == folded.window(0, res, 0, 2**62, 0)
    unread = Candles()
    for i in range(MAX_PENDING * 2):
        unread.queue(block(i))
        assert len(unread._pending) <= MAX_PENDING
    unread.catch_up()
    assert not unread._pending


# ---- exchange stats, txs, blocks, announcements -------------------------------------------------


def test_exchange_stats_sum_the_markets_daily_figures() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        await r.trade(a, b, 300_000, 100)
        await r.trade(a, b, 302_000, 100)
        s = await r.valid(models.ExchangeStats, "/api/v1/exchangeStats")
        assert s["total"] == 1 and s["daily_trades_count"] == 2
        row = s["order_book_stats"][0]
        assert (row["symbol"], row["last_trade_price"]) == ("ETH", 3020.0)
        assert s["daily_usd_volume"] == (3000.0 + 3020.0) * 0.01
        assert abs(row["daily_price_change"] - 2 / 3) < 1e-9  # percent, from the day's first price

    with_rig(body)


def test_txs_page_in_execution_order_and_block_txs_list_one_block() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a = ts[0]
        hashes = [(await r.send(a.order(299_000 - i * 100, 10, 0)))["tx_hash"] for i in range(5)]
        r.ex.run([SetMarkPrice(0, 300_100)], operator=True)  # operator command: not listed
        newest = await r.valid(models.Txs, "/api/v1/txs", limit=3)
        assert [t["hash"] for t in newest["txs"]] == hashes[2:]
        everything = await r.valid(models.Txs, "/api/v1/txs", limit=100, index=0)
        listed = [t["hash"] for t in everything["txs"]]
        assert listed[-5:] == hashes and len(set(listed)) == len(listed)
        seqs = [t["sequence_index"] for t in everything["txs"]]
        assert seqs == sorted(seqs)
        second = everything["txs"][-4]
        page = await r.valid(models.Txs, "/api/v1/txs", limit=2, index=second["sequence_index"])
        assert [t["hash"] for t in page["txs"]] == hashes[1:3]
        assert all(t["info"] for t in page["txs"])  # sent through this replica: bodies known
        block = await r.valid(
            models.Txs, "/api/v1/blockTxs", by="block_height", value=second["block_height"]
        )
        assert [t["hash"] for t in block["txs"]] == [hashes[1]]
        status, reply = await r.get("/api/v1/blockTxs", by="block_height", value=10**9)
        assert (status, reply["code"]) == (404, ResultCode.NOT_FOUND)
        status, reply = await r.get("/api/v1/txs", limit=0)
        assert (status, reply["code"]) == (400, ResultCode.INVALID_PARAM)
        ann = await r.valid(models.Announcements, "/api/v1/announcement")
        assert ann["announcements"] == []

    with_rig(body)


def test_tx_answers_the_body_it_was_sent_with_as_info() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, _ = ts
        order = a.order(299_000, 10, 0)
        sent = await r.send(order)
        tx = await r.valid(models.EnrichedTx, "/api/v1/tx", by="hash", value=sent["tx_hash"])
        assert json.loads(tx["info"]) == json.loads(tx_to_json_str(order))
        assert tx["sequence_index"] >> 20 == tx["block_height"]
        # a replica that did not receive the tx knows its outcome, not its body
        other = r.ex.serve()
        late = a.order(298_000, 10, 0)
        block = r.ex.run([late])
        rec = other.state.txs[block.outcomes[0].tx_hash]
        from raydex.actors.replica.views.public import tx_info

        assert tx_info(other.state.history, rec) == ""

    with_rig(body)
