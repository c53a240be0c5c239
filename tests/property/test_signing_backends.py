"""The C backend and the pure-Python reference agree bit for bit on random inputs.

The pure path costs ~0.1-0.2 s per curve operation, so the curve properties run few examples
each (edge scalars are always included through ``example``); hashing runs many.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raydex.codecs import signing as S

pytestmark = pytest.mark.skipif(S.ACCEL is None, reason="the C extension is not built")

P = 0xFFFFFFFF00000001
N = S.GROUP_ORDER
C = S.ACCEL.module if S.ACCEL is not None else None
PY = S.PURE.module

u64 = st.integers(0, (1 << 64) - 1)
limb = st.one_of(st.integers(0, P - 1), st.sampled_from([0, 1, P - 1, P - 2, 1 << 63]))
fp5 = st.tuples(limb, limb, limb, limb, limb).map(
    lambda t: b"".join(x.to_bytes(8, "little") for x in t)
)
scalar = st.one_of(
    st.integers(1, N - 1),
    st.sampled_from([1, 2, 3, N - 1, N - 2, (N - 1) // 2, 1 << 318, (1 << 319) - 1 - (1 << 200)]),
).map(lambda k: (k % N or 1).to_bytes(40, "little"))
SLOW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=300, deadline=None)
@given(st.lists(u64, max_size=40), st.integers(1, 20))
def test_poseidon2_hashes_agree(elements: list[int], n_out: int) -> None:
    assert C.hash_no_pad(elements, n_out) == PY.hash_no_pad(elements, n_out)


@settings(max_examples=200, deadline=None)
@given(st.lists(u64, max_size=40))
def test_message_hash_bytes_agree(elements: list[int]) -> None:
    assert C.hash_to_quintic_bytes(elements) == PY.hash_to_quintic_bytes(elements)
    assert C.hash_to_quintic_bytes(elements) == b"".join(
        x.to_bytes(8, "little") for x in C.hash_no_pad(elements, 5)
    )


@SLOW
@given(scalar)
@example((N - 1).to_bytes(40, "little"))
def test_public_keys_agree(sk: bytes) -> None:
    assert C.public_key(sk) == PY.public_key(sk)


@SLOW
@given(scalar, scalar, fp5)
def test_signatures_agree_and_verify_both_ways(sk: bytes, k: bytes, hm: bytes) -> None:
    sig = C.sign(sk, hm, k)
    assert sig == PY.sign(sk, hm, k)
    pk = C.public_key(sk)
    assert C.verify(C.decode_public_key(pk), hm, sig)
    assert PY.verify(PY.decode_public_key(pk), hm, sig)


@SLOW
@given(scalar, fp5, st.binary(min_size=80, max_size=80))
def test_random_signatures_are_refused_by_both(sk: bytes, hm: bytes, sig: bytes) -> None:
    pk = C.public_key(sk)
    assert C.verify(C.decode_public_key(pk), hm, sig) is False
    assert PY.verify(PY.decode_public_key(pk), hm, sig) is False


@SLOW
@given(scalar, fp5, st.integers(0, 639))
def test_a_flipped_signature_bit_is_refused_by_both(sk: bytes, hm: bytes, bit: int) -> None:
    sig = bytearray(C.sign(sk, hm, S.nonce_for(sk, hm)))
    sig[bit // 8] ^= 1 << (bit % 8)
    pk = C.public_key(sk)
    assert not C.verify(C.decode_public_key(pk), hm, bytes(sig))
    assert not PY.verify(PY.decode_public_key(pk), hm, bytes(sig))


@settings(max_examples=60, deadline=None)
@given(st.one_of(fp5, st.binary(min_size=40, max_size=40), st.binary(max_size=48)))
@example(b"\0" * 40)
@example(b"\xff" * 40)
def test_key_decoding_agrees(pk: bytes) -> None:
    assert (C.decode_public_key(pk) is None) == (PY.decode_public_key(pk) is None)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, (1 << 320) - 1), fp5)
def test_out_of_range_scalars_are_refused_alike(s: int, hm: bytes) -> None:
    """Any S or E >= n is refused by both, before any curve work."""
    sk = (12345).to_bytes(40, "little")
    key_c = C.decode_public_key(C.public_key(sk))
    key_p = PY.decode_public_key(C.public_key(sk))
    good = C.sign(sk, hm, (777).to_bytes(40, "little"))
    big = max(s, N).to_bytes(40, "little")
    for sig in (big + good[40:], good[:40] + big):
        assert C.verify(key_c, hm, sig) is False
        assert PY.verify(key_p, hm, sig) is False


@settings(max_examples=500, deadline=None)
@given(scalar, scalar, scalar)
@example(b"\0" * 40, (N - 1).to_bytes(40, "little"), (N - 1).to_bytes(40, "little"))
@example((N - 1).to_bytes(40, "little"), b"\0" * 40, (N - 1).to_bytes(40, "little"))
def test_c_scalar_arithmetic_matches_python_ints(k: bytes, e: bytes, x: bytes) -> None:
    # the signing equation s = k - e x mod n, done in C by folding 2^319 = 2^319 - n (mod n)
    from raydex.codecs.signing import _accel  # type: ignore[attr-defined]

    def i(b: bytes) -> int:
        return int.from_bytes(b, "little")

    want = (i(k) - i(e) * i(x)) % N
    assert _accel.scalar_mul_sub(k, e, x) == want.to_bytes(40, "little")


@SLOW
@given(scalar, fp5)
def test_the_one_call_c_signature_is_the_general_one(sk: bytes, hm: bytes) -> None:
    # S.sign's C fast path (nonce digest reduced in C, sign_digest) gives the signature of the
    # general path: sk reduced, nonce_for, the backend's sign (pure here)
    want = S.PURE.module.sign(sk, hm, S.nonce_for(sk, hm))
    assert S.sign(sk, hm, S.ACCEL) == want
    # a key >= n takes the general path (sign_digest answers None) and signs as its reduction
    big = int.from_bytes(sk, "little") + N
    if big < 1 << 320:
        assert C.sign_digest(big.to_bytes(40, "little"), hm, bytes(64)) is None
        assert S.sign(big.to_bytes(40, "little"), hm, S.ACCEL) == want


def test_sign_digest_reduces_the_nonce_and_never_uses_zero() -> None:
    sk, hm = (5).to_bytes(40, "little"), bytes(40)
    one = (1).to_bytes(40, "little")
    # a digest of n (mod n: 0) signs with k = 1, as nonce_for does
    assert C.sign_digest(sk, hm, N.to_bytes(64, "little")) == C.sign(sk, hm, one)
    d = (1 << 512) - 1
    k = (d % N).to_bytes(40, "little")
    assert C.sign_digest(sk, hm, d.to_bytes(64, "little")) == C.sign(sk, hm, k)
    assert C.sign_digest(bytes(40), hm, bytes(64)) is None  # zero key: general path refuses it
    with pytest.raises(ValueError):
        C.sign_digest(sk, hm, bytes(63))
    with pytest.raises(ValueError):
        S.sign(bytes(40), hm)
