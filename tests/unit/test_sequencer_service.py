"""The sequencer service answers tx batches over a real gRPC stream only after the block is
logged, publishes every block in order, and a restarted sequencer has the same state."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from raydex.actors.local import eth_market
from raydex.actors.sequencer.service import SequencerConfig, SequencerService
from raydex.actors.snapshot import write_snapshot
from raydex.actors.transport import GrpcBlockSource, GrpcTxChannel, TcpTxChannel
from raydex.codecs import (
    CreateOrder,
    Deposit,
    OrderType,
    RegisterApiKey,
    ResultCode,
    SetMarkPrice,
    TxOutcome,
    TxType,
    decode_block,
    decode_outcomes,
    decode_wal_read_reply,
    decode_wal_record,
    encode_batch,
    encode_wal_read_request,
    generate_key,
    sign_tx,
)
from raydex.observability.metrics import LocalSink, Recorder

SEED, PUB = generate_key()
FAR = 4_000_000_000_000
ETH = eth_market()  # ETH-PERP: 2 price / 4 size decimals, mark 3000.00


def config(tmp: Path) -> SequencerConfig:
    return SequencerConfig(wal_dir=str(tmp / "wal"), snapshot_dir=str(tmp / "snap"))


def order(account: int, nonce: int, price: int, is_ask: int) -> CreateOrder:
    tx = CreateOrder(
        account, 0, 0, nonce + 1, 100, price, is_ask, 0, 1, 0, 0, -1, FAR, nonce, bytes(80)
    )
    return sign_tx(tx, SEED)


async def scenario(tmp: Path) -> tuple[dict[str, object], list[int]]:
    svc = SequencerService(config(tmp))
    port = await svc.start()
    setup: list[object] = [ETH]
    for a in (1, 2):
        setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    outs = await svc.submit(setup, operator=True)
    assert {o.code for o in outs} == {ResultCode.OK}

    channel = GrpcTxChannel(f"127.0.0.1:{port}")
    source = GrpcBlockSource(f"127.0.0.1:{port}", name="test")
    seen: list[int] = []

    async def follow() -> None:
        async for seq, frame in source.subscribe(1):
            assert decode_block(frame).seq == seq
            seen.append(seq)
            if len(seen) == 4:
                return

    follower = asyncio.create_task(follow())
    for i in range(3):
        batch = [order(1, i, 300_000 + i, 1), order(2, i, 300_000 + i, 0)]
        result = decode_outcomes(await channel.submit(encode_batch(batch)))
        assert [r.code for r in result] == [ResultCode.OK, ResultCode.OK]
        assert result[0].seq == result[1].seq
    await asyncio.wait_for(follower, 10)
    await channel.close()
    await source.close()
    status = {**svc.status(), **svc.state_hash()}
    await svc.stop()
    return status, seen


def test_batches_are_sequenced_published_in_order_and_survive_a_restart(tmp_path: Path) -> None:
    status, seen = asyncio.run(scenario(tmp_path))
    assert seen == [1, 2, 3, 4]
    assert status["seq"] == 4
    wal = status["wal"]
    assert (wal["segments_preallocated"], wal["segments_appended"]) == (1, 0)  # the default
    assert wal["journal_policy"] == "SCHED_OTHER"  # journal_realtime is off unless the spec asks
    assert wal["sync_us"]["count"] >= 4
    assert wal["handoff_us"]["count"] == wal["sync_us"]["count"]  # one per sync
    # the CPU of each step, counted on the real path: 3 batches in, 4 blocks out (the setup's too)
    steps = status["steps"]
    assert isinstance(steps, dict) and (steps["batches"], steps["blocks"]) == (3, 4)
    assert all(steps[k] > 0 for k in ("decode_ns", "engine_ns", "close_ns", "publish_ns", "wal_ns"))

    async def restart() -> dict[str, object]:
        svc = SequencerService(config(tmp_path))
        await svc.start()
        try:
            return {**svc.status(), **svc.state_hash()}
        finally:
            await svc.stop()

    again = asyncio.run(restart())
    assert again["state_hash"] == status["state_hash"]
    assert (again["seq"], again["height"]) == (status["seq"], status["height"])
    assert again["replayed_blocks"] == 4
    # the restart writes on over the zeros of the same preallocated segment
    assert (again["wal"]["segments_preallocated"], again["wal"]["segments_appended"]) == (0, 0)
    assert len(list((tmp_path / "wal").glob("wal-*.log"))) == 1


def test_an_undecodable_batch_is_refused_whole(tmp_path: Path) -> None:
    async def run() -> list[int]:
        svc = SequencerService(config(tmp_path))
        await svc.start()
        try:
            before = svc.state_hash()
            reply = decode_outcomes(await svc.handle_batch(b"\x01\x00"))
            assert svc.state_hash() == before
            return [r.code for r in reply]
        finally:
            await svc.stop()

    assert asyncio.run(run()) == [ResultCode.INVALID_TX_INFO]


def test_the_oracle_moves_marks_toward_the_book_mid_in_capped_steps(tmp_path: Path) -> None:
    async def run() -> list[int]:
        cfg = SequencerConfig(
            wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"),
            oracle_interval_ms=0, oracle_max_step_bps=10,
        )  # fmt: skip
        svc = SequencerService(cfg)
        await svc.start()
        try:
            setup: list[object] = [ETH]
            for a in (1, 2):
                setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
            await svc.submit(setup, operator=True)
            await svc.submit([order(1, 0, 301_000, 1), order(2, 0, 300_800, 0)])
            marks = []
            for _ in range(3):
                cmds = svc.oracle_commands()
                marks += [c.mark_price for c in cmds]
                await svc.submit(cmds, operator=True)
            assert svc.oracle_commands() == []
            return marks
        finally:
            await svc.stop()

    # mid 300_900, mark 300_000, at most 10 bps (300 ticks) a step
    assert asyncio.run(run()) == [300_300, 300_600, 300_900]


async def funded(svc: SequencerService) -> None:
    setup: list[object] = [ETH]
    for a in (1, 2):
        setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    assert {o.code for o in await svc.submit(setup, operator=True)} == {ResultCode.OK}


def test_a_wal_write_error_fails_the_waiters_and_ends_the_sequencer_and_a_restart_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fatal: list[str] = []
    acked: list[TxOutcome] = []

    async def run() -> tuple[str | None, list[BaseException]]:
        svc = SequencerService(config(tmp_path), on_fatal=fatal.append)
        await svc.start()
        await funded(svc)
        acked.extend(await svc.submit([order(1, 0, 300_000, 1)]))
        real = os.pwrite

        def disk_full(fd: int, data: bytes | memoryview, offset: int) -> int:
            if fd == svc.wal._fd:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd, data, offset)

        monkeypatch.setattr(os, "pwrite", disk_full)
        results = await asyncio.gather(
            svc.submit([order(1, 1, 300_000, 1)]),
            svc.submit([order(2, 0, 300_000, 0)]),
            return_exceptions=True,
        )
        monkeypatch.undo()
        with pytest.raises(RuntimeError, match="WAL write failed"):
            await svc.submit([order(2, 1, 300_000, 0)])  # nothing is taken after the failure
        failed = svc.status()["failed"]
        await svc.stop()
        return failed, [r for r in results if isinstance(r, BaseException)]

    with caplog.at_level(logging.ERROR):
        failed, errors = asyncio.run(run())
    assert len(errors) == 2 and all("No space" in str(e) for e in errors)  # not acknowledged
    assert fatal == [failed] and failed is not None and "after seq 2" in failed
    assert "WAL write failed" in caplog.text

    async def restart() -> dict[str, object]:
        svc = SequencerService(config(tmp_path))
        await svc.start()
        try:
            return {**svc.status(), **svc.state_hash()}
        finally:
            await svc.stop()

    again = asyncio.run(restart())
    assert again["seq"] == acked[0].seq == 2  # everything acknowledged, nothing else


def test_status_never_hashes_the_state_on_the_block_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run() -> dict[str, object]:
        svc = SequencerService(config(tmp_path))
        await svc.start()
        try:
            await funded(svc)
            assert svc.producer is not None

            class NoHashing:
                """The engine as status() sees it, but hashing the state fails the test (a
                compiled Engine's methods cannot be patched on the instance)."""

                def __init__(self, engine: object) -> None:
                    self._engine = engine

                def __getattr__(self, name: str) -> object:
                    if name == "state_hash":
                        raise AssertionError("O(state) hash computed by status()")
                    return getattr(self._engine, name)

            monkeypatch.setattr(svc.producer, "engine", NoHashing(svc.producer.engine))
            return svc.status()
        finally:
            await svc.stop()

    status = asyncio.run(run())
    assert status["seq"] == 1 and status["state_hash_seq"] == -1  # no snapshot yet


def test_records_older_than_the_ring_are_served_from_the_wal_in_bounded_reads(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        cfg = dataclasses.replace(config(tmp_path), ring_size=4, txlog_read_max_records=5)
        svc = SequencerService(cfg)
        await svc.start()
        reader = GrpcTxChannel(f"127.0.0.1:{svc.txlog_port}")
        try:
            await funded(svc)
            for i in range(11):
                await svc.submit([order(1, i, 300_000, 1)])
            assert svc.hub is not None and svc.hub.statistics().floor == 8  # ring: 9..12
            got: list[int] = []
            seq = 1
            while seq < 12:
                reply = decode_wal_read_reply(
                    await reader.submit(encode_wal_read_request(seq, 1000))
                )
                assert reply.first_held == 1 and reply.last_seq == 12
                assert len(reply.records) <= 5  # the sequencer's bound wins
                assert reply.records[0][0] == seq  # the record at seq first (for the check)
                got += [s for s, _ in reply.records if s > seq]
                seq = reply.records[-1][0]
            assert got == list(range(2, 13))
            assert all(decode_wal_record(r).seq == s for s, r in reply.records)
        finally:
            await reader.close()
            await svc.stop()

    asyncio.run(run())


def test_the_wal_is_pruned_behind_durable_snapshots_and_recovery_skips_what_they_hold(
    tmp_path: Path,
) -> None:
    cfg = dataclasses.replace(config(tmp_path), wal_segment_bytes=1, wal_keep_blocks=2)

    async def run() -> tuple[list[Path], dict[str, object]]:
        svc = SequencerService(cfg)
        await svc.start()
        try:
            await funded(svc)
            for i in range(8):
                await svc.submit([order(1, i, 300_000, 1)])
                assert svc.producer is not None
                if svc.producer.seq in (4, 7):
                    p = svc.producer
                    write_snapshot(Path(cfg.snapshot_dir), p.engine, p.seq, p.height)
            removed = svc.maintain_once()
            return removed, {**svc.status(), **svc.state_hash()}
        finally:
            await svc.stop()

    removed, status = asyncio.run(run())
    # keep back to the oldest snapshot (4) and 2 blocks behind the newest (7): through seq 4
    assert [p.name for p in removed] == [f"wal-{s:020d}.log" for s in (1, 2, 3, 4)]
    assert status["state_hash_seq"] == 7 and status["wal"]["first_seq"] == 5  # type: ignore[index]

    async def restart() -> dict[str, object]:
        svc = SequencerService(cfg)
        await svc.start()
        try:
            return {**svc.status(), **svc.state_hash()}
        finally:
            await svc.stop()

    again = asyncio.run(restart())
    assert again["state_hash"] == status["state_hash"] and again["replayed_blocks"] == 2


def test_the_oracle_loop_survives_a_bad_iteration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sink = LocalSink()

    async def run() -> tuple[int, int]:
        cfg = dataclasses.replace(config(tmp_path), oracle_interval_ms=5, oracle_max_step_bps=10)
        svc = SequencerService(cfg)
        svc.metrics = svc.supervisor.metrics = Recorder("sequencer", "sequencer", sink=sink)
        await svc.start()
        try:
            await funded(svc)
            oracle = svc.oracle
            assert oracle is not None
            real = oracle.commands_now
            calls = {"n": 0}

            def flaky() -> list[SetMarkPrice]:
                calls["n"] += 1
                if calls["n"] == 1:
                    raise ZeroDivisionError("a bad oracle input")
                return real()

            monkeypatch.setattr(oracle, "commands_now", flaky)
            await svc.submit([order(1, 0, 301_000, 1), order(2, 0, 300_800, 0)])
            for _ in range(500):  # bounded: the mark reaches the mid in 3 capped steps
                await asyncio.sleep(0.01)
                if svc._engine().market(0).mark_price == 300_900:
                    break
            svc.metrics.flush()
            return svc._engine().market(0).mark_price, svc.supervisor.restarts("oracle")
        finally:
            await svc.stop()

    with caplog.at_level(logging.ERROR):
        mark, restarts = asyncio.run(run())
    assert mark == 300_900 and restarts == 1
    assert "loop 'oracle' failed" in caplog.text and "a bad oracle input" in caplog.text
    assert sink.value("raydex_loop_restarts_total", role="sequencer", name="sequencer",
                      group="sequencer", loop="oracle") == 1  # fmt: skip


def test_a_block_closes_when_the_previous_one_is_durable_so_blocks_grow_with_the_load(
    tmp_path: Path,
) -> None:
    """Natural batching: while block N waits for its fsync, every batch that arrives joins block
    N+1, which closes the moment N is durable; nothing is acknowledged before its fsync."""

    async def run() -> tuple[list[int], int, list[int]]:
        svc = SequencerService(config(tmp_path))
        await svc.start()
        try:
            await funded(svc)  # block 1
            assert svc.journal is not None and svc.producer is not None
            acked: list[int] = []

            async def send(i: int) -> None:
                outs = await svc.submit([order(1 + i % 2, i // 2, 300_000 + i, i % 2)])
                acked.append(outs[0].seq)

            # The disk "is slow": the journal thread's next fsync waits for the gate.
            wal = svc.journal.wal
            gate = threading.Event()
            real_sync = wal.sync

            def slow_sync() -> int:
                gate.wait(30)
                return real_sync()

            wal.sync = slow_sync  # type: ignore[method-assign]
            try:
                tasks = [asyncio.create_task(send(0))]
                for _ in range(3):
                    await asyncio.sleep(0)  # block 2 (1 tx) is closed and handed to the journal
                for i in range(1, 12):
                    tasks.append(asyncio.create_task(send(i)))
                    await asyncio.sleep(0)  # one batch per loop turn, as from many replicas
                for _ in range(20):
                    await asyncio.sleep(0)
                during = list(acked)
                closed = svc.producer.seq
            finally:
                gate.set()
            await asyncio.gather(*tasks)
            return during, closed, sorted(acked)
        finally:
            await svc.stop()

    during, closed, acked = asyncio.run(run())
    assert during == []  # no ack while the fsync is pending
    assert closed == 2  # one block in flight; the open one waits for it
    assert acked == [2] + [3] * 11  # the eleven batches rode one block


@pytest.mark.parametrize("plane", ["grpc", "tcp"])
def test_a_streams_verified_batches_execute_in_arrival_order_even_when_a_later_check_ends_first(
    tmp_path: Path, plane: str
) -> None:
    """A replica keeps several batches out on its stream (``MicroBatcher``). The sequencer checks
    signatures slice by slice, yielding between slices, so a small batch sent second finishes
    its check first; it must still execute second (a later tx of a key carries a later nonce).
    Over a real data-plane stream of each kind."""

    async def run() -> tuple[list[TxOutcome], list[TxOutcome]]:
        # one tx per slice: the big batch yields after every signature
        cfg = dataclasses.replace(config(tmp_path), verify_slice_ms=1e-6, data_plane=plane)
        svc = SequencerService(cfg)
        port = await svc.start()
        address = f"127.0.0.1:{port}"
        channel = TcpTxChannel(address) if plane == "tcp" else GrpcTxChannel(address)
        try:
            await funded(svc)
            assert svc.producer is not None and svc.producer.verify_signatures
            big = encode_batch([order(1, i, 300_000 + i, 1) for i in range(8)])
            small = encode_batch([order(2, 0, 290_000, 0)])
            first = asyncio.create_task(channel.submit(big))
            second = asyncio.create_task(channel.submit(small))  # sent right behind it
            a, b = await asyncio.gather(first, second)
            return decode_outcomes(a), decode_outcomes(b)
        finally:
            await channel.close()
            await svc.stop()

    big, small = asyncio.run(run())
    assert {o.code for o in big + small} == {ResultCode.OK}
    # order indexes are handed out in execution order: the big batch's eight first
    assert max(o.order_index for o in big) < small[0].order_index
    assert [o.order_index for o in big] == sorted(o.order_index for o in big)


def test_the_timer_cadence_still_closes_blocks_on_its_tick(tmp_path: Path) -> None:
    async def run() -> list[int]:
        cfg = dataclasses.replace(config(tmp_path), block_close="timer", block_interval_ms=5.0)
        svc = SequencerService(cfg)
        await svc.start()
        try:
            await funded(svc)
            outs = await asyncio.gather(
                *(svc.submit([order(1 + i % 2, i // 2, 300_000 + i, i % 2)]) for i in range(6))
            )
            return [o[0].seq for o in outs]
        finally:
            await svc.stop()

    assert asyncio.run(run()) == [2] * 6


@pytest.mark.parametrize("taken", ["block", "txlog"])
def test_a_port_already_in_use_fails_the_start_and_leaves_nothing_running(
    tmp_path: Path, taken: str
) -> None:
    """A sequencer whose block or txlog port is taken fails its start with the address named, and
    what it had opened (the other port, the WAL) is closed: the same WAL directory starts cleanly
    right after, and the busy port's owner is untouched."""
    import socket

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]

    async def run() -> None:
        key = "data_port" if taken == "block" else "txlog_port"
        failed = SequencerService(dataclasses.replace(config(tmp_path), **{key: port}))
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            await failed.start()
        assert failed.server is None or failed.server._server is None
        again = SequencerService(config(tmp_path))
        await again.start()
        try:
            outs = await again.submit([ETH], operator=True)
            assert [o.code for o in outs] == [ResultCode.OK]
        finally:
            await again.stop()

    try:
        asyncio.run(asyncio.wait_for(run(), 60))
        assert busy.fileno() != -1 and busy.getsockname()[1] == port
    finally:
        busy.close()


def test_the_oracle_carries_block_time_to_a_due_twap_slice_with_a_time_tick(
    tmp_path: Path,
) -> None:
    """No user traffic and no two-sided book (so no SetMarkPrice): once the TWAP's first slice
    is due by the sequencer's clock, the oracle's round stamps a ``TimeTick`` and the slice runs."""
    offset = [0]

    def clock() -> int:
        return time.time_ns() + offset[0]

    async def run() -> tuple[int, list[int]]:
        cfg = dataclasses.replace(config(tmp_path), oracle_interval_ms=5, oracle_max_step_bps=10)
        svc = SequencerService(cfg, clock=clock)
        await svc.start()
        try:
            await funded(svc)
            now_ms = clock() // 1_000_000
            ask = order(2, 0, 300_000, 1)._replace(base_amount=1_000)
            twap = CreateOrder(
                1, 0, 0, 7, 120, 301_000, 0, OrderType.TWAP, 1, 0, 0, now_ms + 380_000, FAR, 0,
                bytes(80),
            )  # fmt: skip
            outs = await svc.submit([sign_tx(ask, SEED), sign_tx(twap, SEED)])
            assert [o.code for o in outs] == [ResultCode.OK, ResultCode.OK]
            offset[0] += 30_000 * 1_000_000  # 30 s of block time pass
            for _ in range(1_000):  # bounded: the oracle's next rounds
                await asyncio.sleep(0.01)
                pos = svc._engine().position(1, 0)
                if pos is not None and pos.size:
                    break
            pos = svc._engine().position(1, 0)
            assert svc.hub is not None
            types = [
                e.tx_type
                for _, frame in svc.hub._ring
                for e in decode_block(frame).events
                if type(e).__name__ == "TxExecuted"
            ]
            return (pos.size if pos is not None else 0), types
        finally:
            await svc.stop()

    size, types = asyncio.run(run())
    assert size == 10  # the first of twelve slices of 120 lots
    assert int(TxType.TIME_TICK) in types
