"""Transaction framing: tagged binary encoding, checked decoding, signing bytes and tx hashes.

Wire form of a transaction: ``tx_type`` (uint8) followed by its layout (``_hot``). ``decode_tx`` is
for untrusted bytes: known tag, exact length, every ``Range`` extra enforced, else CodecError.

User transactions are the layouts with a ``sig`` field; what they sign is Lighter's message hash
(``_signing``), which covers the chain id, the tx type and every field the engine executes (the
``L2TxAttributes`` fields after ``sig`` included).

``tx_hash`` is sha256 of the full wire form (signature included), 32 bytes: a content hash for
tests and tools. The tx hash in events, outcomes and API answers is ``_signing.tx_hash_of``
(Lighter's message hash, 40 bytes).

Cost: a few µs per call (one ``struct`` pack or unpack, the range checks, one sha256).
"""

from __future__ import annotations

import hashlib
from typing import Any

from ._enums import ResultCode
from ._errors import CodecError
from ._hot import HOT_BY_TAG, Buffer, HotCodec, codec_of
from ._tx import TX, Transaction

_TX_CODECS: dict[int, HotCodec[Any]] = HOT_BY_TAG[TX]


#: User transactions (layouts with a ``sig`` field) -> their tag.
_SIGNED: dict[type, int] = {
    c.cls: c.tag for c in _TX_CODECS.values() if any(f.name == "sig" for f in c.spec.fields)
}


def is_signed_type(cls: type) -> bool:
    """True for transactions that carry a signature (user transactions)."""
    return cls in _SIGNED


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


def tx_hash(tx: Transaction) -> bytes:
    """sha256 of the tx's full wire form (32 bytes)."""
    return hashlib.sha256(encode_tx(tx)).digest()


def tx_type_of(cls: type) -> int:
    """The tx type code of a transaction class."""
    return int(codec_of(cls).tag)
