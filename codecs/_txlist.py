"""The length-prefixed tx list, the one body layout shared by tx batches and WAL records.

``count`` x (``uint16`` length, tagged tx bytes from ``encode_tx``); the count itself is carried
by the enclosing frame (a batch's ``uint32`` prefix, a WAL record's header). Decoding is an
untrusted decode: every tx is checked by ``decode_tx``; any malformed input is a CodecError.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from ._errors import CodecError
from ._hot import Buffer
from ._txcodec import decode_tx

_LEN = struct.Struct("<H")


def encode_tx_list(tx_frames: Sequence[bytes]) -> bytes:
    """The list body for already-encoded tx frames (each < 64 KiB)."""
    pack = _LEN.pack
    return b"".join(pack(len(f)) + f for f in tx_frames)


def decode_tx_list(buf: Buffer, count: int, offset: int = 0) -> list[Any]:
    """Exactly ``count`` txs from ``buf[offset:]``, which they must fill to the end."""
    txs: list[Any] = []
    off = offset
    end = len(buf)
    try:
        for _ in range(count):
            (n,) = _LEN.unpack_from(buf, off)
            if off + 2 + n > end:
                raise CodecError(f"tx {len(txs)} truncated", type_name="TxList")
            txs.append(decode_tx(buf[off + 2 : off + 2 + n]))
            off += 2 + n
    except struct.error:
        raise CodecError("truncated tx list", type_name="TxList") from None
    if off != end:
        raise CodecError(f"{end - off} trailing bytes", type_name="TxList")
    return txs
