"""Snapshot faults: a corrupt, truncated or missing newest snapshot never keeps the sequencer or
the holder down; they fall back to an older snapshot, or to seq 0 and the whole WAL, and say why.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from kit.faults import (
    TALLY,
    Load,
    holder_config,
    sequencer_config,
    setup_ops,
    targets,
    traders,
    verify,
)

from raydex.actors.sequencer import SequencerService
from raydex.actors.snapshot import SnapshotService, snapshots
from raydex.codecs import read_snapshot_ipc, write_snapshot_ipc


def wrong_values(path: Path) -> None:
    """Tables that decode, with one collateral changed: only the state hash can tell."""
    seq, tables = read_snapshot_ipc(path)
    acc = tables["accounts"]
    col = acc.column_names.index("collateral")
    field = acc.schema.field(col)
    bumped = pa.array([v.as_py() + 1 for v in acc.column(col)], field.type)
    tables["accounts"] = acc.set_column(col, field, bumped)
    write_snapshot_ipc(path, seq, tables)


def truncated_table(path: Path) -> None:
    f = path / "orders.arrow"
    f.write_bytes(f.read_bytes()[:100])


def flipped_meta(path: Path) -> None:
    meta = path / "meta.json"
    meta.write_text(meta.read_text().replace('"state_hash": "', '"state_hash": "0'))


def missing(path: Path) -> None:
    shutil.rmtree(path)


Damage = Callable[[Path], None]


def run_with_damaged_snapshots(tmp: Path, damages: list[Damage]) -> tuple[int, int]:
    """Load with a holder snapshotting every 5 blocks; stop everything; damage the newest
    snapshots (one damage each, newest first); restart both; verify. Returns the seq the
    sequencer recovered from and the number of blocks it replayed."""
    cfg = sequencer_config(tmp)
    recovered: list[tuple[int, int]] = []

    async def run() -> None:
        svc = SequencerService(cfg)
        await svc.start()
        await svc.submit(setup_ops(range(1, 7)), operator=True)
        holder = SnapshotService(holder_config(tmp, every_blocks=5, keep=4))
        await holder.start(*targets(cfg))
        load = Load(targets(cfg)[0], traders())
        try:
            await load.run_until_acked(17)
            await verify(tmp, cfg, holder, load, svc.state_hash)  # all snapshots written
            await holder.stop()
            await svc.stop()
            for damage, path in zip(damages, reversed(snapshots(tmp / "snap")), strict=False):
                damage(path)
                TALLY["faults injected"] += 1
            svc = SequencerService(cfg)
            await svc.start()
            assert svc.producer is not None
            recovered.append((svc.producer.seq - svc.replayed, svc.replayed))
            holder = SnapshotService(holder_config(tmp, every_blocks=5, keep=4))
            await holder.start(*targets(cfg))
            TALLY["faults survived"] += len(damages)
            await load.run_until_acked(3)
            await verify(tmp, cfg, holder, load, svc.state_hash)
        finally:
            await load.close()
            await holder.stop()
            await svc.stop()

    asyncio.run(run())
    return recovered[0]


def test_a_corrupt_newest_snapshot_falls_back_to_the_one_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        start, replayed = run_with_damaged_snapshots(tmp_path, [wrong_values])
    assert start == 10 and replayed == 8  # snapshots at 0, 5, 10, 15 (damaged); seq 18
    assert "state hash" in caplog.text and "snapshot rejected" in caplog.text
    assert len(list((tmp_path / "snap").glob(".corrupt-snapshot-*"))) == 1


def test_truncated_and_missing_snapshots_fall_back_further(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        start, replayed = run_with_damaged_snapshots(tmp_path, [missing, truncated_table])
    assert start == 5 and replayed == 13
    assert "unreadable" in caplog.text and "orders" in caplog.text


def test_no_usable_snapshot_recovers_from_seq_zero_and_the_whole_wal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    damages: list[Damage] = [flipped_meta, wrong_values, truncated_table, flipped_meta]
    with caplog.at_level(logging.WARNING):
        start, replayed = run_with_damaged_snapshots(tmp_path, damages)
    assert start == 0 and replayed == 18
    assert "starting from seq 0 and the whole WAL" in caplog.text
