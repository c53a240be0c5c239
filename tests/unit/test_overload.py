"""Overload at the replica's door: when the queue to the sequencer is too deep, a tx is refused
at once with 23000 (HTTP 429 on REST; the reply with its id on the WebSocket), before its
signature check, its nonce not used; a later nonce of the refused key is answered the same
instead of INVALID_NONCE; and a client that re-syncs after refusals sees no INVALID_NONCE at all.

Real parts, on 127.0.0.1, no Ray: the replica's aiohttp app over a LocalExchange's engine and
caches, the service's MicroBatcher over the real gRPC data plane, whose sequencer side executes
each batch as a block (applied to the replica before it answers) once it is let through, or
after a delay (a slow sequencer)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from aiohttp.test_utils import TestServer

from raydex.actors.local import LocalExchange, Trader, new_exchange
from raydex.actors.replica import ApiConfig, Fanout, build_app
from raydex.actors.replica.batching import MicroBatcher
from raydex.actors.replica.cache.state import ReplicaState
from raydex.actors.transport import BlockHub, GrpcDataPlaneServer, GrpcTxChannel
from raydex.codecs import (
    SKIP_NONCE_FLAG,
    ResultCode,
    TxOutcome,
    decode_batch,
    encode_outcomes,
    sign_tx,
    tx_to_json_str,
)
from raydex.observability.loadtest.loadgen import (
    Item,
    LaneSpec,
    Recorder,
    encode_item,
    run_lanes,
)

T = TypeVar("T")
OK = 200
OVERLOADED = int(ResultCode.RATE_LIMITED)
NONCE = int(ResultCode.INVALID_NONCE)
SEC = 1_000_000_000


def run(coro: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 120)

    return asyncio.run(bounded())


@dataclass
class Door:
    """A replica app whose txs go through a MicroBatcher and the gRPC data plane to ``ex``."""

    ex: LocalExchange
    state: ReplicaState
    batcher: MicroBatcher
    server: TestServer
    #: set to let the sequencer answer (it holds every batch until then)
    release: asyncio.Event
    #: (account, nonce) of every tx the sequencer received
    handled: list[tuple[int, int]]

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))


def no_delay(txs: list[Any]) -> float:
    return 0.0


@asynccontextmanager
async def door(
    traders: list[Trader], max_delay_s: float, batch_delay: Callable[[list[Any]], float] = no_delay
) -> AsyncIterator[Door]:
    """``batch_delay(txs)``: seconds the sequencer takes for that batch."""
    ex = new_exchange(traders)
    p = ex.producer
    state = ReplicaState.from_records(p.engine.records(), p.seq, p.height)
    ex.attach(state)
    release = asyncio.Event()
    release.set()
    handled: list[tuple[int, int]] = []

    async def sequencer(frame: bytes) -> bytes:
        await release.wait()
        txs = decode_batch(frame)
        await asyncio.sleep(batch_delay(txs))
        handled.extend((tx.account_index, tx.nonce) for tx in txs)
        return encode_outcomes(ex.run(txs).outcomes)  # applied to ``state`` before the answer

    plane = GrpcDataPlaneServer(BlockHub(), sequencer)
    port = await plane.start()
    channel = GrpcTxChannel(f"127.0.0.1:{port}")
    batcher = MicroBatcher(channel, max_batch_txs=500)
    loop = asyncio.get_running_loop()

    async def execute(txs: list[Any]) -> list[TxOutcome]:
        return await batcher.enqueue(txs, loop.time() + 60)

    cfg = ApiConfig(admission_max_delay_s=max_delay_s, outcome_timeout_s=60)
    app = build_app(state, execute, Fanout(state, cfg), config=cfg, queue_delay=batcher.delay)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield Door(ex, state, batcher, server, release, handled)
    finally:
        release.set()
        await server.close()
        await channel.close()
        await plane.stop()


def form(tx: Any) -> dict[str, str]:
    return {"tx_type": "14", "tx_info": tx_to_json_str(tx)}


async def post(http: aiohttp.ClientSession, d: Door, tx: Any) -> tuple[int, dict[str, Any]]:
    async with http.post(d.url("/api/v1/sendTx"), data=form(tx)) as r:
        body: dict[str, Any] = await r.json()
        if r.status == 429:
            body["retry_after"] = r.headers.get("Retry-After")
        return r.status, body


async def until(cond: Callable[[], bool]) -> None:
    while not cond():
        await asyncio.sleep(0.01)


def test_a_tx_arriving_while_the_queue_is_too_deep_is_refused_at_once_with_23000() -> None:
    busy, late = Trader(1), Trader(2)

    async def main() -> None:
        async with door([busy, late], max_delay_s=0.05) as d, aiohttp.ClientSession() as http:
            d.release.clear()  # the sequencer holds the next batch
            first = asyncio.ensure_future(post(http, d, busy.order(300_000, 10, 1)))
            await until(lambda: d.batcher.delay() > 0.05)
            status, body = await post(http, d, late.order(299_000, 10, 0))
            assert (status, body["code"]) == (429, OVERLOADED), body
            assert "overloaded" in body["message"] and "tx_hash" not in body
            assert body["retry_after"] == "1"
            assert d.state.next_nonce(late.account, 0) == 0  # nothing noted: nonce not used
            assert d.state.pending_count() == 1  # only the first, in flight
            assert d.handled == []
            # the WebSocket's answer carries the request's id and type
            async with http.ws_connect(d.url("/stream")) as ws:
                await ws.receive(timeout=10)
                late.nonce = 0
                data = {"tx_type": 14, "tx_info": tx_to_json_str(late.order(299_000, 10, 0))}
                await ws.send_json({"type": "jsonapi/sendtx", "id": "q1", "data": data})
                reply = json.loads((await ws.receive(timeout=10)).data)
            assert (reply["id"], reply["type"], reply["code"]) == (
                "q1",
                "jsonapi/sendtx",
                OVERLOADED,
            )
            d.release.set()
            status, body = await first
            assert (status, body["code"]) == (200, OK)
            assert d.handled == [(busy.account, 0)]

    run(main())


def test_a_later_nonce_of_a_key_refused_at_the_door_gets_23000_not_invalid_nonce() -> None:
    """The client pipelined nonce 1 behind nonce 0, which the door refused; by the time nonce 1
    arrives the door is open again. Nonce 1 cannot be next (0 was never used): it is answered
    with the overload code, without a signature check, until the client sends 0 again."""
    busy, late = Trader(1), Trader(2)

    async def main() -> None:
        async with door([busy, late], max_delay_s=0.05) as d, aiohttp.ClientSession() as http:
            d.release.clear()
            first = asyncio.ensure_future(post(http, d, busy.order(300_000, 10, 1)))
            await until(lambda: d.batcher.delay() > 0.05)
            tx0, tx1 = late.order(299_000, 10, 0), late.order(298_000, 10, 0)
            assert (await post(http, d, tx0))[1]["code"] == OVERLOADED
            d.release.set()
            await first
            assert d.batcher.delay() == 0.0  # the door is open
            status, body = await post(http, d, tx1)
            assert (status, body["code"]) == (429, OVERLOADED), body
            assert "nonce 0" in body["message"]
            # sent again in order, both go through
            assert (await post(http, d, tx0))[1]["code"] == OK
            assert (await post(http, d, tx1))[1]["code"] == OK
            assert d.state.next_nonce(late.account, 0) == 2
            assert d.handled == [(busy.account, 0), (late.account, 0), (late.account, 1)]

    run(main())


def test_a_skip_nonce_tx_behind_a_nonce_refused_at_the_door_is_admitted() -> None:
    """SkipNonce needs no hole-free nonces: a later nonce with the attribute may skip the one
    the door refused, so it is not held behind it."""
    busy, late = Trader(1), Trader(2)

    async def main() -> None:
        async with door([busy, late], max_delay_s=0.05) as d, aiohttp.ClientSession() as http:
            d.release.clear()
            first = asyncio.ensure_future(post(http, d, busy.order(300_000, 10, 1)))
            await until(lambda: d.batcher.delay() > 0.05)
            assert (await post(http, d, late.order(299_000, 10, 0)))[1]["code"] == OVERLOADED
            d.release.set()
            await first
            jump = sign_tx(
                late.order(298_000, 10, 0)._replace(nonce=9 | SKIP_NONCE_FLAG), late.seed
            )
            status, body = await post(http, d, jump)
            assert (status, body["code"]) == (200, OK), body
            assert d.state.next_nonce(late.account, 0) == 10

    run(main())


def test_without_the_door_the_tx_waits_in_the_queue_and_executes() -> None:
    busy, late = Trader(1), Trader(2)

    async def main() -> None:
        async with door([busy, late], max_delay_s=0.0) as d, aiohttp.ClientSession() as http:
            d.release.clear()
            first = asyncio.ensure_future(post(http, d, busy.order(300_000, 10, 1)))
            await until(lambda: d.batcher.delay() > 0.05)
            second = asyncio.ensure_future(post(http, d, late.order(299_000, 10, 0)))
            await until(lambda: d.state.pending_count() == 2)  # admitted, queued
            d.release.set()
            assert [(await f)[1]["code"] for f in (first, second)] == [OK, OK]

    run(main())


def slow_in_the_burst(txs: list[Any]) -> float:
    """The sequencer's time for a batch: 50 ms for the burst's orders, none for the later ones."""
    return 0.05 if any(tx.price > 290_000 - 60 for tx in txs) else 0.0


def burst_then_calm(traders: list[Trader], skip_nonce: bool = False) -> list[Item]:
    """60 orders of the traders in a burst (400 a second), then 9 a second later (100 a second);
    ``skip_nonce``: signed with SkipNonce."""
    burst = [(i * SEC // 400, t) for i in range(20) for t in traders]
    late = [(SEC + i * SEC // 100, t) for i in range(3) for t in traders]
    items = []
    for n, (at, t) in enumerate(burst + late):
        tx = t.order(290_000 - n, 10, 0)
        if skip_nonce:
            tx = sign_tx(tx._replace(nonce=tx.nonce | SKIP_NONCE_FLAG), t.seed)
        items.append(encode_item(at, 0, t.account, [tx]))
    return items


def test_a_resyncing_client_under_overload_gets_answers_only_200_or_23000() -> None:
    """A sequencer slow in a burst (each batch 50 ms) and a door at 20 ms: a WebSocket lane
    pipelining 60 txs of 3 accounts in a burst has some refused at the door; 9 more planned a
    second later (the sequencer fast again) are sent re-signed after a nonce re-sync. Every tx
    is answered, none INVALID_NONCE (the pipelined follow-ons of a refusal are refused the
    same), and every account's nonce advanced by exactly its txs executed."""
    traders = [Trader(i) for i in (11, 12, 13)]

    async def main() -> tuple[Recorder, Door]:
        async with door(traders, max_delay_s=0.02, batch_delay=slow_in_the_burst) as d:
            items = burst_then_calm(traders)
            rec = Recorder("g")
            lane = LaneSpec(0, "g", d.server.port or 0, "ws")
            seeds = {t.account: t.seed for t in traders}
            await run_lanes([lane], items, {"g": rec}, time.monotonic_ns(), asyncio.Event(),
                            seeds=seeds, reply_timeout_s=30.0)  # fmt: skip
            for t in traders:
                ok = sum(1 for a, _ in d.handled if a == t.account)
                assert d.state.next_nonce(t.account, 0) == ok
            return rec, d

    rec, d = run(main())
    codes = {c: n for c, n in rec.codes.items() if n}
    assert set(codes) == {OK, OVERLOADED}, codes
    assert rec.done == 69 and rec.committed == codes[OK] == len(d.handled)
    assert rec.resyncs > 0 and rec.resigned > 0


