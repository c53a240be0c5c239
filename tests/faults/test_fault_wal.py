"""WAL faults under signed load: torn tails, damage in the middle, a full disk, kill -9.

Every test: every acknowledged tx is in the recovered log with its code (by tx hash), the
sequencer, the snapshot holder and an independent replay have the same state hash, every wait has
a deadline, and the fault left a clear log line."""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import pytest
from kit.faults import (
    TALLY,
    Load,
    SequencerProcess,
    holder_config,
    newest_segment,
    records_end,
    sequencer_config,
    setup_ops,
    targets,
    tear,
    traders,
    until,
    verify,
)

from raydex.actors.sequencer import SequencerService, WalError
from raydex.actors.snapshot import SnapshotService
from raydex.codecs import Deposit, encode_tx, encode_wal_record


def test_torn_tails_after_crashes_mid_write_are_cut_and_nothing_acknowledged_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = sequencer_config(tmp_path)

    async def run() -> None:
        svc = SequencerService(cfg)
        await svc.start()
        await svc.submit(setup_ops(range(1, 7)), operator=True)
        holder = SnapshotService(holder_config(tmp_path, every_blocks=7))
        await holder.start(*targets(cfg))
        load = Load(targets(cfg)[0], traders())
        try:
            for cut in (5, 17, 31):
                await load.run_until_acked(8)
                await svc.stop()
                # the process died while writing the next block: part of its record is on disk
                assert svc.producer is not None
                record = encode_wal_record(svc.producer.seq + 1, 1, [encode_tx(Deposit(1, 1))])
                seg = newest_segment(tmp_path / "wal")
                size = seg.stat().st_size
                tear(seg, record[:cut])
                TALLY["faults injected"] += 1
                svc = SequencerService(cfg)
                await svc.start()
                # the bytes that reached the disk, up to the zeros of the preallocated segment
                assert svc.wal.torn_bytes == len(record[:cut].rstrip(b"\0"))
                assert seg.stat().st_size == size and svc.wal.preallocated_segments == 0
                TALLY["faults survived"] += 1
            await load.run_until_acked(5)
            await verify(tmp_path, cfg, holder, load, svc.state_hash)
        finally:
            await load.close()
            await holder.stop()
            await svc.stop()

    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    assert caplog.text.count("torn tail of") == 3 and "cut off" in caplog.text


def test_damage_in_the_middle_refuses_to_start_and_loses_nothing_once_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = sequencer_config(tmp_path)

    async def run() -> None:
        svc = SequencerService(cfg)
        await svc.start()
        await svc.submit(setup_ops(range(1, 7)), operator=True)
        holder = SnapshotService(holder_config(tmp_path, every_blocks=1000))
        await holder.start(*targets(cfg))
        load = Load(targets(cfg)[0], traders())
        try:
            await load.run_until_acked(12)
            await svc.stop()
            seg = newest_segment(tmp_path / "wal")
            good = seg.read_bytes()
            at = records_end(good) // 2
            seg.write_bytes(good[:at] + bytes([good[at] ^ 0x04]) + good[at + 1 :])
            TALLY["faults injected"] += 1
            refused = SequencerService(cfg)
            with pytest.raises(WalError) as err:
                await refused.start()
            msg = str(err.value)
            assert str(seg) in msg and "refusing to start" in msg and "followed by a valid" in msg
            assert seg.stat().st_size == len(good)  # nothing was cut
            seg.write_bytes(good)  # the operator restores the file
            svc = SequencerService(cfg)
            await svc.start()
            TALLY["faults survived"] += 1
            await load.run_until_acked(4)
            await verify(tmp_path, cfg, holder, load, svc.state_hash)
        finally:
            await load.close()
            await holder.stop()
            await svc.stop()

    asyncio.run(run())


def test_a_full_disk_ends_the_sequencer_process_and_the_restart_recovers_every_ack(
    tmp_path: Path,
) -> None:
    """RLIMIT_FSIZE makes the kernel refuse WAL writes past 40 KB (EFBIG, as ENOSPC would):
    the journal fails, the sequencer exits its process (status 70) instead of staying up and
    refusing everything, and the restart (disk space back) recovers what was acknowledged."""
    cfg = sequencer_config(tmp_path)
    proc = SequencerProcess(cfg, tmp_path / "sequencer.log")

    async def run() -> None:
        await proc.start(setup=setup_ops(range(1, 9)), fsize_limit=40_000)
        holder = SnapshotService(holder_config(tmp_path, every_blocks=1000))
        await holder.start(*targets(cfg))
        load = Load(targets(cfg)[0], traders())
        try:
            for _ in range(400):  # bounded: ~40 KB of WAL is ~200 orders
                await load.round()
                if not proc.alive:
                    break
            TALLY["faults injected"] += 1
            assert proc.wait() == 70
            log = proc.log()
            assert "WAL write failed" in log and "File too large" in log
            assert "exiting the actor process (Ray restarts it)" in log
            await proc.start()  # the disk has room again
            TALLY["faults survived"] += 1
            await load.run_until_acked(5)
            await verify(tmp_path, cfg, holder, load)
        finally:
            await load.close()
            await holder.stop()
            if proc.alive:
                proc.kill()

    asyncio.run(run())


def test_kill_9_of_the_sequencer_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    cfg = sequencer_config(tmp_path)
    proc = SequencerProcess(cfg, tmp_path / "sequencer.log")
    rng = random.Random(7)

    async def run() -> None:
        await proc.start(setup=setup_ops(range(1, 9)))
        holder = SnapshotService(holder_config(tmp_path, every_blocks=20))
        await holder.start(*targets(cfg))
        load = Load(targets(cfg)[0], traders())
        try:
            for _ in range(3):
                sending = asyncio.create_task(load.run(60))
                at = len(load.acked) + rng.randrange(30, 120)
                await until(lambda: len(load.acked) >= at, "load acked")  # noqa: B023
                assert proc.kill() == -9  # mid-load, at a random point
                TALLY["faults injected"] += 1
                await sending
                await proc.start()
                TALLY["faults survived"] += 1
                await load.run_until_acked(3)
            await verify(tmp_path, cfg, holder, load)
        finally:
            await load.close()
            await holder.stop()
            if proc.alive:
                proc.kill()
        assert load.unknown > 0  # the kills did land while batches were in flight
        assert proc.log().count("WAL blocks replayed") == 4  # the first start and 3 recoveries

    asyncio.run(run())
