"""The whole data path in one process, over real sockets: sequencer (gRPC), snapshot holder,
replicas (HTTP + WebSocket). An order sent to one replica shows up on another replica's
order_book with continuous nonces, and a replica started late serves the same state. A replica
that is behind stays off (or leaves) the shared port until caught up, and every wait for an
outcome ends by its deadline with 21822."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow as pa
import pytest

from raydex.actors.local import Trader, eth_market
from raydex.actors.replica import ApiConfig, ApiError
from raydex.actors.replica.batching import MicroBatcher
from raydex.actors.replica.service import ReplicaConfig, ReplicaService
from raydex.actors.sequencer.service import SequencerConfig, SequencerService
from raydex.actors.snapshot.holder import SnapshotConfig, SnapshotService
from raydex.actors.transport import (
    BlockHub,
    GrpcDataPlaneServer,
    GrpcTxChannel,
    RayTxChannel,
    TcpDataPlaneServer,
    TcpTxChannel,
)
from raydex.cluster.control.deploy import free_port
from raydex.codecs import (
    ResultCode,
    decode_batch,
    encode_outcomes,
    tx_hash_of,
    tx_to_json_str,
)

WAIT = 15.0


@dataclass
class Stack:
    seq: SequencerService
    holder: SnapshotService
    tables: dict[str, Any]

    async def replica(self, name: str, port: int = 0) -> ReplicaService:
        async def fetch_snapshot() -> tuple[int, int, dict[str, pa.Table]]:
            return self.tables["latest"]

        svc = ReplicaService(
            ReplicaConfig(name=name, sequencer_target=f"127.0.0.1:{self.seq.port}", http_port=port),
            fetch_snapshot,
            lambda s: self.holder.blocks_since(s, timeout_s=0.01),
        )
        await svc.start()
        return svc


@asynccontextmanager
async def stack(
    tmp: Path, traders: list[Trader], ring_size: int = 4096, every_blocks: int = 2
) -> AsyncIterator[Stack]:
    seq = SequencerService(
        SequencerConfig(wal_dir=str(tmp / "wal"), snapshot_dir=str(tmp / "s"), ring_size=ring_size)
    )
    await seq.start()
    tables: dict[str, Any] = {}
    holder = SnapshotService(
        SnapshotConfig(dir=str(tmp / "s"), every_blocks=every_blocks, every_seconds=60),
        on_tables=lambda s, h, t: tables.__setitem__("latest", (s, h, t)),
    )
    await holder.start(f"127.0.0.1:{seq.port}", f"127.0.0.1:{seq.txlog_port}")
    ops: list[Any] = [eth_market()]
    for t in traders:
        ops += t.setup(10**12)
    assert {o.code for o in await seq.submit(ops, operator=True)} == {ResultCode.OK}
    try:
        yield Stack(seq, holder, tables)
    finally:
        await holder.stop()
        await seq.stop()


async def until(cond: Any, what: str) -> None:
    for _ in range(int(WAIT / 0.02)):
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def send(session: aiohttp.ClientSession, port: int, tx: Any) -> dict[str, Any]:
    form = {"tx_type": "14", "tx_info": tx_to_json_str(tx)}
    async with session.post(f"http://127.0.0.1:{port}/api/v1/sendTx", data=form) as r:
        body: dict[str, Any] = await r.json()
        return body


def test_an_order_sent_to_one_replica_reaches_another_replicas_websocket(tmp_path: Path) -> None:
    alice, bob = Trader(1), Trader(2)

    async def run() -> None:
        async with stack(tmp_path, [alice, bob]) as s:
            r1 = await s.replica("r1")
            r2 = await s.replica("r2")
            try:
                async with aiohttp.ClientSession() as http:
                    ws = await http.ws_connect(f"http://127.0.0.1:{r2.port}/stream")
                    assert (await ws.receive_json(timeout=WAIT))["type"] == "connected"
                    await ws.send_json({"type": "subscribe", "channel": "order_book/0"})
                    first = await ws.receive_json(timeout=WAIT)
                    assert first["type"] == "subscribed/order_book"
                    nonce = first["order_book"]["nonce"]

                    body = await send(http, r1.port, alice.order(300_000, 100, is_ask=1))
                    assert body["code"] == 200, body
                    body = await send(http, r1.port, bob.order(299_000, 50, is_ask=0))
                    assert body["code"] == 200, body

                    seen: list[dict[str, Any]] = []
                    while len(seen) < 2:
                        msg = await ws.receive_json(timeout=WAIT)
                        if msg["type"] == "update/order_book":
                            seen.append(msg["order_book"])
                    assert seen[0]["begin_nonce"] == nonce
                    assert seen[1]["begin_nonce"] == seen[0]["nonce"]
                    assert seen[0]["asks"] == [{"price": "3000.00", "size": "0.0100"}]
                    assert seen[1]["bids"] == [{"price": "2990.00", "size": "0.0050"}]
                    await ws.close()

                    # a bad nonce is answered by the replica's dry-run and never sequenced
                    before = s.seq.status()["seq"]
                    alice.nonce = 0  # already used: signed correctly, but stale
                    stale = alice.order(300_500, 1, is_ask=1)
                    body = await send(http, r1.port, stale)
                    assert body["code"] == ResultCode.INVALID_NONCE
                    assert s.seq.status()["seq"] == before
            finally:
                await r1.stop()
                await r2.stop()

    asyncio.run(asyncio.wait_for(run(), 90))


def test_a_late_replica_boots_from_the_snapshot_and_serves_the_same_state(tmp_path: Path) -> None:
    alice, bob = Trader(1), Trader(2)

    async def run() -> None:
        async with stack(tmp_path, [alice, bob]) as s:
            early = await s.replica("early")
            try:
                for i in range(6):
                    outs = await early.execute_txs(
                        [alice.order(300_000 + i, 10, 1), bob.order(299_000 - i, 10, 0)]
                    )
                    assert [o.code for o in outs] == [200, 200]
                await until(lambda: s.holder.snapshot_seq >= 6, "a snapshot past the orders")
                late = await s.replica("late")
                try:
                    assert late.boots == 1 and s.tables["latest"][0] > 1
                    last = s.seq.status()["seq"]
                    await until(lambda: late.state.seq == early.state.seq == last, "same seq")
                    assert late.state.state_hash() == early.state.state_hash()
                    late.state.validate()
                    async with aiohttp.ClientSession() as http:
                        url = "/api/v1/orderBookOrders?market_id=0&limit=50"
                        books = []
                        for port in (early.port, late.port):
                            async with http.get(f"http://127.0.0.1:{port}{url}") as r:
                                books.append(await r.json())
                    assert books[0] == books[1]
                    assert books[0]["total_asks"] == 6
                finally:
                    await late.stop()
            finally:
                await early.stop()

    asyncio.run(asyncio.wait_for(run(), 90))


def test_two_replicas_share_one_port() -> None:
    port = free_port()
    alice = Trader(1)

    async def run() -> None:
        async with stack(Path(json.dumps(port).join(["/tmp/raydex-share-", ""])), [alice]) as s:
            a = await s.replica("a", port)
            b = await s.replica("b", port)
            try:
                assert a.port == b.port == port
                async with aiohttp.ClientSession() as http:
                    for _ in range(4):
                        async with http.get(f"http://127.0.0.1:{port}/api/v1/currentHeight") as r:
                            assert (await r.json())["code"] == 200
            finally:
                await a.stop()
                await b.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


# ---- lagging replicas: off the shared port, and every wait has a deadline ----------------------


async def refused(port: int) -> bool:
    """Nothing accepts connections on 127.0.0.1:``port``."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    writer.close()
    await writer.wait_closed()
    return False


