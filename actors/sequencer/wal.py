"""The sequencer's write-ahead log: one record per block, group-committed.

Invariants:
- A block is acknowledged only after its record was written and (``fsync="block"``) synced: the
  journal (``journal.py``) releases outcomes only after the covering sync.
- Records are appended in strictly increasing ``seq``; recovery yields them in that order.
- Every byte is checked at open: a **torn tail** (the newest segment ends in bytes that are not a
  complete, crc-valid record, and nothing valid follows) is cut off with a warning naming the file,
  the bytes cut and the seq the log ends at (what the followers applied of it is then taken back
  and written again as restored records: ``repair.py``); **damage followed by valid records**, or
  any bad byte in an older segment, raises :class:`WalError` naming the file, the offset and the
  seqs on either side. Nothing is truncated then: an operator decides.
- After a failed write or sync the log refuses every later write: the sequencer must stop and
  recover from what reached the disk.

Layout: segments ``wal-<first seq:020d>.log``; a record is ``WalRecordHeader`` (``codecs/_wal.py``)
+ the tx list + the refusals. A new segment's directory entry is synced before its first record
counts. With ``preallocate`` a segment is born ``segment_bytes`` of zeros (made by a background
thread, ``wal-next.tmp``, a page at a time, renamed in at the rollover); records are written over
the zeros (``pwrite``) and synced with ``fdatasync``, so a sync flushes data, no metadata. A record
starts with ``WAL_MAGIC``, so **zeros after the last record are room, not damage**; a torn write
inside them is zeroed (``torn_bytes``). Without a prepared segment a segment is a growing file.

An in-memory index (16 bytes per record) serves any held range with one ``pread`` per segment
(:meth:`Wal.read_records`); :meth:`Wal.replay` decodes only the records after a snapshot.
:meth:`Wal.prune` drops whole segments covered by a snapshot.

Cost: one ``pwrite`` and one sync per group of blocks, never per tx; opening crc-checks every held
byte once. ``fsync="none"`` trades durability across power loss for latency.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from raydex.codecs import (
    CodecError,
    Refusal,
    WalBlock,
    encode_tx,
    encode_wal_record,
    find_wal_record,
    peek_wal_record,
    read_wal_records,
)
from raydex.observability.hist import Histogram

log = logging.getLogger(__name__)

FsyncPolicy = Literal["block", "none"]


class WalError(RuntimeError):
    """The log cannot be used: damage that is not a torn tail, an out-of-order record, or a
    write/sync that failed earlier."""


def _segment_name(first_seq: int) -> str:
    return f"wal-{first_seq:020d}.log"


#: the next segment, zero-filled and synced ahead of the rollover (never a ``wal-*.log`` name)
SPARE_NAME = "wal-next.tmp"
#: the size of the segment a log opens with (when it has none with room): see ``Wal.__init__``
FIRST_SEGMENT_BYTES = 4 << 20
_PAGE = os.sysconf("SC_PAGE_SIZE")
#: after a failed preparation (a full disk), the seconds before the next attempt
PREPARE_RETRY_S = 30.0


def _first_seq_of(path: Path) -> int:
    return int(path.stem.split("-")[1])


def fsync_dir(folder: Path) -> None:
    """Make ``folder``'s entries (created, renamed or deleted files) durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(slots=True)
class _Segment:
    path: Path
    first_seq: int
    #: seq and start offset of every record, in file order (end = next offset or ``size``)
    seqs: array[int] = field(default_factory=lambda: array("Q"))
    offsets: array[int] = field(default_factory=lambda: array("Q"))
    #: end of the last record (where the next one is written)
    size: int = 0
    #: the file's preallocated length (0: an ordinary file that grows with its records)
    capacity: int = 0


