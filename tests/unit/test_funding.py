"""Funding as Lighter runs it, in the engine: a premium sampled each minute from the book against
the index (the mark), the hour's rate charged to every holder on the hour, deterministic (the same
commands at the same times give the same state hash, also across a snapshot), and shown by the
replica in ``market_stats``, ``funding-rates`` and ``fundings`` (validated by lighter-sdk)."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from raydex.actors.local import LocalExchange, Trader, new_exchange
from raydex.codecs import (
    AccountRecord,
    FundingChanged,
    FundingRecord,
    FundingTick,
    PositionRecord,
    ResultCode,
    decode_block,
    read_snapshot_ipc,
    records_to_tables,
    tables_to_records,
    write_snapshot_ipc,
)
from raydex.engine import Engine, funding_rate

with warnings.catch_warnings():  # the SDK's own imports of deprecated websockets APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import lighter.models as models

HOUR = 3_600_000
MIN = 60_000
T0 = 1_767_571_200_000  # 2026-01-05 00:00 UTC (ms)


def test_the_rate_is_the_mean_premium_plus_the_clamped_interest_over_eight_hours() -> None:
    assert funding_rate(0, 0) == 1_250  # 0.01 % / 8h at the index: 0.00125 % an hour
    assert funding_rate(60 * 100_000, 60) == (100_000 - 50_000) // 8  # the interest term clamped
    assert funding_rate(60 * 30_000, 60) == 10_000 // 8  # within 0.05 %: the interest rate
    assert funding_rate(-60 * 400_000, 60) == (-400_000 + 50_000) // 8
    assert funding_rate(60 * 10**9, 60) == 500_000  # capped at 0.5 % an hour
    assert funding_rate(-60 * 10**9, 60) == -500_000


def exchange(now: list[int]) -> tuple[LocalExchange, Trader, Trader]:
    a, b = Trader(10), Trader(11)
    ex = new_exchange([a, b])
    ex.clock = lambda: now[0] * 1_000_000
    return ex, a, b


def tick(ex: LocalExchange) -> list[Any]:
    block = ex.run([FundingTick(0)], operator=True)
    assert block.outcomes[0].code == ResultCode.OK
    return [e for e in decode_block(block.frame).events if type(e) is FundingChanged]


def position_of(ex: LocalExchange, account: int) -> tuple[int, int]:
    """(funding paid, collateral) of ``account``'s position in market 0, from the engine."""
    records = list(ex.producer.engine.records())
    pos = next(r for r in records if isinstance(r, PositionRecord) and r.account_index == account)
    acct = next(r for r in records if isinstance(r, AccountRecord) and r.account_index == account)
    return pos.funding_paid, acct.collateral


