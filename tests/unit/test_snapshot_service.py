"""The snapshot holder applies the sequencer's block deltas to the same state (equal state hash),
writes snapshots the sequencer can recover from, and serves recent delta blocks long-poll style."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pyarrow as pa
import pytest
from kit.faults import flip_in_last_record, newest_segment

from raydex.actors.local import eth_market
from raydex.actors.sequencer.service import SequencerConfig, SequencerService
from raydex.actors.snapshot import newest_snapshot, read_snapshot_meta
from raydex.actors.snapshot.holder import SnapshotConfig, SnapshotService
from raydex.actors.transport import ResyncRequired
from raydex.codecs import (
    CreateOrder,
    Deposit,
    RegisterApiKey,
    ResultCode,
    decode_block,
    generate_key,
    sign_tx,
)

SEED, PUB = generate_key()
FAR = 4_000_000_000_000
ETH = eth_market()  # ETH-PERP: 2 price / 4 size decimals, mark 3000.00


def order(account: int, nonce: int, price: int, is_ask: int) -> CreateOrder:
    tx = CreateOrder(
        account, 0, 0, nonce + 1, 100, price, is_ask, 0, 1, 0, 0, -1, FAR, nonce, bytes(80)
    )
    return sign_tx(tx, SEED)


async def until(cond: object, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if cond():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_the_holder_converges_to_the_sequencer_state_and_serves_deltas(tmp_path: Path) -> None:
    published: list[tuple[int, dict[str, pa.Table]]] = []

    async def run() -> tuple[dict[str, object], dict[str, object]]:
        seq_svc = SequencerService(
            SequencerConfig(wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"))
        )
        await seq_svc.start()
        holder = SnapshotService(
            SnapshotConfig(dir=str(tmp_path / "snap"), every_blocks=3, every_seconds=60),
            on_tables=lambda seq, _h, tables: published.append((seq, tables)),
        )
        await holder.start(f"127.0.0.1:{seq_svc.port}", f"127.0.0.1:{seq_svc.txlog_port}")
        try:
            setup: list[object] = [ETH]
            for a in (1, 2):
                setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
            assert {o.code for o in await seq_svc.submit(setup, operator=True)} == {ResultCode.OK}
            for i in range(6):
                outs = await seq_svc.submit([order(1, i, 300_000, 1), order(2, i, 300_000, 0)])
                assert [o.code for o in outs] == [ResultCode.OK, ResultCode.OK]
            final = seq_svc.state_hash()
            await until(lambda: holder.seq == final["seq"] and holder.delta_seq == final["seq"])

            last, blocks = await holder.blocks_since(2)
            assert last == final["seq"] and [s for s, _ in blocks] == list(range(3, last + 1))
            assert all(decode_block(f).seq == s for s, f in blocks)
            waited_last, none = await holder.blocks_since(last, timeout_s=0.05)
            assert (waited_last, none) == (last, [])
            return final, holder.state_hash()
        finally:
            await holder.stop()
            await seq_svc.stop()

    final, status = asyncio.run(run())
    assert status["state_hash"] == final["state_hash"]
    assert published[0][0] == 0 and published[-1][0] >= 6
    snap = newest_snapshot(tmp_path / "snap")
    assert snap is not None
    assert read_snapshot_meta(snap)["seq"] == published[-1][0]

    async def restart() -> dict[str, object]:
        svc = SequencerService(
            SequencerConfig(wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"))
        )
        await svc.start()
        try:
            return {**svc.status(), **svc.state_hash()}
        finally:
            await svc.stop()

    again = asyncio.run(restart())
    assert again["state_hash"] == final["state_hash"]
    assert again["replayed_blocks"] == final["seq"] - published[-1][0]


def test_followers_behind_a_sequencer_restart_catch_up_from_the_rebuilt_blocks(
    tmp_path: Path,
) -> None:
    import socket

    with socket.socket() as s1, socket.socket() as s2:
        s1.bind(("127.0.0.1", 0))
        s2.bind(("127.0.0.1", 0))
        data_port, txlog_port = s1.getsockname()[1], s2.getsockname()[1]
    cfg = SequencerConfig(
        wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"),
        data_port=data_port, txlog_port=txlog_port,
    )  # fmt: skip
    targets = (f"127.0.0.1:{data_port}", f"127.0.0.1:{txlog_port}")

    async def run() -> tuple[dict[str, object], dict[str, object]]:
        seq_svc = SequencerService(cfg)
        await seq_svc.start()
        holder = SnapshotService(SnapshotConfig(dir=str(tmp_path / "snap"), every_blocks=1000))
        await holder.start(*targets)
        setup: list[object] = [ETH]
        for a in (1, 2):
            setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
        await seq_svc.submit(setup, operator=True)
        await until(lambda: holder.seq == 1)
        await holder.stop()  # the holder falls behind: it keeps only its snapshot at seq 0..1
        for i in range(5):
            await seq_svc.submit([order(1, i, 300_000, 1), order(2, i, 300_000, 0)])
        await seq_svc.stop()  # the sequencer "crashes" with blocks 2..6 only in its WAL

        again = SequencerService(cfg)
        await again.start()
        late = SnapshotService(SnapshotConfig(dir=str(tmp_path / "snap"), every_blocks=1000))
        await late.start(*targets)
        try:
            final = again.state_hash()
            await until(lambda: late.seq == final["seq"] == 6)
            return final, late.state_hash()
        finally:
            await late.stop()
            await again.stop()

    final, status = asyncio.run(run())
    assert status["state_hash"] == final["state_hash"]


def fixed_ports_config(tmp: Path, **kw: object) -> tuple[SequencerConfig, tuple[str, str]]:
    import socket

    with socket.socket() as s1, socket.socket() as s2:
        s1.bind(("127.0.0.1", 0))
        s2.bind(("127.0.0.1", 0))
        data_port, txlog_port = s1.getsockname()[1], s2.getsockname()[1]
    cfg = SequencerConfig(
        wal_dir=str(tmp / "wal"), snapshot_dir=str(tmp / "snap"),
        data_port=data_port, txlog_port=txlog_port, **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    return cfg, (f"127.0.0.1:{data_port}", f"127.0.0.1:{txlog_port}")


async def fund(svc: SequencerService) -> None:
    setup: list[object] = [ETH]
    for a in (1, 2):
        setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    assert {o.code for o in await svc.submit(setup, operator=True)} == {ResultCode.OK}


def test_a_holder_paused_beyond_the_ring_catches_up_from_the_sequencers_wal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg, targets = fixed_ports_config(tmp_path, ring_size=8, txlog_read_max_records=10)
    snap = SnapshotConfig(dir=str(tmp_path / "snap"), every_blocks=1000, every_seconds=600)

    async def run() -> tuple[dict[str, object], dict[str, object], SnapshotService]:
        seq_svc = SequencerService(cfg)
        await seq_svc.start()
        holder = SnapshotService(snap)
        await holder.start(*targets)
        try:
            await fund(seq_svc)
            await until(lambda: holder.seq == 1)
            await holder.supervisor.stop()  # paused: its loops do not run
            for i in range(40):
                await seq_svc.submit([order(1, i, 300_000, 1), order(2, i, 299_000, 0)])
            txlog = next(s for s in holder._sources if "txlog" in s._name.decode())
            holder.supervisor.start("txlog", lambda: holder._follow_txlog(txlog))  # resumed
            final = seq_svc.state_hash()
            await until(lambda: holder.seq == final["seq"] == 41)
            return final, holder.state_hash(), holder
        finally:
            await holder.stop()
            await seq_svc.stop()

    with caplog.at_level(logging.INFO):
        final, got, holder = asyncio.run(run())
    assert got == final
    assert holder.wal_records_read >= 30 and "catching up from the sequencer's WAL" in caplog.text
    assert "is no longer held" in caplog.text


def test_a_holder_that_saw_a_block_the_sequencer_lost_rebuilds_instead_of_diverging(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The sequencer's newest WAL record is damaged after it was published (a flipped bit looks
    like a torn tail): it comes back one block earlier and publishes a different block under
    that seq. The holder, which applied the lost block, notices on its resume, moves its
    snapshots of the lost history aside and converges on the sequencer's history."""
    cfg, targets = fixed_ports_config(tmp_path)
    snap = SnapshotConfig(dir=str(tmp_path / "snap"), every_blocks=4, every_seconds=600)

    async def run() -> tuple[dict[str, object], dict[str, object], SnapshotService]:
        seq_svc = SequencerService(cfg)
        await seq_svc.start()
        holder = SnapshotService(snap)
        await holder.start(*targets)
        await fund(seq_svc)
        for i in range(5):
            await seq_svc.submit([order(1, i, 300_000, 1), order(2, i, 299_000, 0)])
        await until(lambda: holder.seq == 6)
        await seq_svc.stop()
        # block 6, already published and applied by the holder
        flip_in_last_record(newest_segment(tmp_path / "wal"), 2, 0x10)
        # holder snapshots at 0 and 4, meanwhile: the sequencer recovers 4 + WAL 5 = seq 5
        again = SequencerService(cfg)
        await again.start()
        try:
            assert again.state_hash()["seq"] == 5
            await again.submit([order(1, 5, 300_100, 1)])  # a different block 6
            await again.submit([order(2, 5, 299_100, 0)])
            final = again.state_hash()
            await until(lambda: holder.seq == final["seq"] and holder.divergences >= 1)
            return final, holder.state_hash(), holder
        finally:
            await holder.stop()
            await again.stop()

    with caplog.at_level(logging.WARNING):
        final, got, holder = asyncio.run(run())
    assert got == final
    assert "torn tail" in caplog.text and "block 6 differs" in caplog.text
    assert holder.divergences == 1  # noticed once, on the resume of its one stream
    assert holder.ring and holder.ring[-1][0] == final["seq"]  # the ring restarted, in step


