"""Tx batches up (replica -> sequencer) and their outcomes down: the data-plane frames.

Batch frame: ``uint32 count`` then ``count`` x (``uint16 length``, tagged tx bytes from
``encode_tx``). Outcome frame: ``uint32 count`` then ``count`` x :class:`TxOutcome`, in the
batch's order. Decoding a batch is an untrusted decode (``decode_tx`` checks every tx); outcomes
come from our own sequencer.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Annotated, Any, NamedTuple

from ._enums import ResultCode
from ._errors import CodecError
from ._hot import Buffer, codec_of
from ._txcodec import encode_tx
from ._txlist import decode_tx_list, encode_tx_list
from ._wire import U32, U64, Bytes40, wire

BATCH = "batch"
MAX_BATCH_TXS = 4096
_COUNT = struct.Struct("<I")


@wire(BATCH, 1)
class TxOutcome(NamedTuple):
    """What a submitter learns about one tx once its block is durable: the tx's hash, its result
    code, the exchange order index a CreateOrder placed (0 if none) and the block's seq."""

    tx_hash: Annotated[bytes, Bytes40]
    code: Annotated[int, U32]
    order_index: Annotated[int, U64]
    seq: Annotated[int, U64]


def encode_batch_frames(tx_frames: Sequence[bytes]) -> bytes:
    return _COUNT.pack(len(tx_frames)) + encode_tx_list(tx_frames)


def encode_batch(txs: Sequence[Any]) -> bytes:
    return encode_batch_frames([encode_tx(t) for t in txs])


def decode_batch(buf: Buffer, max_txs: int = MAX_BATCH_TXS) -> list[Any]:
    """Decode an untrusted batch; CodecError on any malformed input, with code
    ``BATCH_TOO_LARGE`` (before decoding any tx) when it holds more than ``max_txs``."""
    try:
        (count,) = _COUNT.unpack_from(buf, 0)
    except struct.error:
        raise CodecError("truncated batch", type_name="TxBatch") from None
    limit = min(max_txs, MAX_BATCH_TXS)
    if count > limit:
        raise CodecError(
            f"batch of {count} txs exceeds {limit}",
            type_name="TxBatch",
            code=ResultCode.BATCH_TOO_LARGE,
        )
    return decode_tx_list(buf, count, 4)


_OUT = codec_of(TxOutcome)


def encode_outcomes(outcomes: Sequence[Sequence[Any]]) -> bytes:
    pack = _OUT.struct.pack
    return _COUNT.pack(len(outcomes)) + b"".join(pack(*o) for o in outcomes)


def decode_outcomes(buf: Buffer) -> list[TxOutcome]:
    try:
        (count,) = _COUNT.unpack_from(buf, 0)
        size = _OUT.size
        if 4 + count * size != len(buf):
            raise CodecError(f"{count} outcomes need {4 + count * size} bytes, got {len(buf)}")
        unpack = _OUT.struct.unpack_from
        new = tuple.__new__
        return [new(TxOutcome, unpack(buf, 4 + i * size)) for i in range(count)]
    except struct.error:
        raise CodecError("truncated outcomes", type_name="TxOutcomes") from None
