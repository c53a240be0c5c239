"""The load generator after a rejection behaves as a real client: it re-syncs the account's nonce
from the server (``nextNonce``) and re-signs, instead of sending planned nonces that can no longer
be valid; errors are told apart by cause. Against a real replica app (``LocalExchange``: the
replica's aiohttp app, caches and dry-run over a real engine), on 127.0.0.1, no Ray.

Also here: the server-side half of issue 9's INVALID_NONCE cascade, fixed. A WebSocket that
pipelines past the replica's ``ws_max_inflight_txs`` gets a 21506 refusal carrying the request's
id and type, so the client knows which tx was refused (its nonce stays unconsumed); and a tx
queued in the replica's micro-batcher behind a tx of its key that was dropped unsent is not
sent either (its nonce could no longer be valid at the sequencer)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from raydex.actors.local import LocalExchange, Trader, eth_market
from raydex.actors.replica import ApiConfig
from raydex.actors.sequencer import BlockProducer
from raydex.codecs import ResultCode, TxOutcome, Verifier
from raydex.engine import Engine
from raydex.observability.loadtest.loadgen import (
    Item,
    LaneSpec,
    NonceKeeper,
    Recorder,
    encode_item,
    reply_facts,
    run_lanes,
)

T = TypeVar("T")
OK = 200
BAD_MARKET = 7  # no such market: the replica's dry-run rejects it (the nonce is not consumed)
MNF = int(ResultCode.MARKET_NOT_FOUND)
NONCE = int(ResultCode.INVALID_NONCE)
SEC = 1_000_000_000


class SlowExchange(LocalExchange):
    """A LocalExchange whose sequencer takes ``delay_s`` per request, so a WebSocket client's
    txs are in flight together (a busy sequencer)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(BlockProducer(Engine(), None, Verifier()))
        self.delay_s = delay_s

    async def execute(self, txs: list[Any]) -> list[TxOutcome]:
        await asyncio.sleep(self.delay_s)
        return self.run(txs).outcomes


def exchange(traders: list[Trader], delay_s: float = 0.0) -> LocalExchange:
    ex = SlowExchange(delay_s)
    ops: list[Any] = [eth_market(0)]
    for t in traders:
        ops += t.setup(10**12)
    ex.run(ops, operator=True)
    return ex


def run(coro: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 120)

    return asyncio.run(bounded())


def orders(t: Trader, markets: list[int], at_ns: list[int]) -> list[Item]:
    """One limit order per entry, signed with the trader's consecutive nonces (as planned)."""
    return [
        encode_item(at, 0, t.account, [t.order(290_000 - 100 * i, 10, 0, market=m)])
        for i, (m, at) in enumerate(zip(markets, at_ns, strict=True))
    ]


async def drive(
    ex: LocalExchange,
    kind: str,
    items: list[Item],
    seeds: dict[int, bytes] | None,
    config: ApiConfig | None = None,
    client_inflight: int = 256,
) -> Recorder:
    replica = ex.serve(config)
    server = TestServer(replica.app, host="127.0.0.1", port=0)
    await server.start_server()
    rec = Recorder("g")
    try:
        await run_lanes([LaneSpec(0, "g", server.port or 0, kind)], items, {"g": rec},
                        time.monotonic_ns(), asyncio.Event(), seeds=seeds,
                        ws_max_inflight=client_inflight, reply_timeout_s=1.0)  # fmt: skip
    finally:
        await server.close()
    return rec


def codes_in_order(rec: Recorder) -> dict[int, int]:
    return {c: n for c, n in rec.codes.items() if n}