#: small lags and a deadline short enough to keep the test quick, long enough that a loaded
#: machine still sends the tx before it passes (the test asserts the tx was sequenced meanwhile)
LAGGY = ApiConfig(
    outcome_timeout_s=2.0, join_lag_blocks=1, leave_lag_blocks=4, port_check_interval_s=0.3
)


def test_a_replica_booted_behind_the_ring_stays_off_the_shared_port_and_answers_21822(
    tmp_path: Path,
) -> None:
    """Issue 8, defect 2: a replica that boots from a snapshot the sequencer's ring has moved
    past (and a holder that is no newer) must not take shared-port traffic, and a tx sent
    through it must be answered 21822 / HTTP 503 with its hash instead of hanging."""
    alice, carol = Trader(1), Trader(3)

    async def run() -> None:
        async with stack(tmp_path, [alice, carol], ring_size=8, every_blocks=1) as s:
            await until(lambda: s.tables.get("latest", (0,))[0] >= 1, "the setup snapshot")
            stale = s.tables["latest"]
            await s.holder.stop()  # the holder is paused at the setup block
            for i in range(20):  # the sequencer's ring (8) moves past it
                outs = await s.seq.submit([alice.order(300_000 + i, 10, 1)])
                assert [o.code for o in outs] == [200]
            port = free_port()

            async def fetch_snapshot() -> tuple[int, int, dict[str, pa.Table]]:
                return stale

            svc = ReplicaService(
                ReplicaConfig(
                    name="behind",
                    sequencer_target=f"127.0.0.1:{s.seq.port}",
                    http_port=port,
                    api=LAGGY,
                ),
                fetch_snapshot,
                lambda q: s.holder.blocks_since(q, timeout_s=0.01),
            )
            await svc.start()
            try:
                assert svc.lag() > LAGGY.leave_lag_blocks, svc.status()
                assert not svc.serving and svc.port_joins == 0
                assert await refused(port)
                executed_before = s.seq.status()["seq"]
                tx = carol.order(299_000, 10, 0)
                async with aiohttp.ClientSession() as http:
                    form = {"tx_type": "14", "tx_info": tx_to_json_str(tx)}
                    url = f"http://127.0.0.1:{svc.direct_port}/api/v1/sendTx"
                    async with http.post(url, data=form) as r:
                        status, body = r.status, await r.json()
                    assert (status, body["code"]) == (503, ResultCode.SEQUENCER_UNAVAILABLE), body
                    assert body["tx_hash"] == tx_hash_of(tx).hex() and "hash" in body["message"]
                    # sequenced: its nonce stays pending here until its block arrives
                    assert svc.state.next_nonce(carol.account, 0) == 1
                    ws = await http.ws_connect(f"http://127.0.0.1:{svc.direct_port}/stream")
                    await ws.receive_json(timeout=WAIT)
                    tx2 = carol.order(299_000, 10, 0)
                    data = {"tx_type": 14, "tx_info": tx_to_json_str(tx2)}
                    await ws.send_json({"type": "jsonapi/sendtx", "id": 7, "data": data})
                    reply = await ws.receive_json(timeout=WAIT)
                    assert (reply["id"], reply["code"]) == (7, ResultCode.SEQUENCER_UNAVAILABLE)
                    assert reply["tx_hash"] == tx_hash_of(tx2).hex()
                    await ws.close()
                assert s.seq.status()["seq"] == executed_before + 2  # both executed meanwhile
                assert svc.status()["timeouts"]["apply"] == 2
                assert not svc.serving and await refused(port)
            finally:
                await svc.stop()

    asyncio.run(asyncio.wait_for(run(), 90))


