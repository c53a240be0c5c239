"""The C backend: ``_accel`` (``_ecgfp5.c``) behind the byte-level backend interface of ``_pure``.

The C code does everything of a signature, the scalar arithmetic ``s = k - e sk mod n`` included
(``_accel.sign``; ``_accel.sign_digest`` also reduces the nonce digest): no Python integers per
call. The C functions are bound directly (they return ``bytes``/``bool``/``list`` as the
interface says), so a call costs no extra Python frame.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import _accel  # type: ignore[attr-defined]

NAME = "c"
KEY_TABLE_BYTES: int = _accel.KEY_TABLE_BYTES

public_key: Callable[[bytes], bytes] = _accel.public_key
sign: Callable[[bytes, bytes, bytes], bytes] = _accel.sign
#: ``sign_digest(sk, hm, digest64) -> sig | None``: sign() with nonce = digest mod n (None: sk
#: not canonical); ``raydex.codecs.signing.sign`` uses it when the backend has it.
sign_digest: Callable[[bytes, bytes, bytes], bytes | None] = _accel.sign_digest
decode_public_key: Callable[[bytes], bytes | None] = _accel.decode_public_key
verify: Callable[[bytes, bytes, bytes], bool] = _accel.verify
hash_to_quintic_bytes: Callable[[Sequence[int]], bytes] = _accel.hash_to_quintic_bytes
hash_no_pad: Callable[[Sequence[int], int], list[int]] = _accel.hash_no_pad
