"""The sequencer's write-ahead log: one record per block, group-committed.

Invariants:
- A block is acknowledged to anyone only after :meth:`Wal.append` returned (and, with
  ``fsync="block"``, after its bytes reached the disk). So an acknowledged tx is never lost.
- Records are appended in strictly increasing ``seq``; recovery yields them in that order.
- A torn tail (crash mid-write) is detected by length/magic/crc and cut off on open; anything before
  it is intact. A bad record *before* the tail is corruption, not a torn write: recovery refuses it.

Layout: segment files ``wal-<first seq:020d>.log`` in one folder; each record is
``WalRecordHeader`` (codecs/_wal.py) + ``count`` x (uint16 length, tagged tx bytes). Segments roll
over at ``segment_bytes``; :meth:`Wal.prune` drops whole segments covered by a snapshot.

Cost: one ``write`` + (optionally) one ``fsync`` per block, never per tx. ``fsync="none"`` trades
durability across power loss (the OS still has the bytes on a process crash) for latency.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from raydex.codecs import CodecError, WalBlock, encode_tx, encode_wal_record, read_wal_records
from raydex.observability.hist import Histogram

FsyncPolicy = Literal["block", "none"]


class WalError(RuntimeError):
    """The log is corrupt somewhere other than its tail."""


def _segment_name(first_seq: int) -> str:
    return f"wal-{first_seq:020d}.log"


class Wal:
    """Append-only, segmented, crc-checked block log (see module docstring)."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        fsync: FsyncPolicy = "block",
        segment_bytes: int = 64 << 20,
    ) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.last_seq = 0
        #: fsync per appended block (ns); exported as ``raydex_wal_fsync_seconds``
        self.fsync_time = Histogram()
        self._fd = -1
        self._size = 0
        self._recovered = self._recover()

    # ---- recovery -------------------------------------------------------------------------------

    def segments(self) -> list[Path]:
        return sorted(self.folder.glob("wal-*.log"))

    def _recover(self) -> list[WalBlock]:
        blocks: list[WalBlock] = []
        segs = self.segments()
        for i, path in enumerate(segs):
            data = path.read_bytes()
            try:
                got, good = read_wal_records(data)
            except CodecError as exc:
                raise WalError(f"{path}: {exc}") from exc
            if good != len(data):
                if i != len(segs) - 1:
                    raise WalError(f"{path}: corrupt record at byte {good} (not the tail segment)")
                with open(path, "r+b") as f:  # cut the torn tail so appends continue cleanly
                    f.truncate(good)
                    os.fsync(f.fileno())
            for b in got:
                if b.seq <= self.last_seq:
                    raise WalError(f"{path}: seq {b.seq} after {self.last_seq}: out of order")
                self.last_seq = b.seq
            blocks.extend(got)
        if segs:
            self._open(segs[-1])
        return blocks

    def replay(self, after_seq: int = 0) -> Iterator[WalBlock]:
        """Blocks with ``seq > after_seq``, in order, as recovered when the log was opened."""
        return (b for b in self._recovered if b.seq > after_seq)

    def release_recovered(self) -> None:
        """Drop the blocks read at open (after the caller replayed them)."""
        self._recovered = []

    # ---- appending ------------------------------------------------------------------------------

    def _open(self, path: Path) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size

    def append(self, seq: int, timestamp_ns: int, txs: Sequence[object]) -> int:
        """Write one block's txs; durable on return with ``fsync="block"``. Returns its size."""
        frames = [encode_tx(t) for t in txs]  # type: ignore[arg-type]
        return self.append_frames(seq, timestamp_ns, frames)

    def append_frames(self, seq: int, timestamp_ns: int, tx_frames: Sequence[bytes]) -> int:
        return self.append_record(seq, encode_wal_record(seq, timestamp_ns, tx_frames))

    def append_record(self, seq: int, record: bytes) -> int:
        """Append a record built by ``codecs.encode_wal_record`` for ``seq``, then :meth:`sync`."""
        n = self.write_record(seq, record)
        self.fsync_time.record(self.sync())
        return n

    def write_record(self, seq: int, record: bytes) -> int:
        """Write without syncing (group commit: several writes, then one :meth:`sync`)."""
        if seq <= self.last_seq:
            raise WalError(f"append seq {seq} <= last seq {self.last_seq}")
        if self._fd < 0 or self._size >= self.segment_bytes:
            if self._fd >= 0:
                self.sync()  # a segment is complete and durable before the next one starts
            self._open(self.folder / _segment_name(seq))
        os.write(self._fd, record)
        self._size += len(record)
        self.last_seq = seq
        return len(record)

    def sync(self) -> int:
        """Make every written record durable (``fsync="block"``; a no-op with ``"none"``).
        Returns the nanoseconds it took (the caller records them: this may run on another
        thread than the one reading ``fsync_time``)."""
        if self.fsync != "block" or self._fd < 0:
            return 0
        t0 = time.perf_counter_ns()
        os.fsync(self._fd)
        return time.perf_counter_ns() - t0

    def prune(self, snapshot_seq: int) -> list[Path]:
        """Delete segments whose records all have ``seq <= snapshot_seq``; return them."""
        segs = self.segments()
        removed: list[Path] = []
        for path, nxt in itertools.pairwise(segs):
            next_first = int(nxt.stem.split("-")[1])
            if next_first - 1 <= snapshot_seq:
                path.unlink()
                removed.append(path)
        return removed

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
