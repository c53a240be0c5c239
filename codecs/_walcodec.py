"""WAL records to and from bytes: the layout of ``_wal`` with the tx list of ``_txlist``.

A record is ``WalRecordHeader`` + the tx list + the refusals; ``crc32`` covers everything after
the crc field, so a torn or damaged write is detected. The readers here only *find* records:

- :func:`peek_wal_record` says whether a complete, crc-valid record starts at an offset (header
  and crc only, the body is not decoded: ~1 GB/s of crc, no allocation per tx);
- :func:`find_wal_record` scans forward byte by byte for the next such record (used to tell a
  torn tail, after which nothing valid follows, from damage followed by valid records);
- :func:`read_wal_records` decodes consecutive records and says where the valid prefix ends;
  records with ``seq <= after_seq`` are crc-checked but their bodies are not decoded (recovery
  skips what a snapshot already holds).

What to do with bytes that are not a valid record (truncate a torn tail, refuse to start on
damage in the middle) is the log file's decision (``actors/sequencer/wal.py``). A record with the
first layout's magic raises :class:`CodecError` (an old log, not damage).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from ._errors import CodecError
from ._events import TxExecuted
from ._hot import Buffer, codec_of
from ._txlist import decode_tx_list, encode_tx_list
from ._wal import (
    WAL_MAGIC,
    WAL_MAGIC_3,
    WAL_MAGIC_RESTORED,
    WAL_MAGIC_RESTORED_3,
    WAL_MAGIC_V1,
    WalRecordHeader,
    WalRecordHeader3,
)

#: ``(position among the block's txs, the TxExecuted published for that refused tx)``
Refusal = tuple[int, TxExecuted]


class WalBlock(NamedTuple):
    """One decoded WAL record: the txs the engine executed in block ``seq`` at ``timestamp_ns``,
    and the txs refused before the engine (their position and published ``TxExecuted``); or,
    for a restored record (``_wal``), no txs and the block's delta frame in ``restored``."""

    seq: int
    timestamp_ns: int
    txs: list[object]
    refused: Sequence[Refusal] = ()
    restored: bytes | None = None
    #: a restored record's ``origin_crc`` (``wal_record_crc`` of it)
    origin_crc: int = 0
    #: the epoch that sequenced it (0: a layout-2 record, no arbiter)
    epoch: int = 0


class WalRecordInfo(NamedTuple):
    """Where one valid record sits in a buffer: ``[offset, end)``; its seq and crc."""

    offset: int
    end: int
    seq: int
    timestamp_ns: int
    crc32: int
    epoch: int = 0


_HEADER = codec_of(WalRecordHeader)
_HEADER_SIZE = _HEADER.size
_HEADER3 = codec_of(WalRecordHeader3)
#: bytes of the header that the crc covers (everything after magic, body_len and crc32)
_CRC_FROM = 12
_MAGIC = struct.Struct("<I")
#: magic -> (header layout, a restored record)
_LAYOUTS: dict[int, tuple[struct.Struct, bool]] = {
    WAL_MAGIC: (_HEADER.struct, False),
    WAL_MAGIC_RESTORED: (_HEADER.struct, True),
    WAL_MAGIC_3: (_HEADER3.struct, False),
    WAL_MAGIC_RESTORED_3: (_HEADER3.struct, True),
}
_MAGICS = frozenset(_LAYOUTS)
_MAGIC_PATTERNS = tuple(_MAGIC.pack(m) for m in _LAYOUTS)


class _Header(NamedTuple):
    """A record header of either layout (``epoch`` 0 for layout 2)."""

    magic: int
    body_len: int
    crc32: int
    seq: int
    timestamp_ns: int
    count: int  # type: ignore[assignment]  # shadows tuple.count
    refused: int
    epoch: int
    size: int
    restored: bool


