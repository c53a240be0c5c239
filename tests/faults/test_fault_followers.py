"""Follower faults: a snapshot holder paused or crashed far beyond the sequencer's ring catches up
from the sequencer's WAL; a damaged WAL tail that a snapshot covers loses nothing."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from kit.faults import (
    TALLY,
    Load,
    flip_in_last_record,
    holder_config,
    newest_segment,
    sequencer_config,
    setup_ops,
    targets,
    traders,
    until,
    verify,
)

from raydex.actors.sequencer import SequencerService
from raydex.actors.snapshot import SnapshotService


def test_a_holder_paused_far_beyond_the_ring_catches_up_from_the_wal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = sequencer_config(tmp_path, ring_size=16, txlog_read_max_records=25)

    async def run() -> None:
        svc = SequencerService(cfg)
        await svc.start()
        await svc.submit(setup_ops(range(1, 7)), operator=True)
        holder = SnapshotService(holder_config(tmp_path, every_blocks=30))
        await holder.start(*targets(cfg))
        load = Load(targets(cfg)[0], traders())
        try:
            for _ in range(2):
                await load.run_until_acked(4)
                await until(lambda: holder.seq == svc.state_hash()["seq"], "holder in step")
                paused = dict(holder.supervisor.tasks)
                await holder.supervisor.stop()  # paused (a long GC, SIGSTOP): nothing runs
                TALLY["faults injected"] += 1
                await load.run_until_acked(80)  # ~80 blocks: five rings
                assert svc.hub is not None and svc.hub.statistics().floor > holder.seq
                # one stream (deltas stamped with WAL crcs), and the quiet state check
                assert list(paused) == ["txlog", "checks"]
                source = holder._sources[0]
                holder.supervisor.start("txlog", lambda s=source: holder._follow_txlog(s))  # type: ignore[misc]
                holder.supervisor.start(
                    "checks", lambda: holder.checks.run_quiet(lambda: holder.seq, holder._records)
                )
                await until(lambda: holder.seq == svc.state_hash()["seq"], "holder caught up")
                TALLY["faults survived"] += 1
            await verify(tmp_path, cfg, holder, load, svc.state_hash)
            assert holder.wal_records_read >= 120 and holder.divergences == 0
            # replicas asking the holder for deltas it never received are told to resync
            assert holder.ring and holder.ring[0][0] > 1
        finally:
            await load.close()
            await holder.stop()
            await svc.stop()

    with caplog.at_level(logging.INFO):
        asyncio.run(run())
    assert "catching up from the sequencer's WAL" in caplog.text
    assert "caught up from the WAL" in caplog.text


def test_a_holder_crashed_beyond_the_ring_restarts_from_its_snapshot_and_the_wal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = sequencer_config(tmp_path, ring_size=16)

    async def run() -> None:
        svc = SequencerService(cfg)
        await svc.start()
        await svc.submit(setup_ops(range(1, 7)), operator=True)
        holder = SnapshotService(holder_config(tmp_path, every_blocks=25))
        await holder.start(*targets(cfg))
        load = Load(targets(cfg)[0], traders())
        try:
            await load.run_until_acked(30)
            await until(lambda: holder.seq == svc.state_hash()["seq"], "holder in step")
            await holder.stop()  # gone, with everything after its last snapshot
            TALLY["faults injected"] += 1
            await load.run_until_acked(60)
            holder = SnapshotService(holder_config(tmp_path, every_blocks=25))
            await holder.start(*targets(cfg))
            assert holder.seq == 25  # its newest snapshot, far behind the ring
            TALLY["faults survived"] += 1
            await verify(tmp_path, cfg, holder, load, svc.state_hash)
        finally:
            await load.close()
            await holder.stop()
            await svc.stop()

    with caplog.at_level(logging.INFO):
        asyncio.run(run())
    assert "is no longer held" in caplog.text and "caught up from the WAL" in caplog.text


def test_a_damaged_wal_tail_covered_by_a_snapshot_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A flipped bit in the newest (fsynced, published, acknowledged) record looks like a torn
    tail and is cut; the holder's snapshot at that seq holds the block, so the sequencer recovers
    it from there and no follower diverges."""
    cfg = sequencer_config(tmp_path)

    async def run() -> None:
        svc = SequencerService(cfg)
        await svc.start()
        await svc.submit(setup_ops(range(1, 7)), operator=True)
        holder = SnapshotService(holder_config(tmp_path, every_blocks=1))
        await holder.start(*targets(cfg))
        load = Load(targets(cfg)[0], traders())
        try:
            await load.run_until_acked(10)
            seq = svc.state_hash()["seq"]
            await until(lambda: holder.snapshot_seq == seq, "a snapshot of the newest block")
            await svc.stop()
            flip_in_last_record(newest_segment(tmp_path / "wal"), 5, 0x20)
            TALLY["faults injected"] += 1
            svc = SequencerService(cfg)
            await svc.start()
            assert svc.state_hash()["seq"] == seq and svc.wal.last_seq == seq - 1
            TALLY["faults survived"] += 1
            await load.run_until_acked(5)
            assert holder.divergences == 0
            await verify(tmp_path, cfg, holder, load, svc.state_hash)
        finally:
            await load.close()
            await holder.stop()
            await svc.stop()

    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    assert "torn tail" in caplog.text
