"""Transaction framing: tagged binary encoding, checked decoding, signing bytes and tx hashes.

Wire form of a transaction: ``tx_type`` (uint8) followed by its layout (``_hot``). ``decode_tx`` is
for untrusted bytes: known tag, exact length, every ``Range`` extra enforced, else CodecError.

Signed form (user transactions, i.e. layouts ending in a ``sig`` field): ``chain_id`` (uint32 LE),
``tx_type`` (uint8), then the layout *without* ``sig``. The signature therefore covers exactly the
fields the engine executes, and a signature for one chain never verifies on another.

``tx_hash`` is sha256 of the full wire form (signature included), 32 bytes.

Cost (CreateOrder, busy 2-core dev box): encode_tx ~2.5 us, decode_tx ~3 us (range checks included),
signing_bytes ~1.7 us, tx_hash ~4.5 us.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

from ._enums import ResultCode
from ._errors import CodecError
from ._hot import HOT_BY_TAG, Buffer, HotCodec, codec_of
from ._tx import TX, Transaction

_TX_CODECS: dict[int, HotCodec[Any]] = HOT_BY_TAG[TX]


def _signing_struct(codec: HotCodec[Any]) -> struct.Struct | None:
    fields = codec.spec.fields
    if not fields or fields[-1].name != "sig":
        return None
    # The tagged format minus the trailing "64s": chain id, tag, then every field but sig.
    return struct.Struct(
        "<IB" + codec.tagged.format[2:].removesuffix(f"{codec.bytes_fields[-1][1]}s")
    )


#: tx class -> (struct of chain id + tag + layout without sig, tag); user transactions only.
_SIGNING: dict[type, tuple[struct.Struct, int]] = {
    c.cls: (s, c.tag) for c in _TX_CODECS.values() if (s := _signing_struct(c)) is not None
}


def is_signed_type(cls: type) -> bool:
    """True for transactions that carry a signature (user transactions)."""
    return cls in _SIGNING


def encode_tx(tx: Transaction) -> bytes:
    """``tx_type`` byte + layout. Raises CodecError for unencodable values (see ``_hot``)."""
    return codec_of(type(tx)).encode_tagged(tx)


def decode_tx(buf: Buffer) -> Transaction:
    """Decode one untrusted transaction; the only exception raised is CodecError."""
    if len(buf) < 1:
        raise CodecError("empty transaction")
    codec = _TX_CODECS.get(buf[0])
    if codec is None:
        raise CodecError(f"unknown tx type {buf[0]}", code=ResultCode.INVALID_TX_TYPE)
    if len(buf) != codec.size + 1:
        raise CodecError(
            f"needs exactly {codec.size + 1} bytes (tag included), got {len(buf)}",
            type_name=codec.cls.__name__,
        )
    tx: Transaction = codec.validate(codec.decode(buf, 1))
    return tx


def signing_bytes(tx: Transaction, chain_id: int) -> bytes:
    """The message a user signs: chain id + tx type + layout without ``sig``."""
    entry = _SIGNING.get(type(tx))
    if entry is None:
        raise CodecError("not a signed (user) transaction", type_name=type(tx).__name__)
    s, tag = entry
    codec = codec_of(type(tx))
    vals = codec.prepare(tx[:-1]) if len(codec.bytes_fields) > 1 or codec.text_fields else tx[:-1]
    try:
        return s.pack(chain_id, tag, *vals)
    except struct.error as e:
        raise CodecError(f"cannot encode: {e}", type_name=type(tx).__name__) from None


def tx_hash(tx: Transaction) -> bytes:
    """sha256 of the tx's full wire form (32 bytes)."""
    return hashlib.sha256(encode_tx(tx)).digest()


def tx_type_of(cls: type) -> int:
    """The tx type code of a transaction class."""
    return int(codec_of(cls).tag)
