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
import struct
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from raydex.codecs import CodecError
from raydex.codecs._hot import codec_of
from raydex.codecs._txcodec import decode_tx, encode_tx
from raydex.codecs._wal import WAL_MAGIC, WalRecordHeader
from raydex.observability.hist import Histogram

FsyncPolicy = Literal["block", "none"]

_HEADER = codec_of(WalRecordHeader)
_HEADER_SIZE = _HEADER.size
#: bytes of the header that the crc covers (everything after magic, body_len and crc32)
_CRC_FROM = 12
_LEN = struct.Struct("<H")


class WalError(RuntimeError):
    """The log is corrupt somewhere other than its tail."""


class WalBlock(NamedTuple):
    seq: int
    timestamp_ns: int
    txs: list[object]


def _segment_name(first_seq: int) -> str:
    return f"wal-{first_seq:020d}.log"


def encode_record(seq: int, timestamp_ns: int, tx_frames: Sequence[bytes]) -> bytes:
    body = b"".join(_LEN.pack(len(f)) + f for f in tx_frames)
    tail = _HEADER.struct.pack(WAL_MAGIC, len(body), 0, seq, timestamp_ns, len(tx_frames))
    crc = zlib.crc32(body, zlib.crc32(tail[_CRC_FROM:]))
    head: bytes = _HEADER.struct.pack(WAL_MAGIC, len(body), crc, seq, timestamp_ns, len(tx_frames))
    return head + body


def decode_record(record: bytes) -> WalBlock:
    """Decode one complete record (as published on the tx-log stream); WalError if it is not."""
    blocks, good = _read_records(record, Path("<stream>"))
    if len(blocks) != 1 or good != len(record):
        raise WalError("not exactly one complete WAL record")
    return blocks[0]


def _read_records(data: bytes, path: Path) -> tuple[list[WalBlock], int]:
    """Parse one segment: its blocks and the offset of the first torn byte (len if none)."""
    blocks: list[WalBlock] = []
    off = 0
    end = len(data)
    while off < end:
        if end - off < _HEADER_SIZE:
            return blocks, off
        magic, body_len, crc, seq, ts, count = _HEADER.struct.unpack_from(data, off)
        body_at = off + _HEADER_SIZE
        if magic != WAL_MAGIC or body_at + body_len > end:
            return blocks, off
        body = data[body_at : body_at + body_len]
        if zlib.crc32(body, zlib.crc32(data[off + _CRC_FROM : body_at])) != crc:
            return blocks, off
        txs: list[object] = []
        pos = 0
        try:
            for _ in range(count):
                (n,) = _LEN.unpack_from(body, pos)
                txs.append(decode_tx(body[pos + 2 : pos + 2 + n]))
                pos += 2 + n
        except (CodecError, struct.error) as exc:
            raise WalError(
                f"{path}: record seq {seq} passed its crc but does not decode: {exc}"
            ) from exc
        blocks.append(WalBlock(seq, ts, txs))
        off = body_at + body_len
    return blocks, off


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
            got, good = _read_records(data, path)
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
        return self.append_record(seq, encode_record(seq, timestamp_ns, tx_frames))

    def append_record(self, seq: int, record: bytes) -> int:
        """Append a record built by :func:`encode_record` for ``seq``, then :meth:`sync`."""
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
