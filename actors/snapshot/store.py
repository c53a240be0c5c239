"""The snapshot folder: Arrow IPC snapshots on disk, written atomically, read back into an engine.

Layout: ``<folder>/snapshot-<seq:020d>/`` holds one Arrow IPC file per table
(``codecs.write_snapshot_ipc``) and ``meta.json`` (seq, height, state hash). A snapshot is written
into a hidden temporary folder and renamed into place, so a reader never sees half of one.
Shared by the sequencer (recovery: newest snapshot + WAL) and the snapshot holder (writes them).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa

from raydex.codecs import (
    WalBlock,
    read_snapshot_ipc,
    records_to_tables,
    tables_to_records,
    write_snapshot_ipc,
)
from raydex.engine import Engine


def newest_snapshot(folder: Path) -> Path | None:
    """The complete snapshot folder with the highest seq under ``folder``, if any."""
    dirs = sorted(folder.glob("snapshot-*[0-9]")) if folder.is_dir() else []
    return dirs[-1] if dirs else None


def snapshot_path(folder: Path, seq: int) -> Path:
    return folder / f"snapshot-{seq:020d}"


def write_snapshot(
    folder: Path, engine: Engine, seq: int, height: int
) -> tuple[Path, dict[str, pa.Table]]:
    """Write ``engine``'s state as an Arrow IPC snapshot folder, atomically (temporary folder, then
    rename), with ``meta.json`` holding seq, height and the state hash. Returns the folder and the
    tables (so a caller that also publishes them does not build them twice)."""
    final = snapshot_path(folder, seq)
    tmp = folder / f".{final.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tables = records_to_tables(engine.records())
    write_snapshot_ipc(tmp, seq, tables)
    meta = {"seq": seq, "height": height, "state_hash": engine.state_hash().hex()}
    (tmp / "meta.json").write_text(json.dumps(meta))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final, tables


def read_snapshot_meta(path: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((path / "meta.json").read_text())
    return meta


def replay_block(engine: Engine, block: WalBlock) -> None:
    """Re-execute one logged block exactly as the sequencer did (same txs, same ``now_ms``)."""
    now_ms = block.timestamp_ns // 1_000_000
    out: list[Any] = []
    execute = engine.execute
    for tx in block.txs:
        execute(tx, now_ms, out)
        out.clear()


def load_engine_snapshot(folder: Path) -> tuple[Engine, int, int]:
    """Engine restored from the newest snapshot under ``folder`` (a fresh Engine when none), with
    its seq and height."""
    path = newest_snapshot(folder)
    if path is None:
        return Engine(), 0, 0
    seq, tables = read_snapshot_ipc(path)
    height = int(read_snapshot_meta(path)["height"])
    return Engine.from_records(tables_to_records(tables)), seq, height