def test_a_replica_that_falls_behind_leaves_the_shared_port_and_rejoins_when_caught_up(
    tmp_path: Path,
) -> None:
    """The sequencer moves on while this replica cannot follow it (it fails over: blocks are made
    on another port, then it comes back where the replica looks, its ring no longer holding the
    replica's next block): the replica leaves the shared port, catches up from the holder (which
    followed), and rejoins. Its direct port answers throughout."""
    alice = Trader(1)
    wal, snaps = str(tmp_path / "wal"), str(tmp_path / "s")
    tables: dict[str, Any] = {}

    def holder_for() -> SnapshotService:
        return SnapshotService(
            SnapshotConfig(dir=snaps, every_blocks=1, every_seconds=60),
            on_tables=lambda s, h, t: tables.__setitem__("latest", (s, h, t)),
        )

    alive: list[Any] = []  # services still running (stopped in reverse at the end)

    async def stop(service: Any) -> None:
        alive.remove(service)
        await service.stop()

    async def run() -> None:
        # a fixed port outside the ephemeral range: the restart below takes it back, and no
        # port-0 socket opened meanwhile (s2, the holders, clients) can land on it
        fixed = free_port()
        s1 = SequencerService(
            SequencerConfig(wal_dir=wal, snapshot_dir=snaps, ring_size=8, data_port=fixed)
        )
        p = await s1.start()
        alive.append(s1)
        h1 = holder_for()
        await h1.start(f"127.0.0.1:{p}", f"127.0.0.1:{s1.txlog_port}")
        alive.append(h1)
        holders = [h1]
        ops: list[Any] = [eth_market(), *alice.setup(10**12)]
        assert {o.code for o in await s1.submit(ops, operator=True)} == {ResultCode.OK}
        port = free_port()
        seen: list[tuple[bool, bool]] = []  # (serving, shared port refused) during catch-ups
        svc: ReplicaService | None = None

        async def fetch_snapshot() -> tuple[int, int, dict[str, pa.Table]]:
            return tables["latest"]

        async def fetch_blocks(q: int) -> tuple[int, list[tuple[int, bytes]]]:
            if svc is not None and svc.port_joins:
                seen.append((svc.serving, await refused(port)))
            return await holders[-1].blocks_since(q, timeout_s=0.01)

        await until(lambda: h1.snapshot_seq >= s1.status()["seq"], "the setup snapshot")
        svc = ReplicaService(
            ReplicaConfig(name="r", sequencer_target=f"127.0.0.1:{p}", http_port=port, api=LAGGY),
            fetch_snapshot,
            fetch_blocks,
        )
        try:
            await svc.start()
            alive.append(svc)
            assert svc.serving and not await refused(port)
            for i in range(3):  # the replica follows s1 and stays on the port
                assert [o.code for o in await s1.submit([alice.order(300_000 + i, 1, 1)])] == [200]
            await until(lambda: svc.state.seq == s1.status()["seq"], "the replica to follow s1")
            await until(lambda: h1.snapshot_seq == svc.state.seq, "h1's snapshot")
            await stop(h1)
            await stop(s1)
            s2 = SequencerService(SequencerConfig(wal_dir=wal, snapshot_dir=snaps, ring_size=8))
            q = await s2.start()  # elsewhere: the replica cannot see it
            alive.append(s2)
            h2 = holder_for()
            await h2.start(f"127.0.0.1:{q}", f"127.0.0.1:{s2.txlog_port}")
            alive.append(h2)
            holders.append(h2)
            for i in range(16):
                assert [o.code for o in await s2.submit([alice.order(301_000 + i, 1, 1)])] == [200]
            last = s2.status()["seq"]
            await until(lambda: h2.delta_seq == h2.snapshot_seq == last, "h2 to follow s2")
            assert svc.state.seq == last - 16 and svc.serving  # it cannot know yet
            await stop(s2)
            cfg = SequencerConfig(wal_dir=wal, snapshot_dir=snaps, ring_size=8, data_port=p)
            s3 = SequencerService(cfg)  # back where the replica looks, its ring past the replica
            assert await s3.start() == p
            alive.append(s3)
            await until(lambda: svc.port_leaves == 1, "the replica to leave the shared port")
            await until(lambda: svc.port_joins == 2, "the replica to rejoin once caught up")
            assert (False, True) in seen  # off the shared port while it caught up
            assert svc.state.seq == last and svc.serving and svc.lag() == 0
            svc.state.validate()
            async with aiohttp.ClientSession() as http:
                for at in (port, svc.direct_port):
                    async with http.get(f"http://127.0.0.1:{at}/api/v1/currentHeight") as r:
                        assert (await r.json())["height"] == last
        finally:
            for service in reversed(alive):
                await service.stop()

    asyncio.run(asyncio.wait_for(run(), 90))


