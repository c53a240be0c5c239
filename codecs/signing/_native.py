"""The C backend: ``_accel`` (``_ecgfp5.c``) behind the byte-level backend interface of ``_pure``.

The C code does everything of a signature, the scalar arithmetic ``s = k - e sk mod n`` included
(``_accel.sign``: no Python integers per call).
"""

from __future__ import annotations

from collections.abc import Sequence

from . import _accel  # type: ignore[attr-defined]

NAME = "c"
KEY_TABLE_BYTES: int = _accel.KEY_TABLE_BYTES


def public_key(sk: bytes) -> bytes:
    return bytes(_accel.public_key(sk))


def sign(sk: bytes, hm: bytes, k: bytes) -> bytes:
    return bytes(_accel.sign(sk, hm, k))


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