def test_an_exception_while_applying_restarts_the_follower_from_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from raydex.actors.snapshot.deltas import DeltaState

    cfg, targets = fixed_ports_config(tmp_path)
    snap = SnapshotConfig(dir=str(tmp_path / "snap"), every_blocks=2, every_seconds=600)
    real = DeltaState.apply
    calls = {"n": 0}

    def flaky(state: DeltaState, events: object) -> None:
        calls["n"] += 1
        if calls["n"] == 4:
            real(state, events)  # type: ignore[arg-type]  # the block lands, then a bug hits
            raise KeyError("a bug in the middle of a block")
        real(state, events)  # type: ignore[arg-type]

    monkeypatch.setattr(DeltaState, "apply", flaky)

    async def run() -> tuple[dict[str, object], dict[str, object], int]:
        seq_svc = SequencerService(cfg)
        await seq_svc.start()
        holder = SnapshotService(snap)
        await holder.start(*targets)
        try:
            await fund(seq_svc)
            for i in range(6):
                await seq_svc.submit([order(1, i, 300_000, 1), order(2, i, 299_000, 0)])
            final = seq_svc.state_hash()
            await until(lambda: holder.seq == final["seq"])
            return final, holder.state_hash(), holder.supervisor.restarts("txlog")
        finally:
            await holder.stop()
            await seq_svc.stop()

    with caplog.at_level(logging.ERROR):
        final, got, restarts = asyncio.run(run())
    assert got == final and restarts == 1
    assert "loop 'txlog' failed" in caplog.text and "not fully applied" in caplog.text


def test_blocks_since_a_seq_the_ring_dropped_asks_for_a_resync_instead_of_waiting(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        holder = SnapshotService(SnapshotConfig(dir=str(tmp_path / "snap")))
        holder._restart_ring(50)  # the sequencer's ring started after seq 50
        with pytest.raises(ResyncRequired):
            await holder.blocks_since(10, timeout_s=0.01)
        assert await holder.blocks_since(50, timeout_s=0.01) == (50, [])

    asyncio.run(run())
