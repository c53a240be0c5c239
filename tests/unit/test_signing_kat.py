"""Known answers from lighter-sdk's own signer: raydex hashes, verifies and derives keys as Lighter.

The vectors (``tests/unit/data/lighter_sdk_vectors.json``) were made by
``tests/kit/make_sdk_vectors.py`` with the SDK's bundled Go library; one test re-signs a few
cases live through that library when it loads here, so a change in the SDK shows up.
"""

from __future__ import annotations

import base64
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from raydex.codecs import signing as S

VECTORS = json.loads((Path(__file__).parent / "data" / "lighter_sdk_vectors.json").read_text())
CHAIN = VECTORS["chain_id"]
PK = bytes.fromhex(VECTORS["api_public_key"][2:])
SK = bytes.fromhex(VECTORS["api_private_key"][2:])
CASES = {c["name"]: c for c in VECTORS["cases"]}
BACKENDS = [S.PURE] + ([S.ACCEL] if S.ACCEL is not None else [])


def _info(name: str) -> dict[str, Any]:
    return dict(json.loads(CASES[name]["tx_info"]))


def _sig(info: dict[str, Any]) -> bytes:
    return base64.b64decode(info["Sig"])


def test_the_vectors_cover_every_tx_type_raydex_hashes() -> None:
    assert {c["tx_type"] for c in CASES.values()} == set(S.TX_FIELDS)
    assert sum(1 for c in CASES.values() if json.loads(c["tx_info"])["L2TxAttributes"]) >= 7


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("name", sorted(CASES))
def test_message_hash_is_the_sdks_tx_hash(name: str, backend: S.Backend) -> None:
    case = CASES[name]
    hm = S.message_hash(case["tx_type"], _info(name), CHAIN, backend)
    assert S.tx_hash(hm) == case["tx_hash"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_sdk_signature_verifies(name: str) -> None:
    info = _info(name)
    hm = S.message_hash(CASES[name]["tx_type"], info, CHAIN)
    assert S.KeyCache().verify(PK, hm, _sig(info))


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_public_keys_are_the_sdks(backend: S.Backend) -> None:
    assert S.public_key_of(SK, backend) == PK
    for priv, pub in VECTORS["generated_keys"]:
        assert S.public_key_of(bytes.fromhex(priv[2:]), backend).hex() == pub[2:]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_sdk_auth_tokens_verify(backend: S.Backend) -> None:
    cache = S.KeyCache(backend=backend)
    for token in VECTORS["auth_tokens"]:
        message, sig_hex = token.rsplit(":", 1)
        deadline, account, key = (int(x) for x in message.split(":"))
        assert message == S.auth_token_message(deadline, account, key)
        hm = S.auth_token_hash(message, backend)
        assert cache.verify(PK, hm, bytes.fromhex(sig_hex))
        assert not cache.verify(
            PK, S.auth_token_hash(message + "0", backend), bytes.fromhex(sig_hex)
        )


def test_a_changed_field_changes_the_hash_and_fails_verification() -> None:
    for name in ("create_order", "transfer", "create_grouped_orders", "modify_order_version"):
        case, info = CASES[name], _info(name)
        sig = _sig(info)
        hm = S.message_hash(case["tx_type"], info, CHAIN)
        for key in [k for k, v in info.items() if type(v) is int]:
            changed = dict(info, **{key: info[key] ^ 1})
            hm2 = S.message_hash(case["tx_type"], changed, CHAIN)
            assert hm2 != hm, key
            assert not S.verify(PK, hm2, sig), key
        assert S.message_hash(case["tx_type"], info, CHAIN + 1) != hm


def test_an_added_attribute_changes_the_hash() -> None:
    info = _info("create_order")
    hm = S.message_hash(14, info, CHAIN)
    assert S.message_hash(14, dict(info, L2TxAttributes={"4": 1}), CHAIN) != hm
    # "not set" values are left out: the same hash as no attributes at all
    nil = {"1": 0, "5": 255, "8": 0}
    assert S.message_hash(14, dict(info, L2TxAttributes=nil), CHAIN) == hm


def test_flipped_bits_in_signature_or_key_are_refused() -> None:
    info = _info("cancel_order")
    hm = S.message_hash(15, info, CHAIN)
    sig = _sig(info)
    cache = S.KeyCache()
    assert cache.verify(PK, hm, sig)
    for bit in range(0, 640, 37):
        bad = bytearray(sig)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert not cache.verify(PK, hm, bytes(bad)), bit
    for bit in range(0, 320, 23):
        bad = bytearray(PK)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert not cache.verify(bytes(bad), hm, sig), bit
    for bit in range(0, 320, 29):
        bad = bytearray(hm)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert not cache.verify(PK, bytes(bad), sig), bit


def test_non_canonical_scalars_and_keys_are_refused() -> None:
    info = _info("cancel_order")
    hm = S.message_hash(15, info, CHAIN)
    sig = _sig(info)
    s, e = int.from_bytes(sig[:40], "little"), int.from_bytes(sig[40:], "little")
    n = S.GROUP_ORDER
    # S + n and E + n still fit 40 bytes and are the same values mod n: Lighter's newest Go code
    # would reduce them; raydex refuses them (one signature, one encoding).
    s_big = (s + n).to_bytes(40, "little") + sig[40:]
    e_big = sig[:40] + (e + n).to_bytes(40, "little")
    cache = S.KeyCache()
    assert not cache.verify(PK, hm, s_big)
    assert not cache.verify(PK, hm, e_big)
    p = 0xFFFFFFFF00000001
    limb0 = int.from_bytes(PK[:8], "little")
    if limb0 + p < 1 << 64:  # the same field element, non-canonical limb
        assert not cache.is_valid((limb0 + p).to_bytes(8, "little") + PK[8:])
    assert not cache.is_valid(b"\0" * 40)  # the neutral element: anyone could sign for it
    assert not cache.is_valid(b"\xff" * 40)
    assert not cache.is_valid(PK[:39])
    assert not cache.verify(PK, hm, sig[:79])


def test_a_point_that_is_not_on_the_curve_is_refused() -> None:
    # about half of all field elements encode no group element; find some and refuse them
    refused = 0
    for i in range(1, 40):
        w = i.to_bytes(8, "little") + b"\0" * 32
        if not S.KeyCache().is_valid(w):
            refused += 1
    assert 5 < refused < 35


def test_l1_signatures_recover_to_the_eth_address() -> None:
    info = _info("change_pub_key")
    text = S.change_pub_key_message(
        base64.b64decode(info["PubKey"]), info["Nonce"], info["AccountIndex"], info["ApiKeyIndex"]
    )
    assert S.recover_l1_address(text, info["L1Sig"]) == VECTORS["eth_address"]
    assert S.recover_l1_address(text + " ", info["L1Sig"]) != VECTORS["eth_address"]
    assert S.recover_l1_address(text, info["L1Sig"][:-2]) is None
    assert S.recover_l1_address(text, "0x" + "00" * 65) is None
    tr = _info("transfer")
    assert (
        S.recover_l1_address(S.transfer_message(tr, CHAIN), tr["L1Sig"]) == VECTORS["eth_address"]
    )


def test_negative_values_hash_as_64_bit_twos_complement() -> None:
    info = dict(_info("cancel_order"), Index=-1)
    same = dict(info, Index=(1 << 64) - 1)
    assert S.message_hash(15, info, CHAIN) == S.message_hash(15, same, CHAIN)
    # ... which is not -1 mod p
    assert S.message_hash(15, info, CHAIN) != S.message_hash(
        15, dict(info, Index=0xFFFFFFFF00000000), CHAIN
    )


def test_malformed_messages_raise_value_or_key_errors() -> None:
    info = _info("create_order")
    with pytest.raises(KeyError):
        S.message_hash(14, {k: v for k, v in info.items() if k != "Price"}, CHAIN)
    with pytest.raises(KeyError):
        S.message_hash(99, info, CHAIN)
    with pytest.raises(ValueError):
        S.message_hash(14, dict(info, Price="4000"), CHAIN)
    with pytest.raises(ValueError):
        S.message_hash(14, dict(info, L2TxAttributes={"9": 1}), CHAIN)
    five = {"1": 9, "2": 1, "3": 1, "4": 1, "6": 1}
    with pytest.raises(ValueError):
        S.message_hash(14, dict(info, L2TxAttributes=five), CHAIN)


def test_raydex_signatures_verify_and_are_deterministic() -> None:
    hm = S.message_hash(14, _info("create_order"), CHAIN)
    sig = S.sign(SK, hm)
    assert sig == S.sign(SK, hm)
    assert S.verify(PK, hm, sig)
    assert S.sign(SK, hm[:-1] + b"\0") != sig


def test_live_sdk_signatures_still_match() -> None:
    """Re-sign a few cases with the SDK's library now; skipped where it cannot load."""
    from kit import make_sdk_vectors

    try:
        doc = make_sdk_vectors.sdk_cases({"create_order", "transfer", "modify_order_version"})
    except OSError as e:  # the .so does not load on this platform
        pytest.skip(f"lighter-sdk signer library unavailable: {e}")
    assert doc["api_public_key"] == VECTORS["api_public_key"]
    for case in doc["cases"]:
        info = json.loads(case["tx_info"])
        hm = S.message_hash(case["tx_type"], info, CHAIN)
        assert S.tx_hash(hm) == case["tx_hash"]
        assert S.verify(PK, hm, _sig(info))
