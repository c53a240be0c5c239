"""WAL records to and from bytes: the layout of ``_wal`` with the tx list of ``_txlist``.

A record is ``WalRecordHeader`` + the tx list; ``crc32`` covers everything after the crc field,
so a torn write is detected. :func:`read_wal_records` tells where the valid prefix of a byte
string ends; what to do with the rest (a torn tail, or damage followed by valid records) is the
log file's decision (``actors/sequencer/wal.py``).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import NamedTuple

from ._errors import CodecError
from ._hot import codec_of
from ._txlist import decode_tx_list, encode_tx_list
from ._wal import WAL_MAGIC, WalRecordHeader


class WalBlock(NamedTuple):
    """One decoded WAL record: the txs the engine executed in block ``seq`` at ``timestamp_ns``."""

    seq: int
    timestamp_ns: int
    txs: list[object]


_HEADER = codec_of(WalRecordHeader)
_HEADER_SIZE = _HEADER.size
#: bytes of the header that the crc covers (everything after magic, body_len and crc32)
_CRC_FROM = 12


def encode_wal_record(seq: int, timestamp_ns: int, tx_frames: Sequence[bytes]) -> bytes:
    """One record: header (crc over the rest of the header and the body) + the tx list."""
    body = encode_tx_list(tx_frames)
    tail = _HEADER.struct.pack(WAL_MAGIC, len(body), 0, seq, timestamp_ns, len(tx_frames))
    crc = zlib.crc32(body, zlib.crc32(tail[_CRC_FROM:]))
    head: bytes = _HEADER.struct.pack(WAL_MAGIC, len(body), crc, seq, timestamp_ns, len(tx_frames))
    return head + body


def decode_wal_record(record: bytes) -> WalBlock:
    """Decode one complete record (as published on the tx-log stream); CodecError if it is not."""
    blocks, good = read_wal_records(record)
    if len(blocks) != 1 or good != len(record):
        raise CodecError("not exactly one complete WAL record", type_name="WalRecord")
    return blocks[0]


def read_wal_records(data: bytes) -> tuple[list[WalBlock], int]:
    """Parse consecutive records: the blocks and the offset of the first byte that does not start
    a complete, crc-valid record (``len(data)`` if none). A record that passes its crc but does
    not decode raises CodecError (that is not a torn write)."""
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
        try:
            txs = decode_tx_list(body, count)
        except CodecError as exc:
            raise CodecError(f"record seq {seq} passed its crc but does not decode: {exc}") from exc
        blocks.append(WalBlock(seq, ts, txs))
        off = body_at + body_len
    return blocks, off