def _header(data: Buffer, off: int) -> _Header | None:
    """The header at ``off`` (None: too short, or not a record's magic); CodecError for the
    first layout."""
    if len(data) - off < _HEADER_SIZE:
        return None
    (magic,) = _MAGIC.unpack_from(data, off)
    layout = _LAYOUTS.get(magic)
    if layout is None:
        if magic == WAL_MAGIC_V1:
            raise CodecError(
                f"record at byte {off} has the first WAL layout (magic WXDR); this version reads "
                "layouts 2 and 3 only: recover it with the version that wrote it, or start from "
                "a snapshot",
                type_name="WalRecord",
            )
        return None
    st, restored = layout
    if len(data) - off < st.size:
        return None
    fields = st.unpack_from(data, off)
    m, body_len, crc, seq, ts, count, refused = fields[:7]
    epoch = fields[7] if len(fields) > 7 else 0
    return _Header(m, body_len, crc, seq, ts, count, refused, epoch, st.size, restored)


def _pack_header(
    magic2: int, magic3: int, body: bytes, seq: int, ts: int, n: int, r: int, epoch: int
) -> bytes:
    """A header over ``body`` (its crc included): layout 3 for an epoch, else layout 2."""
    if epoch:
        pack = _HEADER3.struct.pack
        tail = pack(magic3, len(body), 0, seq, ts, n, r, epoch)
        crc = zlib.crc32(body, zlib.crc32(tail[_CRC_FROM:]))
        head: bytes = pack(magic3, len(body), crc, seq, ts, n, r, epoch)
        return head
    pack = _HEADER.struct.pack
    tail = pack(magic2, len(body), 0, seq, ts, n, r)
    crc = zlib.crc32(body, zlib.crc32(tail[_CRC_FROM:]))
    head2: bytes = pack(magic2, len(body), crc, seq, ts, n, r)
    return head2


_U32 = struct.Struct("<I")
_EXECUTED = codec_of(TxExecuted)
_POSITION = struct.Struct("<I")
_REFUSAL_SIZE = _POSITION.size + _EXECUTED.size


def encode_wal_record(
    seq: int,
    timestamp_ns: int,
    tx_frames: Sequence[bytes],
    refused: Sequence[Refusal] = (),
    epoch: int = 0,
) -> bytes:
    """One record: header (crc over the rest of the header and the body) + tx list + refusals;
    layout 3 with ``epoch`` when it is not 0, else layout 2 (``_wal``)."""
    body = encode_tx_list(tx_frames)
    if refused:
        pack, enc = _POSITION.pack, _EXECUTED.encode
        body += b"".join(pack(pos) + enc(ev) for pos, ev in refused)
    n, r = len(tx_frames), len(refused)
    return _pack_header(WAL_MAGIC, WAL_MAGIC_3, body, seq, timestamp_ns, n, r, epoch) + body


def encode_restored_wal_record(
    seq: int, timestamp_ns: int, origin_crc: int, frame: bytes, epoch: int = 0
) -> bytes:
    """A restored record (``_wal``): block ``seq``'s delta ``frame`` as first published, standing
    for the lost record whose identity was ``origin_crc`` (layout 3 with ``epoch`` when not 0)."""
    body = _U32.pack(origin_crc) + frame
    magics = (WAL_MAGIC_RESTORED, WAL_MAGIC_RESTORED_3)
    return _pack_header(*magics, body, seq, timestamp_ns, 0, 0, epoch) + body


def decode_wal_record(record: bytes) -> WalBlock:
    """Decode one complete record (as published on the tx-log stream); CodecError if it is not."""
    blocks, good = read_wal_records(record)
    if len(blocks) != 1 or good != len(record):
        raise CodecError("not exactly one complete WAL record", type_name="WalRecord")
    return blocks[0]


def wal_record_crc(record: Buffer) -> int:
    """The identity of the record starting at ``record[0]``: its crc32 field (it covers seq,
    timestamp, txs and refusals); for a restored record, the ``origin_crc`` of the record it
    stands for, so a follower that applied the original sees the same history. Not checked here;
    see :func:`peek_wal_record`."""
    h = _header(record, 0)
    if h is None:
        raise CodecError("not a WAL record header", type_name="WalRecord")
    if h.restored:
        if len(record) < h.size + _U32.size:
            raise CodecError("a restored WAL record without its origin crc", type_name="WalRecord")
        origin: int = _U32.unpack_from(record, h.size)[0]
        return origin
    return int(h.crc32)


