"""The replica's apply loop never ends silently (issue 8, defect 12), and its status is cheap.

A real gRPC block server (``BlockHub`` + ``GrpcDataPlaneServer`` on 127.0.0.1) stands in for the
sequencer and serves real blocks from a ``LocalExchange``, except one poisoned block: it decodes,
changes an account's balance, then names a market that does not exist, so ``apply_block`` raises
half-way (``KeyError``) with the balance already changed. The snapshot holder's part is played by
the exchange's own records (the snapshot) and its good frames (the catch-up)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pyarrow as pa
import pytest

from raydex.actors.local import Trader, new_exchange
from raydex.actors.replica import ReplicaState
from raydex.actors.replica.service import HASH_QUIET_S, ReplicaConfig, ReplicaService
from raydex.actors.transport import BlockHub, GrpcDataPlaneServer
from raydex.codecs import BalanceChanged, LevelChanged, encode_block, records_to_tables
from raydex.observability.metrics import LocalSink, Recorder

WAIT = 15.0


async def until(cond: Any, what: str) -> None:
    for _ in range(int(WAIT / 0.02)):
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_block_that_fails_half_applied_is_logged_counted_and_the_loop_resyncs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alice, bob = Trader(1), Trader(2)
    ex = new_exchange([alice, bob])  # block 1: market, keys, deposits
    reference = ex.serve()  # fed every good block: what the replica must end up equal to
    snapshot = (
        ex.producer.seq,
        ex.producer.height,
        records_to_tables(ex.producer.engine.records()),
    )
    good: dict[int, bytes] = {1: ex.frames[0]}

    async def fetch_snapshot() -> tuple[int, int, dict[str, pa.Table]]:
        return snapshot

    async def fetch_blocks(after: int) -> tuple[int, list[tuple[int, bytes]]]:
        last = max(good)
        return last, [(s, good[s]) for s in range(after + 1, last + 1)]

    async def scenario() -> None:
        hub = BlockHub()
        hub.publish_nowait(1, good[1])
        server = GrpcDataPlaneServer(hub)
        await server.start()
        svc = ReplicaService(
            ReplicaConfig(name="r", sequencer_target=server.address),
            fetch_snapshot,
            fetch_blocks,
        )
        sink = LocalSink()
        svc.supervisor.metrics = recorder = Recorder("replica", "r", sink=sink)
        await svc.start()
        try:
            assert svc.state.seq == 1
            # block 2: the exchange's real one for catch-up; the stream gets the poisoned one
            block = ex.run([alice.order(300_000, 10, 1)])
            good[2] = block.frame
            poison = encode_block(
                2,
                block.height,
                block.timestamp_ns,
                [BalanceChanged(alice.account, 1), LevelChanged(77, 0, 100, 1)],
            )
            hub.publish_nowait(2, poison)
            block3 = ex.run([bob.order(299_000, 10, 0)])
            good[3] = block3.frame
            hub.publish_nowait(3, block3.frame)

            await until(lambda: svc.state.seq >= 3, "the replica past the poisoned block")
            assert svc.supervisor.restarts("apply") == 1
            assert svc.resyncs == 1
            assert svc.state.accounts[alice.account].collateral != 1  # the half-apply is gone
            assert svc.state.state_hash() == reference.state.state_hash()
            recorder.flush()
            assert sink.value("raydex_loop_restarts_total", loop="apply") == 1
            # and it keeps following the stream
            block4 = ex.run([alice.order(300_100, 10, 1)])
            good[4] = block4.frame
            hub.publish_nowait(4, block4.frame)
            await until(lambda: svc.state.seq == 4, "block 4 applied")
            assert svc.state.state_hash() == reference.state.state_hash()
        finally:
            await svc.stop()
            await server.stop(grace=0)

    with caplog.at_level(logging.INFO):
        asyncio.run(asyncio.wait_for(scenario(), 60))
    assert any("loop 'apply' failed" in r.getMessage() for r in caplog.records)
    assert any("resynced from the snapshot" in r.getMessage() for r in caplog.records)


def test_status_reports_the_hash_of_its_seq_once_quiet_without_hashing_under_load() -> None:
    alice = Trader(1)
    ex = new_exchange([alice])
    calls = 0

    class Counting(ReplicaState):
        def state_hash(self) -> bytes:
            nonlocal calls
            calls += 1
            return super().state_hash()

    async def scenario() -> None:
        nonlocal calls
        records = list(ex.producer.engine.records())
        state = Counting.from_records(records, ex.producer.seq, ex.producer.height)

        async def fetch_snapshot() -> tuple[int, int, dict[str, pa.Table]]:
            return ex.producer.seq, ex.producer.height, records_to_tables(records)

        async def fetch_blocks(after: int) -> tuple[int, list[tuple[int, bytes]]]:
            return after, []

        hub = BlockHub(last_seq=1)
        server = GrpcDataPlaneServer(hub)
        await server.start()
        svc = ReplicaService(
            ReplicaConfig(name="r", sequencer_target=server.address), fetch_snapshot, fetch_blocks
        )
        await svc.start()
        svc.state.__class__ = Counting  # the same caches, counting hash computations
        del state
        svc.hash_quiet_s = 3600.0  # under load: never quiet that long
        try:
            for i in range(20):
                block = ex.run([alice.order(300_000 + i, 10, 1)])
                hub.publish_nowait(block.seq, block.frame)
                await until(lambda seq=block.seq: svc.state.seq == seq, "applied")
                st = svc.status()
                assert st["state_hash_seq"] < st["seq"]
            assert calls == 0
            svc.hash_quiet_s = HASH_QUIET_S
            await asyncio.sleep(HASH_QUIET_S * 2)  # quiet now (at least this long)
            st = svc.status()
            assert (st["state_hash_seq"], calls) == (st["seq"], 1)
            assert st["state_hash"] == svc.state.state_hash().hex()
            svc.status()
            assert calls == 2  # (one of them the explicit call above): no recomputation
        finally:
            await svc.stop()
            await server.stop(grace=0)

    asyncio.run(asyncio.wait_for(scenario(), 60))