def test_the_micro_batch_reply_has_a_deadline_and_a_caller_still_queued_is_never_sent() -> None:
    """A sequencer that takes a batch and does not answer (real gRPC data plane, its tx handler
    stalled): the caller whose batch is out gets 21822 / 503 with its hash; the caller queued
    behind it (one batch in flight) gets 21822 saying it was not sent, and never is; once the
    sequencer answers again, the batcher goes on."""
    trader = Trader(1)

    async def run() -> None:
        release = asyncio.Event()
        handled: list[int] = []

        async def stalled_sequencer(frame: bytes) -> bytes:
            await release.wait()
            txs = decode_batch(frame)
            handled.extend(t.nonce for t in txs)
            return encode_outcomes([(tx_hash_of(t), 200, 0, 1) for t in txs])

        server = GrpcDataPlaneServer(BlockHub(), stalled_sequencer)
        port = await server.start()
        channel = GrpcTxChannel(f"127.0.0.1:{port}")
        batcher = MicroBatcher(channel, max_batch_txs=1)
        loop = asyncio.get_running_loop()
        try:
            a, b, c = (trader.order(300_000, 1, 1) for _ in range(3))
            first = loop.create_task(batcher.enqueue([a], loop.time() + 0.3))
            second = loop.create_task(batcher.enqueue([b], loop.time() + 0.3))
            errors = await asyncio.gather(first, second, return_exceptions=True)
            for e in errors:
                assert isinstance(e, ApiError), e
                assert (e.code, e.status) == (ResultCode.SEQUENCER_UNAVAILABLE, 503)
            sent, queued = errors
            assert isinstance(sent, ApiError) and isinstance(queued, ApiError)
            assert sent.tx_hashes == [tx_hash_of(a)] and "look it up by hash" in sent.message
            assert queued.tx_hashes is None and "not sent" in queued.message
            release.set()
            outs = await batcher.enqueue([c], loop.time() + WAIT)
            assert [o.tx_hash for o in outs] == [tx_hash_of(c)]
            assert handled == [a.nonce, c.nonce] and batcher.timeouts == 2
        finally:
            await channel.close()
            await server.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