def peek_wal_record(data: Buffer, off: int = 0) -> WalRecordInfo | None:
    """The record at ``off`` if a complete, crc-valid one starts there, else None. Raises
    CodecError for a record of the first layout (an old log is not damage)."""
    h = _header(data, off)
    if h is None:
        return None
    body_at = off + h.size
    end = body_at + h.body_len
    if end > len(data):
        return None
    view = memoryview(data)
    if zlib.crc32(view[body_at:end], zlib.crc32(view[off + _CRC_FROM : body_at])) != h.crc32:
        return None
    return WalRecordInfo(off, end, h.seq, h.timestamp_ns, h.crc32, h.epoch)


def find_wal_record(data: Buffer, start: int) -> WalRecordInfo | None:
    """The first complete, crc-valid record starting at or after ``start`` (a byte-by-byte scan
    for the magic; a false magic inside a tx fails its crc). Cost: O(len(data) - start)."""
    raw = bytes(data) if not isinstance(data, bytes) else data
    at = _next_magic(raw, start)
    while at >= 0:
        try:
            found = peek_wal_record(raw, at)
        except CodecError:
            found = None
        if found is not None:
            return found
        at = _next_magic(raw, at + 1)
    return None


def _next_magic(raw: bytes, start: int) -> int:
    """Where the next record magic (either kind) starts at or after ``start``; -1 if none."""
    hits = [at for at in (raw.find(m, start) for m in _MAGIC_PATTERNS) if at >= 0]
    return min(hits) if hits else -1


def _decode_body(data: Buffer, info: WalRecordInfo) -> WalBlock:
    h = _header(data, info.offset)
    assert h is not None  # a record ``peek_wal_record`` found
    seq, ts, count, refused, epoch = h.seq, h.timestamp_ns, h.count, h.refused, h.epoch
    body_at = info.offset + h.size
    if h.restored:
        if info.end - body_at < _U32.size or count or refused:
            raise CodecError(
                f"record seq {seq}: a malformed restored record", type_name="WalRecord"
            )
        (origin,) = _U32.unpack_from(data, body_at)
        frame = bytes(memoryview(data)[body_at + _U32.size : info.end])
        return WalBlock(seq, ts, [], (), frame, origin, epoch)
    list_end = info.end - refused * _REFUSAL_SIZE
    if list_end < body_at:
        raise CodecError(f"record seq {seq}: {refused} refusals do not fit", type_name="WalRecord")
    try:
        txs = decode_tx_list(memoryview(data)[body_at:list_end], count)
        out: list[Refusal] = []
        off = list_end
        for _ in range(refused):
            (pos,) = _POSITION.unpack_from(data, off)
            out.append((pos, _EXECUTED.decode(data, off + _POSITION.size)))
            off += _REFUSAL_SIZE
    except (CodecError, struct.error) as exc:
        raise CodecError(f"record seq {seq} passed its crc but does not decode: {exc}") from exc
    return WalBlock(seq, ts, txs, out, epoch=epoch)


def read_wal_records(data: Buffer, after_seq: int = 0) -> tuple[list[WalBlock], int]:
    """Parse consecutive records: the blocks with ``seq > after_seq`` (the others are crc-checked,
    not decoded) and the offset of the first byte that does not start a complete, crc-valid
    record (``len(data)`` if none). A record that passes its crc but does not decode raises
    CodecError (that is not a torn write)."""
    blocks: list[WalBlock] = []
    off = 0
    end = len(data)
    while off < end:
        info = peek_wal_record(data, off)
        if info is None:
            return blocks, off
        if info.seq > after_seq:
            blocks.append(_decode_body(data, info))
        off = info.end
    return blocks, off


# ---- WAL range reads: how a follower behind the sequencer's ring catches up from its WAL --------

_READ_REQUEST = struct.Struct("<QI")
_READ_REPLY = struct.Struct("<QQ")


class WalReadReply(NamedTuple):
    """The answer to a WAL range read: the oldest seq the WAL holds, the newest durable seq, and
    the records (raw, each a complete record) from the requested seq on, oldest first."""

    first_held: int
    last_seq: int
    records: list[tuple[int, bytes]]


