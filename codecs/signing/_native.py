"""The C backend: ``_accel`` (``_ecgfp5.c``) behind the byte-level backend interface of ``_pure``.

The C code does the curve and the hashing; the scalar arithmetic of signing
(``s = k - e sk mod n``, ~1 us with Python's integers) stays here.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import _accel  # type: ignore[attr-defined]
from ._curve import N

NAME = "c"
KEY_TABLE_BYTES: int = _accel.KEY_TABLE_BYTES


def public_key(sk: bytes) -> bytes:
    return bytes(_accel.public_key(sk))


def sign(sk: bytes, hm: bytes, k: bytes) -> bytes:
    e = _accel.sign_challenge(k, hm)
    x = int.from_bytes(sk, "little")
    if not 0 < x < N:
        raise ValueError("needs a canonical nonzero 40-byte scalar")
    s = (int.from_bytes(k, "little") - int.from_bytes(e, "little") * x) % N
    return s.to_bytes(40, "little") + bytes(e)


def decode_public_key(pk: bytes) -> bytes | None:
    key: bytes | None = _accel.decode_public_key(pk)
    return key


def verify(key: bytes, hm: bytes, sig: bytes) -> bool:
    return bool(_accel.verify(key, hm, sig))


def hash_to_quintic_bytes(elements: Sequence[int]) -> bytes:
    return bytes(_accel.hash_to_quintic_bytes(elements))


def hash_no_pad(elements: Sequence[int], n_out: int) -> list[int]:
    out: list[int] = _accel.hash_no_pad(elements, n_out)
    return out
