"""Schnorr signatures over ECgFp5 with Poseidon2 challenges (poseidon_crypto ``signature/schnorr``).

- private key: a scalar sk in [1, n); public key: ``encode(sk G)`` (40 bytes);
- the signed message is a pre-hashed GF(p^5) element ``hm`` (the tx's message hash);
- sign: ``r = encode(k G)``, ``e = H(r || hm) mod n`` (H = Poseidon2 ``HashToQuinticExtension``
  over the 10 limbs, the five output limbs read as a 320-bit little-endian integer), ``s = k - e
  sk mod n``; the signature is ``S || E``, 80 bytes, both 40-byte little-endian scalars;
- verify: S and E canonical (below n), the key decodes, ``r = s G + e pk`` and
  ``H(encode(r) || hm) mod n == e``.

raydex's policy, stricter than Lighter's newest Go code (which reduces an S or E ``>= n`` mod n,
and reads key limbs ``>= p`` without a check): a non-canonical S or E, a key with a limb ``>= p``
and the neutral element as a key (w = 0, for which anyone can sign) are refused. The SDK never
produces any of these, so no genuine transaction is refused by the stricter rule, while one
signature has exactly one accepted encoding (no malleability of tx bytes or tx hashes).

This module is the pure-Python reference (tens of ms per operation); ``_accel`` is the fast path.
"""

from __future__ import annotations

from . import _curve as C
from . import _field as F
from ._field import Fp5
from ._poseidon2 import hash_to_quintic


def challenge(r: Fp5, hm: Fp5) -> int:
    """e = H(r || hm) as a scalar."""
    h = hash_to_quintic((*r, *hm))
    return sum(x << (64 * i) for i, x in enumerate(h)) % C.N


def public_key(sk: int) -> bytes:
    return F.to_bytes(C.encode(C.mul(C.GENERATOR, sk)))


def sign(sk: int, hm: Fp5, k: int) -> bytes:
    """The signature of ``hm`` under ``sk`` with the nonce ``k`` (in [1, n))."""
    r = C.encode(C.mul(C.GENERATOR, k))
    e = challenge(r, hm)
    s = (k - e * sk) % C.N
    return C.scalar_to_bytes(s) + C.scalar_to_bytes(e)


def decode_public_key(pk: bytes) -> C.Point | None:
    """The key's group element, or None for a malformed, non-canonical or neutral key."""
    w = F.from_bytes(pk)
    if w is None or w == F.ZERO:
        return None
    return C.decode(w)


def verify(pk: C.Point, hm: Fp5, sig: bytes) -> bool:
    if len(sig) != 80:
        return False
    s = C.scalar_from_bytes(sig[:40])
    e = C.scalar_from_bytes(sig[40:])
    if s is None or e is None:
        return False
    r = C.add(C.mul(C.GENERATOR, s), C.mul(pk, e))
    return challenge(C.encode(r), hm) == e