def test_impolite_clients_flood_past_their_connections_and_get_23000_with_retry_after() -> None:
    """The loadtest's impolite clients (``--impolite``): the same burst against a sequencer slow
    in it, sent over REST at the planned times whatever is in flight (new connections when the
    open ones are busy), SkipNonce-signed so a refusal leaves a gap and no re-sync. Every tx is
    answered: executed, or refused at the door with 23000 and ``Retry-After``; none
    INVALID_NONCE; the refusals are counted with the header they carried."""
    traders = [Trader(i) for i in (21, 22, 23)]

    async def main() -> tuple[Recorder, Door]:
        async with door(traders, max_delay_s=0.02, batch_delay=slow_in_the_burst) as d:
            items = burst_then_calm(traders, skip_nonce=True)
            rec = Recorder("g")
            lane = LaneSpec(0, "g", d.server.port or 0, "impolite")
            await run_lanes([lane], items, {"g": rec}, time.monotonic_ns(), asyncio.Event(),
                            impolite_connections=2)  # fmt: skip
            return rec, d

    rec, d = run(main())
    codes = {c: n for c, n in rec.codes.items() if n}
    assert set(codes) <= {OK, OVERLOADED} and codes.get(OVERLOADED, 0) > 0, codes
    assert rec.done == rec.sent == 69 and rec.committed == codes[OK] == len(d.handled)
    assert rec.refusals == {OVERLOADED: codes[OVERLOADED]}
    assert rec.refusals_retry_after == rec.refusals  # each one said when to come back
    assert rec.connections > 2 and rec.connection_waits == 0  # grew past its pool of 2
    assert rec.resyncs == 0 and rec.resigned == 0


