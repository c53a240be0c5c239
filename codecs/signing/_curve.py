"""The ECgFp5 group (pornin/ecgfp5): encode, decode, add, double, scalar multiplication.

Curve y^2 = x (x^2 + a x + b) over GF(p^5) with a = 2, b = 263 z. Its order is 2n for the prime
n = :data:`N`; the group used is the quotient by the point of order two N0 = (0, 0), which is
therefore the neutral element. It has prime order n (no cofactor, no small subgroup).

Points are kept in the fractional (x, u) coordinates of the ECgFp5 paper: for a curve point
(x, y), u = x / y, stored as ``(X, Z, U, T)`` with x = X/Z and u = U/T (the neutral has u = 0).
The formulas below are the paper's complete formulas (no special case for the neutral or for
doubling), copied from poseidon_crypto's Go code, which follows the paper's Rust reference.

Encoding: a group element is encoded as w = 1/u = y/x, one GF(p^5) element (40 bytes); the
neutral encodes as 0. Decoding solves x^2 - (w^2 - a) x + b = 0 and keeps the root that is not a
square in GF(p^5); it fails (returns None) when the discriminant is not a square, except w = 0.
Every element has exactly one encoding and every successful decode is in the group.

Scalars are integers mod n; their encoding is 40 bytes little-endian. Reference code: the scalar
multiplication is a plain double-and-add, neither fast nor constant time.
"""

from __future__ import annotations

from typing import Final

from . import _field as F
from ._field import Fp5

#: The prime order of the group.
N: Final = int(
    "1067993516717146951041484916571792702745057740581727230159139685185762082554198619328292418486241"
)

A: Final[Fp5] = (2, 0, 0, 0, 0)
B: Final[Fp5] = (0, 263, 0, 0, 0)
B2: Final[Fp5] = (0, 2 * 263, 0, 0, 0)
B4: Final[Fp5] = (0, 4 * 263, 0, 0, 0)
FOUR: Final[Fp5] = (4, 0, 0, 0, 0)
HALF: Final = (F.P + 1) // 2

Point = tuple[Fp5, Fp5, Fp5, Fp5]  # (X, Z, U, T)

NEUTRAL: Final[Point] = (F.ZERO, F.ONE, F.ZERO, F.ONE)
GENERATOR: Final[Point] = (
    (
        12883135586176881569,
        4356519642755055268,
        5248930565894896907,
        2165973894480315022,
        2448410071095648785,
    ),
    F.ONE,
    F.ONE,
    (4, 0, 0, 0, 0),
)


def add(p: Point, q: Point) -> Point:
    """p + q in the group (complete formulas, 10M)."""
    x1, z1, u1, t1_ = p
    x2, z2, u2, t2_ = q
    t1 = F.mul(x1, x2)
    t2 = F.mul(z1, z2)
    t3 = F.mul(u1, u2)
    t4 = F.mul(t1_, t2_)
    t5 = F.sub(F.mul(F.add(x1, z1), F.add(x2, z2)), F.add(t1, t2))
    t6 = F.sub(F.mul(F.add(u1, t1_), F.add(u2, t2_)), F.add(t3, t4))
    t7 = F.add(t1, F.mul(t2, B))
    t8 = F.mul(t4, t7)
    t9 = F.mul(t3, F.add(F.mul(t5, B2), F.add(t7, t7)))
    t10 = F.mul(F.add(t4, F.add(t3, t3)), F.add(t5, t7))
    return (
        F.mul(F.sub(t10, t8), B),
        F.sub(t8, t9),
        F.mul(t6, F.sub(F.mul(t2, B), t1)),
        F.add(t8, t9),
    )


def double(p: Point) -> Point:
    """2p (4M + 5S)."""
    x, z, u, t = p
    t1 = F.mul(z, t)
    t2 = F.mul(t1, t)
    x1 = F.square(t2)
    z1 = F.mul(t1, u)
    t3 = F.square(u)
    w1 = F.sub(t2, F.mul(t3, F.add(F.add(x, z), F.add(x, z))))
    t4 = F.square(z1)
    z_new = F.square(w1)
    return (
        F.mul(t4, B4),
        z_new,
        F.sub(F.square(F.add(w1, z1)), F.add(t4, z_new)),
        F.sub(F.add(x1, x1), F.add(F.mul(t4, FOUR), z_new)),
    )


def negate(p: Point) -> Point:
    x, z, u, t = p
    return (x, z, F.neg(u), t)


def mul(p: Point, k: int) -> Point:
    """k p, by plain double-and-add from the top bit (k is taken mod n)."""
    k %= N
    r = NEUTRAL
    for bit in bin(k)[2:]:
        r = double(r)
        if bit == "1":
            r = add(r, p)
    return r


def equals(p: Point, q: Point) -> bool:
    """Same group element: u1/t1 == u2/t2 (u/t = 1/w determines the element)."""
    return F.mul(p[2], q[3]) == F.mul(q[2], p[3])


def encode(p: Point) -> Fp5:
    """w = t/u (0 for the neutral)."""
    return F.mul(p[3], F.inv(p[2]))


def decode(w: Fp5) -> Point | None:
    """The element encoded by w, or None if w encodes no element."""
    e = F.sub(F.square(w), A)
    delta = F.sub(F.square(e), B4)
    r = F.sqrt(delta)
    if r is None:
        return NEUTRAL if w == F.ZERO else None
    x1 = F.scale(F.add(e, r), HALF)
    x2 = F.scale(F.sub(e, r), HALF)
    x = x2 if F.legendre(x1) == 1 else x1
    return (x, F.ONE, F.ONE, w)


def scalar_to_bytes(k: int) -> bytes:
    return k.to_bytes(40, "little")


def scalar_from_bytes(b: bytes) -> int | None:
    """The scalar encoded by 40 little-endian bytes, or None if the length is wrong or the value
    is not below n (a non-canonical encoding)."""
    if len(b) != 40:
        return None
    k = int.from_bytes(b, "little")
    return k if k < N else None
