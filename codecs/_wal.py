"""Write-ahead log record layout (codec: ``_walcodec``; files: ``actors/sequencer/wal.py``).

One record per block: a fixed header, then ``count`` transactions, each as a ``uint16`` length and
its tagged wire form (``encode_tx``). ``crc32`` covers everything after the crc field (the rest of
the header and the body), so a torn tail write is detected on recovery.
"""

from __future__ import annotations

from typing import Annotated, NamedTuple

from ._wire import U32, U64, wire

WAL = "wal"
WAL_MAGIC = 0x52445857  # "WXDR" little-endian: marks the start of every record


@wire(WAL, 1)
class WalRecordHeader(NamedTuple):
    magic: Annotated[int, U32]
    body_len: Annotated[int, U32]
    crc32: Annotated[int, U32]
    seq: Annotated[int, U64]
    timestamp_ns: Annotated[int, U64]
    count: Annotated[int, U32]  # type: ignore[assignment]  # shadows tuple.count