@pytest.mark.parametrize("plane", ["tcp", "grpc"])
@pytest.mark.parametrize("in_flight", [1, 2])
def test_the_micro_batcher_keeps_up_to_max_in_flight_batches_out_in_order(
    plane: str, in_flight: int
) -> None:
    """Over a real data plane whose sequencer holds the first batch until another arrives (at
    most 0.3 s): with two allowed out, the second batch reaches it while the first is out; with
    one, it waits for the first's answer. Either way the batches execute in the order sent."""
    trader = Trader(1)

    async def run() -> tuple[list[list[int]], bool, MicroBatcher]:
        arrived = asyncio.Event()
        handled: list[list[int]] = []
        overlapped = False

        async def sequencer(frame: bytes) -> bytes:
            nonlocal overlapped
            txs = decode_batch(frame)
            handled.append([t.nonce for t in txs])
            if len(handled) == 1:
                try:
                    await asyncio.wait_for(arrived.wait(), 0.3)
                    overlapped = True
                except TimeoutError:
                    pass
            else:
                arrived.set()
            return encode_outcomes([(tx_hash_of(t), 200, 0, 1) for t in txs])

        server: Any
        channel: Any
        if plane == "tcp":
            server = TcpDataPlaneServer(BlockHub(), sequencer)
            channel = TcpTxChannel(f"127.0.0.1:{await server.start()}")
        else:
            server = GrpcDataPlaneServer(BlockHub(), sequencer)
            channel = GrpcTxChannel(f"127.0.0.1:{await server.start()}")
        batcher = MicroBatcher(channel, max_batch_txs=500, max_in_flight=in_flight)
        loop = asyncio.get_running_loop()
        try:
            a, b, c = (trader.order(300_000, 1, 1) for _ in range(3))
            first = loop.create_task(batcher.enqueue([a], loop.time() + WAIT))
            await asyncio.sleep(0)  # the first batch goes out alone
            await asyncio.sleep(0)
            rest = [loop.create_task(batcher.enqueue([t], loop.time() + WAIT)) for t in (b, c)]
            outs = await asyncio.gather(first, *rest)
            assert [o[0].tx_hash for o in outs] == [tx_hash_of(t) for t in (a, b, c)]
            return handled, overlapped, batcher
        finally:
            await channel.close()
            await server.stop()

    handled, overlapped, batcher = asyncio.run(asyncio.wait_for(run(), 60))
    nonces = [n for batch in handled for n in batch]
    assert nonces == sorted(nonces) and len(nonces) == 3  # sent in order, executed in order
    assert handled[0] == [nonces[0]]
    assert overlapped is (in_flight == 2)
    assert batcher.pipelined == (1 if in_flight == 2 else 0)
    assert batcher.batches == len(handled)


