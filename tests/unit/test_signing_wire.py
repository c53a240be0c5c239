"""Transactions signed by lighter-sdk's own signer parse into raydex's types and verify there.

The tx_info strings are the SDK's (``tests/unit/data/lighter_sdk_vectors.json``), unmodified:
what a bot sends to ``sendTx``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from raydex.codecs import (
    SKIP_NONCE_FLAG,
    ChangePubKey,
    CodecError,
    CreateOrder,
    ResultCode,
    Transfer,
    Verifier,
    Withdraw,
    l1_signer,
    message_hash_of,
    signer_key,
    transfer_l1_signer,
    tx_from_json,
    tx_to_json,
    verify_tx,
)

VECTORS = json.loads((Path(__file__).parent / "data" / "lighter_sdk_vectors.json").read_text())
CHAIN = VECTORS["chain_id"]
PK = bytes.fromhex(VECTORS["api_public_key"][2:])
CASES = {c["name"]: c for c in VECTORS["cases"]}

#: SDK cases raydex parses and verifies as they are (no set attribute raydex refuses)
ACCEPTED = [
    "create_order",
    "create_order_market_reduce_only",
    "create_order_stop_loss",
    "create_order_attributes_nil",
    "cancel_order",
    "cancel_all_orders",
    "modify_order",
    "update_leverage",
    "update_leverage_isolated",
    "update_margin",
    "update_margin_large",
    "transfer_usdc_perps_no_fee",
    "transfer",
    "transfer_same_master",
    "withdraw",
    "create_sub_account",
    "cancel_order_skip_nonce",
    "change_pub_key",
    "change_pub_key_skip_nonce",
]


def _case(name: str) -> tuple[int, str, str]:
    c = CASES[name]
    return c["tx_type"], c["tx_info"], c["tx_hash"]


@pytest.mark.parametrize("name", ACCEPTED)
def test_an_sdk_signed_tx_parses_and_verifies_as_a_raydex_tx(name: str) -> None:
    tx_type, tx_info, tx_hash = _case(name)
    tx = tx_from_json(tx_type, tx_info)
    assert message_hash_of(tx, CHAIN).hex() == tx_hash
    assert verify_tx(tx, PK, CHAIN)
    assert not verify_tx(tx, PK, CHAIN + 1)
    assert Verifier(CHAIN).verify(tx, PK)


@pytest.mark.parametrize("name", ["change_pub_key", "change_pub_key_skip_nonce"])
def test_an_sdk_change_pub_key_is_signed_by_its_new_key_and_its_l1_sig_recovers_the_l1_key(
    name: str,
) -> None:
    tx_type, tx_info, _ = _case(name)
    tx = tx_from_json(tx_type, tx_info)
    assert isinstance(tx, ChangePubKey) and tx.pub_key == PK
    assert signer_key(tx, None) == PK
    assert l1_signer(tx) == bytes.fromhex(VECTORS["eth_address"][2:])
    # the L1 text covers the key, the nonce, the account and the slot: any other one recovers
    # some other address
    assert l1_signer(tx._replace(api_key_index=tx.api_key_index + 1)) != l1_signer(tx)
    assert l1_signer(tx._replace(l1_sig=bytes(65))) is None
    out = tx_to_json(tx)
    info = json.loads(tx_info)
    assert {k: out[k] for k in ("PubKey", "L1Sig", "Sig")} == {
        k: info[k] for k in ("PubKey", "L1Sig", "Sig")
    }


def test_lighter_transfers_and_withdrawals_carry_every_field() -> None:
    t = tx_from_json(*_case("transfer_usdc_perps_no_fee")[:2])
    assert isinstance(t, Transfer) and t.usdc_amount == 250_000_000 and t.to_account_index == 12
    assert (t.asset_index, t.from_route_type, t.to_route_type, t.usdc_fee) == (3, 0, 0, 0)
    assert t.l1_sig != bytes(65) and t.memo == bytes(32)
    w = tx_from_json(*_case("withdraw")[:2])
    assert isinstance(w, Withdraw) and w.usdc_amount == 9_876_543_210_123
    assert (w.asset_index, w.route_type) == (3, 0)
    assert tx_from_json(12, tx_to_json(t)) == t
    # the L1 text covers the memo, the fee and the routes: it recovers the SDK's L1 address
    assert transfer_l1_signer(t, CHAIN) == bytes.fromhex(VECTORS["eth_address"][2:])
    assert transfer_l1_signer(t._replace(usdc_fee=1), CHAIN) != transfer_l1_signer(t, CHAIN)
    assert transfer_l1_signer(t._replace(l1_sig=bytes(65)), CHAIN) is None


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        ("transfer", "usdc_fee", 1_000),  # a fee: parsed and signed as Lighter's
        ("transfer_same_master", "to_route_type", 1),  # to a spot route: the engine refuses it
    ],
)
def test_transfers_with_fees_and_routes_parse_and_verify(name: str, field: str, value: int) -> None:
    tx_type, tx_info, tx_hash = _case(name)
    tx = tx_from_json(tx_type, tx_info)
    assert getattr(tx, field) == value
    assert message_hash_of(tx, CHAIN).hex() == tx_hash
    assert verify_tx(tx, PK, CHAIN)
    assert json.loads(tx_info)["L1Sig"] == tx_to_json(tx)["L1Sig"]


@pytest.mark.parametrize(
    ("name", "attribute"),
    [
        ("create_order_integrator_skip_nonce", "IntegratorAccountIndex"),
        ("create_order_self_trade", "SelfTradeBehaviorMode"),
        ("cancel_all_orders_market", "CancelAllMarketIndex"),
        ("modify_order_version", "OrderVersion"),
    ],
)
def test_attributes_raydex_does_not_execute_are_refused_with_their_own_code(
    name: str, attribute: str
) -> None:
    tx_type, tx_info, _ = _case(name)
    with pytest.raises(CodecError, match=rf"L2TxAttributes: attribute \d \({attribute}\)") as e:
        tx_from_json(tx_type, tx_info)
    assert e.value.code == ResultCode.ATTRIBUTE_NOT_SUPPORTED


def test_skip_nonce_travels_as_a_flag_in_the_nonce_and_signs_as_lighters() -> None:
    tx_type, tx_info, tx_hash = _case("cancel_order_skip_nonce")
    info = json.loads(tx_info)
    tx = tx_from_json(tx_type, tx_info)
    assert tx.nonce == info["Nonce"] | SKIP_NONCE_FLAG
    out = tx_to_json(tx)
    assert out["Nonce"] == info["Nonce"] and out["L2TxAttributes"] == {"4": 1}
    assert tx_from_json(tx_type, out) == tx
    # the same tx without the attribute is another message: its signature no longer verifies
    plain = tx._replace(nonce=info["Nonce"])
    assert message_hash_of(plain, CHAIN).hex() != tx_hash
    assert not verify_tx(plain, PK, CHAIN)


def test_a_nonce_with_the_flag_bit_is_refused_at_the_json_edge() -> None:
    tx_type, tx_info, _ = _case("cancel_order")
    info = json.loads(tx_info)
    with pytest.raises(CodecError, match="Nonce"):
        tx_from_json(tx_type, {**info, "Nonce": SKIP_NONCE_FLAG | 5})
    with pytest.raises(CodecError, match="SkipNonce"):
        tx_from_json(tx_type, {**info, "L2TxAttributes": {"4": 2}})


def test_malformed_attributes_are_refused() -> None:
    tx_type, tx_info, _ = _case("create_order")
    info: dict[str, Any] = json.loads(tx_info)
    for bad in ([1], {"99": 1}, {"4": "1"}, "x"):
        with pytest.raises(CodecError, match="L2TxAttributes"):
            tx_from_json(tx_type, {**info, "L2TxAttributes": bad})
    assert isinstance(tx_from_json(tx_type, {**info, "L2TxAttributes": {}}), CreateOrder)