def test_the_loop_lag_probe_sees_a_blocked_loop_while_it_is_blocked() -> None:
    from raydex.actors.replica.http.admission import LoopLag

    async def main() -> tuple[float, float]:
        lag = LoopLag(interval_s=0.01)
        before = lag.now()  # not started: no lag
        probe = asyncio.ensure_future(lag.run())
        await asyncio.sleep(0.05)
        time.sleep(0.2)  # the loop is stuck in one long step (a burst of work)
        during = lag.now()
        probe.cancel()
        return before, during

    before, during = run(main())
    assert before == 0.0
    assert during >= 0.2 - 0.01  # overdue by the block, less at most one interval


def test_the_loop_lag_probe_forgets_one_stall_that_is_over_and_keeps_a_lag_that_lasts() -> None:
    """A replica whose loop stalled once (booting another replica, a GC pause) admits the
    next request; a loop late at every wake is behind."""
    from raydex.actors.replica.http.admission import LoopLag

    async def main() -> tuple[float, float]:
        lag = LoopLag(interval_s=0.01)
        probe = asyncio.ensure_future(lag.run())
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # one stall, then the loop is free again
        await asyncio.sleep(0)  # the probe wakes, 0.3 s late
        await asyncio.sleep(0.001)
        after_one = lag.now()

        async def hog() -> None:  # every step of the loop 30 ms long: the probe always late
            while True:
                time.sleep(0.03)
                await asyncio.sleep(0)

        busy = asyncio.ensure_future(hog())
        await asyncio.sleep(0.3)
        lasting = lag.last
        busy.cancel()
        probe.cancel()
        return after_one, lasting

    after_one, lasting = run(main())
    assert after_one < 0.3 - 0.01  # the stall is over: not counted
    assert lasting >= 0.01  # late at each of its last two wakes (by ~20 ms)