def test_a_channel_that_may_reorder_gets_one_batch_in_flight() -> None:
    """The Ray plane's concurrent actor calls may start in any order: the batcher keeps one out
    there whatever it is asked for; the stream planes say they keep order."""
    assert RayTxChannel.ordered is False
    assert TcpTxChannel.ordered is True and GrpcTxChannel.ordered is True
    ray_channel = RayTxChannel.__new__(RayTxChannel)  # no actor needed to read the attribute
    assert MicroBatcher(ray_channel, max_batch_txs=10, max_in_flight=4).max_in_flight == 1
    with pytest.raises(ValueError):
        MicroBatcher(TcpTxChannel("127.0.0.1:1"), max_batch_txs=10, max_in_flight=0)


def test_port_and_deadline_knobs_that_contradict_each_other_are_refused() -> None:
    for bad in (
        {"join_lag_blocks": 10, "leave_lag_blocks": 5},
        {"join_lag_blocks": -1},
        {"outcome_timeout_s": 0},
        {"port_check_interval_s": 0},
    ):
        with pytest.raises(ValueError):
            ApiConfig(**bad)
    assert ApiConfig(join_lag_blocks=5, leave_lag_blocks=5).leave_lag_blocks == 5


def test_the_replica_folds_its_account_ledger_after_each_block_without_a_read(
    tmp_path: Path,
) -> None:
    alice = Trader(1)

    async def run() -> None:
        async with stack(tmp_path, [alice]) as s:
            r = await s.replica("r")
            try:
                async with aiohttp.ClientSession() as http:
                    body = await send(http, r.port, alice.order(300_000, 100, is_ask=1))
                    assert body["code"] == 200, body
                target = s.seq.status()["seq"]
                # ``pending`` does not fold (``log`` would): only the service's own fold empties it
                await until(
                    lambda: r.state.seq >= target and r.state.ledger.pending == 0,
                    "the ledger folded after the block",
                )
                log = r.state.ledger.log(alice.account)
                assert log is not None and [t.tx_type for t in log.txs][-1] == 14
            finally:
                await r.stop()

    asyncio.run(asyncio.wait_for(run(), 90))
