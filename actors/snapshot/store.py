"""The snapshot folder: Arrow IPC snapshots on disk, written durably, verified on the way in.

Layout: ``<folder>/snapshot-<seq:020d>/`` holds one Arrow IPC file per table and ``meta.json``:
seq, height, the engine's full state hash (``state_hash``, checked on load), the state hash every
role reports (``state_digest``) and, when known, ``record_crc``: the crc32 of the WAL record of
block ``seq``, the identity of the history the snapshot belongs to.

Writing (:func:`write_snapshot`): every file into a hidden temporary folder, each synced, then
that folder, then renamed into place and the parent synced: a snapshot under its final name is
complete, also after a power loss, and a reader never sees half of one.

Reading (:func:`load_snapshot`, :func:`load_newest_snapshot`): a snapshot is used only if its
tables decode, their seq matches ``meta.json`` and the engine built from them has the recorded
state hash. The newest that passes is used; one that fails is logged and moved aside to
``.corrupt-snapshot-<seq>``; with none left the caller starts from seq 0 (and replays the whole
WAL). Cost: O(state) per write or verified load, at boot or off the trading path.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import pyarrow as pa

from raydex.codecs import (
    WalBlock,
    decode_block,
    read_snapshot_ipc,
    records_to_tables,
    tables_to_records,
    write_snapshot_ipc,
)
from raydex.engine import Engine, state_digest

from .deltas import DeltaState

log = logging.getLogger(__name__)

_PREFIX = "snapshot-"


class StateSource(Protocol):
    """What a snapshot is written from: the engine, or the holder's ``DeltaState``."""

    def records(self) -> Iterable[Any]: ...

    def state_hash(self) -> bytes: ...


class SnapshotError(RuntimeError):
    """A snapshot folder that cannot be used (unreadable, or not the state its meta claims)."""


class LoadedSnapshot(NamedTuple):
    engine: Engine
    seq: int
    height: int
    #: ``meta.json`` of the snapshot ({} for the empty engine at seq 0)
    meta: dict[str, Any]
    #: the folder it came from (None: nothing usable, an empty engine at seq 0)
    path: Path | None


def snapshots(folder: Path) -> list[Path]:
    """The complete snapshot folders under ``folder``, oldest first."""
    return sorted(folder.glob(f"{_PREFIX}*[0-9]")) if folder.is_dir() else []


def newest_snapshot(folder: Path) -> Path | None:
    """The complete snapshot folder with the highest seq under ``folder``, if any (unverified)."""
    dirs = snapshots(folder)
    return dirs[-1] if dirs else None


def snapshot_path(folder: Path, seq: int) -> Path:
    return folder / f"{_PREFIX}{seq:020d}"


def snapshot_seq(path: Path) -> int:
    return int(path.name[len(_PREFIX) :])


def _fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_snapshot(
    folder: Path, engine: StateSource, seq: int, height: int, record_crc: int | None = None
) -> tuple[Path, dict[str, pa.Table]]:
    """Write ``engine``'s state (an engine or any :class:`StateSource`) as a snapshot folder,
    durably and atomically (see the module docstring). Returns the folder and the tables (so a
    caller that also publishes them does not build them twice)."""
    folder.mkdir(parents=True, exist_ok=True)
    final = snapshot_path(folder, seq)
    tmp = folder / f".{final.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    records = list(engine.records())
    tables = records_to_tables(records)
    write_snapshot_ipc(tmp, seq, tables)
    meta: dict[str, Any] = {
        "seq": seq,
        "height": height,
        "state_hash": engine.state_hash().hex(),
        "state_digest": state_digest(records).hex(),
    }
    if record_crc is not None:
        meta["record_crc"] = record_crc
    (tmp / "meta.json").write_text(json.dumps(meta))
    for f in tmp.iterdir():
        _fsync_path(f)
    _fsync_path(tmp, directory=True)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_path(folder, directory=True)
    return final, tables