def test_a_book_above_the_index_makes_longs_pay_on_the_hour_and_not_before() -> None:
    now = [T0 + 5 * MIN]
    ex, a, b = exchange(now)
    ex.run([a.order(300_000, 10_000, 1), b.order(300_000, 10_000, 0)])  # b long 1 ETH, a short
    ex.run([b.order(303_000, 20_000, 0), a.order(304_000, 20_000, 1)])  # bids 1% over the index
    first = tick(ex)
    assert len(first) == 1 and first[0].samples == 1 and first[0].premium_sum > 0
    assert tick(ex) == []  # the same minute: nothing sampled, nothing emitted
    p = first[0].premium_sum
    assert p == 1_000_000  # impact bid 3030.00 vs index 3000.00: 1 %
    for i in range(1, 10):
        now[0] = T0 + (5 + i) * MIN
        tick(ex)
    paid_before, coll_before = position_of(ex, b.account)
    assert paid_before == 0
    now[0] = T0 + HOUR + 7_000  # the hour mark passed: settle, then sample the new hour
    settled = tick(ex)[0]
    rate = funding_rate(10 * p, 10)
    assert (settled.last_rate, settled.last_funding_ms, settled.samples) == (rate, T0 + HOUR, 1)
    assert rate == (1_000_000 - 50_000) // 8  # a 1 % premium, the interest term clamped
    paid, coll = position_of(ex, b.account)
    expected = -(-1 * 10_000 * 300_000 * rate // 100_000_000)  # size * mark * mult * rate, up
    assert paid == expected and coll_before - coll == expected
    short_paid, _ = position_of(ex, a.account)
    assert short_paid == -((1 * 10_000 * 300_000 * rate) // 100_000_000)  # received, rounded down
    ex.producer.engine.validate_internal_state()


def test_funding_is_deterministic_and_survives_a_snapshot() -> None:
    def scenario(ex: LocalExchange, a: Trader, b: Trader, now: list[int], upto: int) -> None:
        ex.run([a.order(300_000, 10_000, 1), b.order(300_000, 10_000, 0)])
        ex.run([a.order(297_000, 20_000, 1), b.order(296_000, 20_000, 0)])  # asks below: shorts pay
        for i in range(upto):
            now[0] = T0 + i * 20 * MIN + 1
            tick(ex)

    n1, n2 = [T0], [T0]
    ex1, a1, b1 = exchange(n1)
    ex2, a2, b2 = exchange(n2)
    # the traders' keys differ, so compare hashes of the funding-relevant state via the engines
    scenario(ex1, a1, b1, n1, 8)
    scenario(ex2, a2, b2, n2, 8)
    f1 = [r for r in ex1.producer.engine.records() if isinstance(r, FundingRecord)]
    f2 = [r for r in ex2.producer.engine.records() if isinstance(r, FundingRecord)]
    assert f1 == f2 and f1[0].last_rate < 0
    assert position_of(ex1, b1.account) == position_of(ex2, b2.account)
    # a snapshot taken now and the live engine go on to the same state
    eng = ex1.producer.engine
    copy = Engine.from_records(eng.records())
    assert copy.state_hash() == eng.state_hash()
    out1: list[Any] = []
    out2: list[Any] = []
    later = T0 + 3 * HOUR + 5
    assert eng.execute(FundingTick(0), later, out1) == copy.execute(FundingTick(0), later, out2)
    assert out1 == out2 and copy.state_hash() == eng.state_hash()
    assert Engine().execute(FundingTick(3), later, []) == ResultCode.MARKET_NOT_FOUND


def test_the_replica_shows_funding_in_market_stats_funding_rates_and_fundings() -> None:
    async def main() -> None:
        now = [T0 + MIN]
        ex, a, b = exchange(now)
        replica = ex.serve()
        ex.run([a.order(300_000, 10_000, 1), b.order(300_000, 10_000, 0)])
        ex.run([b.order(303_000, 20_000, 0), a.order(304_000, 20_000, 1)])
        for i in range(3):
            now[0] = T0 + (1 + i) * MIN
            tick(ex)
        now[0] = T0 + HOUR + 1
        tick(ex)
        now[0] = T0 + 2 * HOUR + 1
        tick(ex)
        server = TestServer(replica.app, host="127.0.0.1", port=0)
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as http:

                async def get(path: str, **params: Any) -> dict[str, Any]:
                    async with http.get(str(server.make_url(path)), params=params) as r:
                        assert r.status == 200, await r.text()
                        body: dict[str, Any] = await r.json()
                        return body

                rates = await get("/api/v1/funding-rates")
                models.FundingRates.model_validate(rates, strict=True)
                f = replica.state.history.funding[0]
                current = funding_rate(f.premium_sum, f.samples)
                assert rates["funding_rates"] == [
                    {
                        "market_id": 0,
                        "exchange": "lighter",
                        "symbol": "ETH",
                        "rate": current * 8 / 10**8,
                    }
                ]
                q = {"market_id": 0, "start_timestamp": 0, "end_timestamp": T0 // 1000 + 3 * 3600}
                hourly = await get("/api/v1/fundings", resolution="1h", count_back=0, **q)
                models.Fundings.model_validate(hourly, strict=True)
                first = funding_rate(3 * 1_000_000, 3)
                assert [(x["timestamp"], x["direction"]) for x in hourly["fundings"]] == [
                    ((T0 + HOUR) // 1000, "long"),
                    ((T0 + 2 * HOUR) // 1000, "long"),
                ]
                assert hourly["fundings"][0]["rate"] == f"0.{first:06d}"
                assert float(hourly["fundings"][0]["value"]) == 3000.0 * first / 10**8
                daily = await get("/api/v1/fundings", resolution="1d", count_back=0, **q)
                models.Fundings.model_validate(daily, strict=True)
                assert len(daily["fundings"]) == 1
                last = await get("/api/v1/fundings", resolution="1h", count_back=1, **q)
                assert [x["timestamp"] for x in last["fundings"]] == [(T0 + 2 * HOUR) // 1000]
                async with http.get(
                    str(server.make_url("/api/v1/fundings")), params={**q, "resolution": "8h"}
                ) as r:
                    assert r.status == 400
                    assert (await r.json())["code"] == ResultCode.INVALID_PARAM
                async with http.ws_connect(str(server.make_url("/stream"))) as ws:
                    await ws.receive()  # connected
                    await ws.send_json({"type": "subscribe", "channel": "market_stats/0"})
                    stats = (await ws.receive_json())["market_stats"]
                assert stats["funding_rate"] == f"0.{f.last_rate:06d}"
                assert stats["funding_timestamp"] == T0 + 2 * HOUR
                assert stats["current_funding_rate"] == f"0.{current:06d}"
        finally:
            await server.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_funding_clocks_go_through_arrow_snapshots_and_boot_replicas(tmp_path: Path) -> None:
    now = [T0 + 5]
    ex, a, b = exchange(now)
    ex.run([a.order(300_000, 10_000, 1), b.order(300_000, 10_000, 0)])
    tick(ex)
    now[0] = T0 + HOUR + 5
    tick(ex)
    eng = ex.producer.engine
    clocks = [r for r in eng.records() if isinstance(r, FundingRecord)]
    assert len(clocks) == 1 and clocks[0].last_funding_ms == T0 + HOUR
    write_snapshot_ipc(tmp_path / "s", 7, records_to_tables(eng.records()))
    seq, tables = read_snapshot_ipc(tmp_path / "s")
    back = Engine.from_records(tables_to_records(tables))
    assert seq == 7 and back.state_hash() == eng.state_hash()
    booted = ex.serve()  # a replica booted from the records knows the clock
    assert booted.state.history.funding[0].last_rate == clocks[0].last_rate
    (tmp_path / "s" / "funding.arrow").unlink()  # a snapshot from before funding clocks
    _, old = read_snapshot_ipc(tmp_path / "s")
    assert old["funding"].num_rows == 0
    assert not [r for r in tables_to_records(old) if isinstance(r, FundingRecord)]