class Wal:
    """Append-only, segmented, crc-checked block log (see module docstring)."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        fsync: FsyncPolicy = "block",
        segment_bytes: int = 64 << 20,
        preallocate: bool = False,
    ) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.preallocate = preallocate
        #: segments started from a prepared (preallocated) file / as ordinary growing files
        self.preallocated_segments = 0
        self.plain_segments = 0
        self.last_seq = 0
        #: fsync per appended block (ns); exported as ``raydex_wal_fsync_seconds``
        self.fsync_time = Histogram()
        #: bytes cut off as a torn tail at open (0 when the log was clean)
        self.torn_bytes = 0
        self._fd = -1
        self._failed: BaseException | None = None
        self._lock = threading.Lock()  # guards ``_segments`` (appender, pruner, readers)
        self._segments: list[_Segment] = []
        #: prepared and synced, ready to be renamed into place, and its size
        self._spare: tuple[Path, int] | None = None
        self._preparer: threading.Thread | None = None
        self._prepare_failed_at = -float("inf")
        (self.folder / SPARE_NAME).unlink(missing_ok=True)  # half made when a process died
        self._recover()
        if preallocate:
            newest = self._segments[-1] if self._segments else None
            if newest is None or newest.size >= newest.capacity:
                # the first segment too, at open; small, as a log may never fill it: the full-size
                # next one is prepared when it is half full (a test's sequencer, a short run,
                # keeps 2 x 4 MiB, not 2 x 64)
                with contextlib.suppress(OSError):  # logged; the log starts ordinary files
                    self._prepare_spare(min(segment_bytes, FIRST_SEGMENT_BYTES))

    # ---- opening: check every byte --------------------------------------------------------------

    def segments(self) -> list[Path]:
        return sorted(self.folder.glob("wal-*.log"))

    def _recover(self) -> None:
        paths = self.segments()
        for i, path in enumerate(paths):
            seg = self._scan(path, data := path.read_bytes(), last=i == len(paths) - 1)
            if seg.size != len(data) and not seg.capacity:
                self._cut_torn_tail(seg, data)
            self._segments.append(seg)
        if self._segments:
            self._open(self._segments[-1])

    def _scan(self, path: Path, data: bytes, last: bool) -> _Segment:
        """Index the valid records of one segment; raise WalError unless what follows them is a
        torn tail of the newest segment."""
        seg = _Segment(path, _first_seq_of(path))
        off = 0
        try:
            while (info := peek_wal_record(data, off)) is not None:
                if info.seq <= self.last_seq or (off == 0 and info.seq != seg.first_seq):
                    raise WalError(
                        f"{path}: record seq {info.seq} at byte {off} is out of order (after "
                        f"seq {self.last_seq}, segment named for seq {seg.first_seq})"
                    )
                seg.seqs.append(info.seq)
                seg.offsets.append(off)
                self.last_seq = info.seq
                off = info.end
            if off != len(data) and data.count(0, off) == len(data) - off:
                seg.capacity = len(data)  # zeros after the last record: room, not damage
            elif off != len(data):
                after = find_wal_record(data, off + 1)
                if after is not None or not last:
                    nxt = (
                        f"a valid record seq {after.seq} at byte {after.offset}"
                        if after
                        else "a newer segment"
                    )
                    raise WalError(
                        f"{path}: damaged WAL at byte {off} (after seq {self.last_seq}), "
                        f"followed by {nxt}: this is not a torn tail; refusing to start. "
                        "Restore the file, or move the damaged part aside knowing that the "
                        "blocks in it were acknowledged"
                    )
        except CodecError as exc:
            raise WalError(f"{path}: {exc}") from exc
        seg.size = off
        return seg

    def _cut_torn_tail(self, seg: _Segment, data: bytes) -> None:
        written = len(data.rstrip(b"\0"))  # the torn bytes end here; zeros after are room
        cut = written - seg.size
        with open(seg.path, "r+b") as f:  # cut the torn tail so appends continue cleanly
            if written < len(data):  # zeroed: truncating would give the preallocation up
                os.pwrite(f.fileno(), bytes(cut), seg.size)
                seg.capacity = len(data)
            else:
                f.truncate(seg.size)
            os.fsync(f.fileno())
        self.torn_bytes += cut
        log.warning(
            "WAL %s: torn tail of %d bytes at byte %d cut off (no valid record after it); "
            "the log now ends at seq %d",
            seg.path,
            cut,
            seg.size,
            self.last_seq,
        )

    @property
    def first_seq(self) -> int:
        """Seq of the oldest record held (0 when the log is empty)."""
        with self._lock:
            for seg in self._segments:
                if seg.seqs:
                    return seg.seqs[0]
        return 0

    # ---- reading --------------------------------------------------------------------------------

    def replay(self, after_seq: int = 0) -> Iterator[WalBlock]:
        """Blocks with ``seq > after_seq``, in order; segments and records at or before
        ``after_seq`` are skipped without decoding. Call before appending starts."""
        for seg in self._held_segments():
            if not seg.seqs or seg.seqs[-1] <= after_seq:
                continue
            data = seg.path.read_bytes()[: seg.size]
            try:
                blocks, _ = read_wal_records(data, after_seq)
            except CodecError as exc:
                raise WalError(f"{seg.path}: {exc}") from exc
            yield from blocks

    def read_records(
        self, from_seq: int, through_seq: int, max_records: int, max_bytes: int
    ) -> list[tuple[int, bytes]]:
        """Raw records with ``from_seq <= seq <= through_seq``, oldest first, at most
        ``max_records`` and about ``max_bytes`` (always at least one when any is held). Safe to
        call from any thread while the journal appends (``through_seq`` must be durable). A
        segment pruned meanwhile ends the answer early."""
        out: list[tuple[int, bytes]] = []
        size = 0
        for seg in self._held_segments():
            n = len(seg.seqs)  # a snapshot of what the appender had indexed
            if not n or seg.seqs[n - 1] < from_seq:
                continue
            i = bisect.bisect_left(seg.seqs, from_seq, 0, n)
            j = i
            while j < n and seg.seqs[j] <= through_seq and len(out) + j - i < max_records:
                end = seg.offsets[j + 1] if j + 1 < n else seg.size
                if j > i and size + end - seg.offsets[i] > max_bytes:
                    break
                j += 1
            if j == i:
                break
            start = seg.offsets[i]
            stop = seg.offsets[j] if j < n else seg.size
            try:
                with open(seg.path, "rb") as f:
                    data = os.pread(f.fileno(), stop - start, start)
            except FileNotFoundError:
                break
            for k in range(i, j):
                a = seg.offsets[k] - start
                b = (seg.offsets[k + 1] if k + 1 < n else seg.size) - start
                out.append((seg.seqs[k], data[a:b]))
            size += len(data)
            if len(out) >= max_records or size >= max_bytes or seg.seqs[j - 1] >= through_seq:
                break
        return out

    def _held_segments(self) -> list[_Segment]:
        with self._lock:
            return list(self._segments)

    # ---- appending ------------------------------------------------------------------------------

    def _open(self, seg: _Segment) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        # no O_APPEND: records go at ``seg.size``, over a preallocated segment's zeros
        self._fd = os.open(seg.path, os.O_WRONLY | os.O_CREAT, 0o644)

    def _new_segment(self, seq: int) -> _Segment:
        """The segment starting at ``seq``: the prepared spare renamed into place when one is
        ready, else an ordinary file. Its directory entry is synced (``fsync="block"``)."""
        seg = _Segment(self.folder / _segment_name(seq), seq)
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            try:
                os.rename(spare[0], seg.path)
            except FileNotFoundError:  # removed behind the log's back: an ordinary file then
                log.warning("WAL %s: the prepared segment %s is gone", self.folder, spare[0])
                spare = None
        if spare is not None:
            seg.capacity = spare[1]
            self.preallocated_segments += 1
        else:
            self.plain_segments += 1
        self._open(seg)
        if self.fsync == "block":
            fsync_dir(self.folder)  # the new file's entry survives a power loss
        return seg

    # ---- preallocation (off the appender's path) -------------------------------------------------

    def _roll_early(self, seg: _Segment, n: int) -> bool:
        """Start a new segment before ``segment_bytes``: the record does not fit in what ``seg``
        preallocated, or ``seg`` is an ordinary file and a prepared one is ready."""
        if seg.capacity:
            return seg.size + n > seg.capacity
        return self._spare is not None

    def _prepare_spare(self, size: int) -> None:
        """Write ``size`` bytes of zeros to the spare file and sync it (~45 ms per 64 MiB here)."""
        path = self.folder / SPARE_NAME
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                # one page per write: the page cache keeps the folio size a write made, and a
                # sync writes back whole dirty folios. Zeros written 1 MiB at a time left 1 MiB
                # folios, and every block's sync wrote 1 MiB to the disk (/proc/PID/io
                # write_bytes: 1,048,576 per sync against 5,600 appending; page-sized: 5,600)
                zeros = memoryview(bytes(_PAGE))
                left = size
                while left > 0:
                    left -= os.write(fd, zeros[: min(left, _PAGE)])
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            # a full disk shows here first: give the space back to the log's own writes, and
            # do not try again for PREPARE_RETRY_S (ordinary files meanwhile)
            path.unlink(missing_ok=True)
            self._prepare_failed_at = time.monotonic()
            log.warning("WAL %s: could not prepare the next segment (%s); segments are "
                        "ordinary files for now", self.folder, exc)  # fmt: skip
            raise
        with self._lock:
            self._spare = (path, size)

    def _maybe_prepare(self, seg: _Segment) -> None:
        """After a write: start preparing the next segment once ``seg`` is half full (an
        ordinary segment: at once), unless a spare is ready or being made."""
        if self._spare is not None or (seg.capacity and seg.size * 2 < seg.capacity):
            return
        if self._preparer is not None and self._preparer.is_alive():
            return
        if time.monotonic() - self._prepare_failed_at < PREPARE_RETRY_S:
            return

        def prepare() -> None:
            with contextlib.suppress(OSError):  # logged; the next segment is an ordinary file
                self._prepare_spare(self.segment_bytes)

        self._preparer = threading.Thread(target=prepare, name="wal-prepare", daemon=True)
        self._preparer.start()

    def append(self, seq: int, timestamp_ns: int, txs: Sequence[object]) -> int:
        """Write one block's txs; durable on return with ``fsync="block"``. Returns its size."""
        frames = [encode_tx(t) for t in txs]  # type: ignore[arg-type]
        return self.append_frames(seq, timestamp_ns, frames)

    def append_frames(
        self,
        seq: int,
        timestamp_ns: int,
        tx_frames: Sequence[bytes],
        refused: Sequence[Refusal] = (),
    ) -> int:
        return self.append_record(seq, encode_wal_record(seq, timestamp_ns, tx_frames, refused))

    def append_record(self, seq: int, record: bytes) -> int:
        """Append a record built by ``codecs.encode_wal_record`` for ``seq``, then :meth:`sync`."""
        n = self.write_record(seq, record)
        self.fsync_time.record(self.sync())
        return n

    def write_record(self, seq: int, record: bytes) -> int:
        """Write without syncing (group commit: several writes, then one :meth:`sync`)."""
        if self._failed is not None:
            raise WalError(f"the WAL failed earlier and takes no more writes: {self._failed!r}")
        if seq <= self.last_seq:
            raise WalError(f"append seq {seq} <= last seq {self.last_seq}")
        try:
            seg = self._segments[-1] if self._segments else None
            if seg is not None and not seg.seqs and seg.first_seq != seq:
                self._drop_empty(seg)  # named for a seq that never came (recovery jumped ahead)
                seg = None
            if (
                seg is None
                or self._fd < 0
                or seg.size >= self.segment_bytes
                or (seg.seqs and self._roll_early(seg, len(record)))
            ):
                if seg is not None and self._fd >= 0:
                    self.sync()  # a segment is complete and durable before the next one starts
                seg = self._new_segment(seq)
                with self._lock:
                    self._segments.append(seg)
            view = memoryview(record)
            written = 0
            while written < len(record):  # os.pwrite may write less (e.g. the disk filled up)
                written += os.pwrite(self._fd, view[written:], seg.size + written)
        except BaseException as exc:
            self._failed = exc
            raise
        seg.offsets.append(seg.size)
        seg.seqs.append(seq)
        seg.size += len(record)
        self.last_seq = seq
        if self.preallocate:
            self._maybe_prepare(seg)
        return len(record)

    def _drop_empty(self, seg: _Segment) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        with self._lock:
            self._segments.remove(seg)
        seg.path.unlink(missing_ok=True)

    def sync(self) -> int:
        """Make every written record durable (``fsync="block"``; a no-op with ``"none"``).
        Returns the nanoseconds it took (the caller records them: this may run on another
        thread than the one reading ``fsync_time``). A failed sync poisons the log."""
        if self._failed is not None:
            raise WalError(f"the WAL failed earlier and cannot sync: {self._failed!r}")
        if self.fsync != "block" or self._fd < 0:
            return 0
        t0 = time.perf_counter_ns()
        try:
            # the data and what reading it back needs (a grown file's size and blocks); not the
            # times: over a preallocated segment, no filesystem metadata at all
            os.fdatasync(self._fd)
        except BaseException as exc:
            self._failed = exc
            raise
        return time.perf_counter_ns() - t0

    def prune(self, through_seq: int) -> list[Path]:
        """Delete the segments whose records all have ``seq <= through_seq`` (never the newest
        one, which is being appended to); return them."""
        removed: list[Path] = []
        with self._lock:
            keep: list[_Segment] = []
            for i, seg in enumerate(self._segments):
                is_last = i == len(self._segments) - 1
                covered = not is_last and self._segments[i + 1].first_seq - 1 <= through_seq
                if covered and not keep:
                    removed.append(seg.path)
                else:
                    keep.append(seg)
            self._segments = keep
        for path in removed:
            path.unlink(missing_ok=True)
        if removed:
            fsync_dir(self.folder)
        return removed

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._preparer is not None:
            self._preparer.join()  # never left writing into a folder its owner may remove