def read_snapshot_meta(path: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((path / "meta.json").read_text())
    return meta


def replay_block(engine: Engine, block: WalBlock) -> Engine:
    """Re-execute one logged block exactly as the sequencer did (same txs, same ``now_ms``; its
    refused txs changed nothing and are not executed); the engine holding the state after it:
    ``engine`` itself, or for a restored record (no txs: the block's delta frame, taken back from
    the followers) :func:`fold_frame`'s new one."""
    if block.restored is not None:
        return fold_frame(engine, block.restored)
    now_ms = block.timestamp_ns // 1_000_000
    out: list[Any] = []
    execute = engine.execute
    for tx in block.txs:
        execute(tx, now_ms, out)
        out.clear()
    return engine


def fold_frame(engine: Engine, frame: bytes) -> Engine:
    """A new engine in the state ``engine`` reaches by block ``frame``: its records with the
    frame's events folded in (``DeltaState``, as the holder keeps the state), rebuilt. O(state):
    for the rare block the sequencer's log had to take back from its followers."""
    state = DeltaState.from_records(engine.records())
    state.apply(decode_block(frame).events)
    return Engine.from_records(state.records())


def load_snapshot(path: Path) -> LoadedSnapshot:
    """Load and verify one snapshot folder; SnapshotError with the reason when it is unusable."""
    try:
        meta = read_snapshot_meta(path)
        seq, tables = read_snapshot_ipc(path)
        engine = Engine.from_records(tables_to_records(tables))
        height = int(meta["height"])
        want = str(meta["state_hash"])
    except Exception as exc:  # any way a file can be bad: the caller falls back to an older one
        raise SnapshotError(f"{path}: unreadable: {exc!r}") from exc
    if seq != int(meta["seq"]) or seq != snapshot_seq(path):
        raise SnapshotError(f"{path}: tables say seq {seq}, meta.json says {meta['seq']}")
    got = engine.state_hash().hex()
    if got != want:
        raise SnapshotError(f"{path}: state hash {got[:16]}.. is not meta.json's {want[:16]}..")
    return LoadedSnapshot(engine, seq, height, meta, path)


def quarantine(path: Path, why: str) -> Path | None:
    """Move a snapshot folder aside as ``.<why>-<name>`` (kept for inspection, never loaded)."""
    target = path.parent / f".{why}-{path.name}"
    try:
        if target.exists():
            shutil.rmtree(target)
        os.replace(path, target)
        _fsync_path(path.parent, directory=True)
    except FileNotFoundError:  # another process moved it first
        return None
    return target


def load_newest_snapshot(
    folder: Path,
    max_seq: int | None = None,
    usable: Callable[[int, dict[str, Any]], str | None] | None = None,
) -> LoadedSnapshot:
    """The newest snapshot under ``folder`` that verifies (and has ``seq <= max_seq``, and for
    which ``usable(seq, meta)`` returns no reason to skip it, e.g. the WAL does not reach back to
    it); corrupt ones are logged and quarantined. None usable: an empty engine at seq 0."""
    skipped: list[str] = []
    for path in reversed(snapshots(folder)):
        seq = snapshot_seq(path)
        if max_seq is not None and seq > max_seq:
            continue
        if usable is not None:
            try:
                reason = usable(seq, read_snapshot_meta(path))
            except Exception as exc:  # unreadable meta: let load_snapshot say so
                reason = None
                log.debug("meta of %s unreadable (%r); verifying it", path, exc)
            if reason is not None:
                log.warning("snapshot %s not used: %s", path, reason)
                skipped.append(f"seq {seq}: {reason}")
                continue
        try:
            loaded = load_snapshot(path)
        except SnapshotError as exc:
            moved = quarantine(path, "corrupt")
            log.error("snapshot rejected, trying an older one: %s (moved to %s)", exc, moved)
            skipped.append(f"seq {seq}: {exc}")
            continue
        if skipped:
            log.warning("recovering from snapshot seq %d after skipping %s", seq, skipped)
        return loaded
    if skipped:
        log.warning("no usable snapshot (%s): starting from seq 0 and the whole WAL", skipped)
    return LoadedSnapshot(Engine(), 0, 0, {}, None)


def load_engine_snapshot(folder: Path) -> tuple[Engine, int, int]:
    """Engine restored from the newest verified snapshot under ``folder`` (a fresh Engine when
    none), with its seq and height."""
    loaded = load_newest_snapshot(folder)
    return loaded.engine, loaded.seq, loaded.height