@pytest.mark.parametrize("kind", ["rest", "ws"])
def test_after_a_dry_run_rejection_the_client_resyncs_and_its_later_txs_are_accepted(
    kind: str,
) -> None:
    t = Trader(10)
    ex = exchange([t])
    # planned nonces 0..3; the one on a missing market is refused without consuming nonce 1;
    # the later ones are planned after its answer, so they are sent re-synced
    items = orders(t, [0, BAD_MARKET, 0, 0], [0, 0, SEC // 2, SEC // 2 + 1])
    rec = run(drive(ex, kind, items, {t.account: t.seed}))
    assert codes_in_order(rec) == {OK: 3, MNF: 1}
    assert rec.errors_by_cause()["root"] == {"MARKET_NOT_FOUND": 1}
    assert rec.resyncs == 1 and rec.resigned == 2
    assert rec.committed == 3
    state = ex.replicas[0][0]
    assert state.next_nonce(t.account, 0) == 3  # 0, then the two re-signed as 1 and 2


def test_without_resync_every_later_tx_of_the_account_fails_invalid_nonce() -> None:
    t = Trader(10)
    ex = exchange([t])
    items = orders(t, [0, BAD_MARKET, 0, 0, 0], [0, 0, SEC // 4, SEC // 4 + 1, SEC // 4 + 2])
    rec = run(drive(ex, "rest", items, None))
    assert codes_in_order(rec) == {OK: 1, MNF: 1, NONCE: 3}
    assert rec.resyncs == 0


def test_txs_pipelined_behind_a_rejection_are_counted_as_its_follow_ons() -> None:
    t = Trader(10)
    ex = exchange([t])
    # all planned at once on one WebSocket: whatever was sent before the refusal of the first
    # came back is rejected INVALID_NONCE as a follow-on; the last is planned well after it
    items = orders(t, [BAD_MARKET, 0, 0, 0], [0, 0, 0, SEC // 2])
    rec = run(drive(ex, "ws", items, {t.account: t.seed}))
    causes = rec.errors_by_cause()
    assert causes["root"] == {"MARKET_NOT_FOUND": 1}
    assert rec.codes[OK] + rec.follow_on[NONCE] == 3 and rec.codes[NONCE] == rec.follow_on[NONCE]
    assert rec.codes[OK] >= 1 and rec.resyncs >= 1
    assert ex.replicas[0][0].next_nonce(t.account, 0) == rec.codes[OK]


def test_the_keeper_tells_follow_ons_from_causes_by_the_epoch_a_tx_was_sent_in() -> None:
    t = Trader(10)
    a, b, c = orders(t, [0, 0, 0], [0, 0, 0])
    keeper = NonceKeeper({t.account: t.seed})
    ea, eb = keeper.sent(a), keeper.sent(b)
    assert keeper.answered(a, ea, stale=True) is False  # the cause: the account is now stale
    assert t.account in keeper.stale
    assert keeper.answered(b, eb, stale=True) is True  # sent before that was known
    ec = keeper.sent(c)
    assert keeper.answered(c, ec, stale=True) is False  # sent after: a cause of its own
    assert keeper.epoch[t.account] == 2


def test_reply_facts_say_what_was_sequenced_and_when_the_nonce_is_unknown() -> None:
    assert reply_facts({"code": 200, "tx_hash": "ab"}, 1) == ([200], 1, False)
    # refused by the engine in its block: answered 200 (as Lighter), its nonce consumed
    assert reply_facts({"code": 200, "tx_hash": "ab", "codes": 21700}, 1) == ([21700], 1, False)
    batch = {"code": 200, "tx_hash": ["a", "b"], "codes": [200, 21700]}
    assert reply_facts(batch, 2) == ([200, 21700], 2, False)
    # refused at the engine's gates: sequenced, but its nonce is still free
    assert reply_facts({"code": NONCE, "tx_hash": "ab", "codes": NONCE}, 1) == ([NONCE], 1, True)
    # refused by the dry-run: nothing sequenced, the nonce not consumed
    assert reply_facts({"code": MNF, "message": "x"}, 1) == ([MNF], 0, True)
    # 21822: may or may not execute
    assert reply_facts({"code": 21822, "tx_hash": ["a", "b"]}, 2) == ([21822] * 2, 0, True)
    batch = {"code": NONCE, "tx_hash": ["a", "b"], "codes": [200, NONCE]}
    assert reply_facts(batch, 2) == ([200, NONCE], 2, True)
    assert reply_facts(None, 1)[2] is True


def test_a_polite_client_never_exceeds_the_servers_websocket_inflight_limit() -> None:
    t = Trader(10)
    ex = exchange([t], delay_s=0.05)
    items = orders(t, [0] * 6, [0] * 6)
    rec = run(drive(ex, "ws", items, {t.account: t.seed}, ApiConfig(ws_max_inflight_txs=2), 2))
    assert codes_in_order(rec) == {OK: 6}


def test_pipelining_past_the_servers_limit_is_refused_tx_by_tx_with_its_id() -> None:
    """Issue 9's ~41k INVALID_NONCE and ~2k NO_REPLY at --tps 5000, in miniature: the generator
    pipelined more txs on a WebSocket than ``ws_max_inflight_txs``; each refused tx is now
    answered 21506 with its id (no NO_REPLY), its nonce unconsumed, so a client that does not
    re-sync sees every later planned tx of the account fail INVALID_NONCE at the dry-run."""
    t = Trader(10)
    ex = exchange([t], delay_s=0.2)
    items = orders(t, [0] * 6, [0, 0, 0, 0, SEC, SEC + 1])
    rec = run(drive(ex, "ws", items, None, ApiConfig(ws_max_inflight_txs=2), client_inflight=64))
    assert codes_in_order(rec) == {OK: 2, int(ResultCode.TOO_MANY_PENDING_TXS): 2, NONCE: 2}


def test_a_websocket_tx_refused_for_too_many_in_flight_is_answered_with_its_id() -> None:
    t = Trader(10)
    ex = exchange([t], delay_s=0.2)

    async def main() -> list[dict[str, Any]]:
        replica = ex.serve(ApiConfig(ws_max_inflight_txs=1))
        server = TestServer(replica.app, host="127.0.0.1", port=0)
        await server.start_server()
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(str(server.make_url("/stream"))) as ws,
            ):
                await ws.receive(timeout=10)  # connected
                for rid, item in enumerate(orders(t, [0, 0], [0, 0]), start=1):
                    await ws.send_str(item.ws_text % rid)
                replies = [json.loads((await ws.receive(timeout=10)).data) for _ in range(2)]
        finally:
            await server.close()
        return replies

    replies = run(main())
    refused = [r for r in replies if r.get("code") == int(ResultCode.TOO_MANY_PENDING_TXS)]
    assert len(refused) == 1
    assert refused[0].get("id") == 2 and refused[0].get("type") == "jsonapi/sendtx"


def test_a_tx_queued_behind_a_dropped_tx_of_the_same_key_is_not_sent() -> None:
    """A sequencer stalled on one batch (real gRPC data plane): tx 1 of the account times out
    in the queue and is dropped unsent; tx 2, queued behind it with a later deadline, must not
    reach the sequencer (its nonce can no longer be valid there): its caller is answered "not
    sent" at once. Another account's tx queued behind them is sent as usual."""
    from raydex.actors.replica import ApiError
    from raydex.actors.replica.batching import MicroBatcher
    from raydex.actors.transport import BlockHub, GrpcDataPlaneServer, GrpcTxChannel
    from raydex.codecs import decode_batch, encode_outcomes, tx_hash

    t, u = Trader(1), Trader(2)

    async def main() -> tuple[list[tuple[int, int]], BaseException | None, MicroBatcher]:
        release = asyncio.Event()
        handled: list[tuple[int, int]] = []

        async def stalled_sequencer(frame: bytes) -> bytes:
            await release.wait()
            txs = decode_batch(frame)
            handled.extend((tx.account_index, tx.nonce) for tx in txs)
            return encode_outcomes([(tx_hash(tx), 200, 0, 1) for tx in txs])

        server = GrpcDataPlaneServer(BlockHub(), stalled_sequencer)
        port = await server.start()
        channel = GrpcTxChannel(f"127.0.0.1:{port}")
        batcher = MicroBatcher(channel, max_batch_txs=1)
        loop = asyncio.get_running_loop()
        try:
            a, b, c = (t.order(300_000, 1, 1) for _ in range(3))
            first = loop.create_task(batcher.enqueue([a], loop.time() + 30))  # sent, stalls
            second = loop.create_task(batcher.enqueue([b], loop.time() + 0.2))  # will drop
            third = loop.create_task(batcher.enqueue([c], loop.time() + 1000))
            other = loop.create_task(batcher.enqueue([u.order(300_000, 1, 1)], loop.time() + 30))
            with pytest.raises(ApiError, match="not sent"):
                await second
            # answered with the drop while the sequencer is still stalled, not at its deadline
            await asyncio.wait([third])
            release.set()
            await first
            await other
        finally:
            await channel.close()
            await server.stop()
        return handled, third.exception(), batcher

    handled, third_error, batcher = run(main())
    assert handled == [(1, 0), (2, 0)]  # nonce 2, queued behind the dropped nonce 1, never sent
    assert isinstance(third_error, ApiError) and "not sent" in third_error.message
    assert third_error.tx_hashes is None and batcher.dropped_behind == 1
