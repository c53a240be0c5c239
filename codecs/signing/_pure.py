"""The pure-Python backend: the reference modules behind the byte-level backend interface.

Every backend (this one, the C ``_accel``) offers the same functions on bytes and ints, and the
tests hold them to bit-identical results:

- ``public_key(sk40) -> pk40`` (sk canonical, nonzero);
- ``sign(sk40, hm40, k40) -> sig80`` (sk, k canonical, nonzero; hm limbs canonical);
- ``decode_public_key(pk40) -> key | None`` (None: malformed, non-canonical, neutral or no point);
- ``verify(key, hm40, sig80) -> bool`` (key from this backend's ``decode_public_key``);
- ``hash_no_pad(elements, n_out) -> list[int]`` (elements are ints in [0, 2^64), taken mod p);
- ``hash_to_quintic_bytes(elements) -> bytes40`` (the same with 5 outputs, encoded).
"""

from __future__ import annotations

from collections.abc import Sequence

from . import _curve, _field, _poseidon2, _schnorr

NAME = "pure"
#: Rough bytes per decoded key (a point of 4 x 5 ints), for KeyCache's memory bound.
KEY_TABLE_BYTES = 1024


def _fp5(b: bytes) -> _field.Fp5:
    v = _field.from_bytes(b)
    if v is None:
        raise ValueError("needs 40 bytes of canonical GF(p^5) limbs")
    return v


def _scalar(b: bytes) -> int:
    k = _curve.scalar_from_bytes(b)
    if not k:
        raise ValueError("needs a canonical nonzero 40-byte scalar")
    return k


def public_key(sk: bytes) -> bytes:
    return _schnorr.public_key(_scalar(sk))


def sign(sk: bytes, hm: bytes, k: bytes) -> bytes:
    return _schnorr.sign(_scalar(sk), _fp5(hm), _scalar(k))


def decode_public_key(pk: bytes) -> _curve.Point | None:
    return _schnorr.decode_public_key(pk)


def verify(key: _curve.Point, hm: bytes, sig: bytes) -> bool:
    h = _field.from_bytes(hm)
    return h is not None and _schnorr.verify(key, h, sig)


def hash_to_quintic_bytes(elements: Sequence[int]) -> bytes:
    return _field.to_bytes(_poseidon2.hash_to_quintic(elements))


def hash_no_pad(elements: Sequence[int], n_out: int) -> list[int]:
    return _poseidon2.hash_no_pad(elements, n_out)