def encode_wal_read_request(from_seq: int, max_records: int) -> bytes:
    """``u64 from_seq | u32 max_records``: records with ``seq >= from_seq``, at most that many."""
    return _READ_REQUEST.pack(from_seq, max_records)


def decode_wal_read_request(frame: Buffer) -> tuple[int, int]:
    if len(frame) != _READ_REQUEST.size:
        raise CodecError(f"needs {_READ_REQUEST.size} bytes, got {len(frame)}", type_name="WalRead")
    from_seq, max_records = _READ_REQUEST.unpack_from(frame)
    return from_seq, max_records


def encode_wal_read_reply(first_held: int, last_seq: int, records: Sequence[bytes]) -> bytes:
    """``u64 first_held | u64 last_seq`` + the records back to back (they delimit themselves)."""
    return _READ_REPLY.pack(first_held, last_seq) + b"".join(records)


def decode_wal_read_reply(frame: Buffer) -> WalReadReply:
    """Split a reply into its records (crc-checked, not decoded); CodecError if any is bad."""
    if len(frame) < _READ_REPLY.size:
        raise CodecError("shorter than its header", type_name="WalReadReply")
    first_held, last_seq = _READ_REPLY.unpack_from(frame)
    records: list[tuple[int, bytes]] = []
    off = _READ_REPLY.size
    data = bytes(frame)
    while off < len(data):
        info = peek_wal_record(data, off)
        if info is None:
            raise CodecError(f"bad record at byte {off}", type_name="WalReadReply")
        records.append((info.seq, data[off : info.end]))
        off = info.end
    return WalReadReply(first_held, last_seq, records)


# ---- replication: the primary's WAL records pushed to its standby, each answered with an ack ----

_REPLICATE_HEAD = struct.Struct("<Q")
_REPLICATE_REPLY = struct.Struct("<BQQ")

#: the standby holds every record through ``seq`` durably (its ``fsync``)
REPLICATE_OK = 0
#: the standby holds records through ``seq`` only: send from ``seq + 1`` (a gap before this request)
REPLICATE_GAP = 1
#: the standby follows a newer epoch (``epoch``): the sender is not the primary any more
REPLICATE_FENCED = 2
#: the standby holds another record at ``seq``: its log and the sender's differ there
REPLICATE_DIVERGED = 3


class ReplicateReply(NamedTuple):
    """A standby's answer to one replication request (``REPLICATE_*`` kind, seq, its epoch)."""

    kind: int
    seq: int
    epoch: int


def encode_replicate(epoch: int, records: Sequence[bytes]) -> bytes:
    """``u64 epoch`` + consecutive complete WAL records (they delimit themselves)."""
    head: bytes = _REPLICATE_HEAD.pack(epoch)
    return head + b"".join(records)


def decode_replicate(frame: Buffer) -> tuple[int, list[tuple[int, bytes]]]:
    """The epoch and ``(seq, record)`` of each record (crc-checked, not decoded); CodecError if
    the frame is short or a record is incomplete or damaged."""
    if len(frame) < _REPLICATE_HEAD.size:
        raise CodecError("shorter than its header", type_name="Replicate")
    (epoch,) = _REPLICATE_HEAD.unpack_from(frame)
    data = bytes(frame)
    records: list[tuple[int, bytes]] = []
    off = _REPLICATE_HEAD.size
    while off < len(data):
        info = peek_wal_record(data, off)
        if info is None:
            raise CodecError(f"bad record at byte {off}", type_name="Replicate")
        records.append((info.seq, data[off : info.end]))
        off = info.end
    return epoch, records


def encode_replicate_reply(kind: int, seq: int, epoch: int) -> bytes:
    reply: bytes = _REPLICATE_REPLY.pack(kind, seq, epoch)
    return reply


def decode_replicate_reply(frame: Buffer) -> ReplicateReply:
    if len(frame) != _REPLICATE_REPLY.size:
        raise CodecError(
            f"needs {_REPLICATE_REPLY.size} bytes, got {len(frame)}", type_name="ReplicateReply"
        )
    return ReplicateReply(*_REPLICATE_REPLY.unpack_from(frame))
