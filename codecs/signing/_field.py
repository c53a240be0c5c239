"""The Goldilocks field GF(p), p = 2^64 - 2^32 + 1, and its quintic extension GF(p^5).

Reference code: readable, integer-based, not constant time (a verifier handles public data only;
the signer's secret scalar goes through :mod:`._curve`, which is not constant time either: raydex
signs only in tests and load generators, never with a user's key).

Representation:

- a GF(p) element is a Python ``int`` in ``[0, p)``;
- a GF(p^5) element is a 5-tuple of GF(p) elements ``(a0, a1, a2, a3, a4)`` standing for
  ``a0 + a1 z + a2 z^2 + a3 z^3 + a4 z^4`` with ``z^5 = 3`` (GF(p)[z]/(z^5 - 3), as ECgFp5 and
  poseidon_crypto define it);
- its encoding is 40 bytes, the five limbs as 64-bit little-endian in order. Decoding refuses a
  limb ``>= p`` (a non-canonical encoding), so every element has exactly one encoding.
"""

from __future__ import annotations

from typing import Final

P: Final = 0xFFFFFFFF00000001  # 2^64 - 2^32 + 1
#: The non-residue defining the extension: z^5 = W.
W: Final = 3
#: z^(p-1) = W^((p-1)/5): the Frobenius map multiplies limb i by DTH_ROOT^i.
DTH_ROOT: Final = 1041288259238279555

Fp5 = tuple[int, int, int, int, int]

ZERO: Final[Fp5] = (0, 0, 0, 0, 0)
ONE: Final[Fp5] = (1, 0, 0, 0, 0)


# --- GF(p) -----------------------------------------------------------------------------------


def fp_inv(a: int) -> int:
    """1/a in GF(p); 0 for 0 (``inverse_or_zero``)."""
    return pow(a, P - 2, P)


def fp_legendre(a: int) -> int:
    """1 if a is a nonzero square, P - 1 if not a square, 0 for 0."""
    return pow(a, (P - 1) // 2, P)


def fp_sqrt(a: int) -> int | None:
    """A square root of a in GF(p), or None if a is not a square (Tonelli-Shanks)."""
    if a == 0:
        return 0
    if fp_legendre(a) != 1:
        return None
    q, s = (P - 1) >> 32, 32
    c = pow(7, q, P)  # 7 is a non-residue: c generates the 2^32-th roots of unity
    x, t, m = pow(a, (q + 1) // 2, P), pow(a, q, P), s
    while t != 1:
        i, t2 = 0, t
        while t2 != 1:
            t2, i = t2 * t2 % P, i + 1
        b = pow(c, 1 << (m - i - 1), P)
        x, c, t, m = x * b % P, b * b % P, t * b * b % P, i
    return x


# --- GF(p^5) ---------------------------------------------------------------------------------


def add(a: Fp5, b: Fp5) -> Fp5:
    return (
        (a[0] + b[0]) % P,
        (a[1] + b[1]) % P,
        (a[2] + b[2]) % P,
        (a[3] + b[3]) % P,
        (a[4] + b[4]) % P,
    )


def sub(a: Fp5, b: Fp5) -> Fp5:
    return (
        (a[0] - b[0]) % P,
        (a[1] - b[1]) % P,
        (a[2] - b[2]) % P,
        (a[3] - b[3]) % P,
        (a[4] - b[4]) % P,
    )


def neg(a: Fp5) -> Fp5:
    return sub(ZERO, a)


def mul(a: Fp5, b: Fp5) -> Fp5:
    """Schoolbook product; the terms of degree 5..8 fold back with z^5 = W."""
    a0, a1, a2, a3, a4 = a
    b0, b1, b2, b3, b4 = b
    return (
        (a0 * b0 + W * (a1 * b4 + a2 * b3 + a3 * b2 + a4 * b1)) % P,
        (a0 * b1 + a1 * b0 + W * (a2 * b4 + a3 * b3 + a4 * b2)) % P,
        (a0 * b2 + a1 * b1 + a2 * b0 + W * (a3 * b4 + a4 * b3)) % P,
        (a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0 + W * (a4 * b4)) % P,
        (a0 * b4 + a1 * b3 + a2 * b2 + a3 * b1 + a4 * b0) % P,
    )


def square(a: Fp5) -> Fp5:
    return mul(a, a)


def scale(a: Fp5, k: int) -> Fp5:
    """a times the GF(p) element k."""
    return (a[0] * k % P, a[1] * k % P, a[2] * k % P, a[3] * k % P, a[4] * k % P)


def frobenius(a: Fp5, times: int = 1) -> Fp5:
    """a^(p^times): limb i is multiplied by (DTH_ROOT^times)^i."""
    r = pow(DTH_ROOT, times % 5, P)
    return (a[0], a[1] * r % P, a[2] * r * r % P, a[3] * pow(r, 3, P) % P, a[4] * pow(r, 4, P) % P)


def norm(a: Fp5) -> int:
    """N(a) = a^(1 + p + p^2 + p^3 + p^4), an element of GF(p)."""
    d = frobenius(a)
    e = mul(d, frobenius(d))  # a^(p + p^2)
    f = mul(e, frobenius(e, 2))  # a^(p + p^2 + p^3 + p^4)
    return mul(a, f)[0]


def inv(a: Fp5) -> Fp5:
    """1/a; 0 for 0 (``inverse_or_zero``): a^-1 = a^(p + .. + p^4) / N(a)."""
    d = frobenius(a)
    e = mul(d, frobenius(d))
    f = mul(e, frobenius(e, 2))
    return scale(f, fp_inv(mul(a, f)[0]))


def legendre(a: Fp5) -> int:
    """1 if a is a nonzero square in GF(p^5), P - 1 if not, 0 for 0 (N(a)'s symbol in GF(p))."""
    return fp_legendre(norm(a))


def sqrt(a: Fp5) -> Fp5 | None:
    """A square root of a, or None. Which of the two roots is unspecified (callers never depend
    on it: ECgFp5 decoding picks between the two candidate x by a Legendre symbol).

    Method (poseidon_crypto / pornin): d = a^((p+1)/2) and e = d^(p + p^3) give
    a e^2 = a^(1 + p + p^2 + p^3 + p^4) = N(a), which lies in GF(p); a is a square iff N(a) is,
    and then sqrt(a) = sqrt(N(a)) / e.
    """
    if a == ZERO:
        return ZERO
    v = a
    for _ in range(31):
        v = square(v)
    v32 = v
    for _ in range(32):
        v32 = square(v32)
    d = mul(mul(a, v32), inv(v))
    e = frobenius(mul(d, frobenius(d, 2)))
    g = mul(a, square(e))[0]
    s = fp_sqrt(g)
    if s is None:
        return None
    return scale(inv(e), s)


# --- encoding --------------------------------------------------------------------------------


def to_bytes(a: Fp5) -> bytes:
    return b"".join(x.to_bytes(8, "little") for x in a)


def from_bytes(b: bytes) -> Fp5 | None:
    """The element encoded by 40 bytes, or None if the length is wrong or a limb is ``>= p``."""
    if len(b) != 40:
        return None
    limbs = tuple(int.from_bytes(b[i : i + 8], "little") for i in range(0, 40, 8))
    if any(x >= P for x in limbs):
        return None
    return limbs  # type: ignore[return-value]
