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
    CancelAllOrders,
    ChangePubKey,
    CodecError,
    CreateOrder,
    ModifyOrder,
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

#: SDK cases raydex parses, verifies and executes as they are (no set attribute raydex refuses)
ACCEPTED = [
    "create_order",
    "create_order_market_reduce_only",
    "create_order_stop_loss",
    "create_order_attributes_nil",
    "create_order_self_trade",
    "create_order_expire_taker",
    "cancel_order",
    "cancel_all_orders",
    "cancel_all_orders_market",
    "cancel_all_orders_market_skip_nonce",
    "modify_order",
    "modify_order_version",
    "modify_order_self_trade_version",
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
    ("name", "fields"),
    [
        ("create_order_self_trade", {"self_trade_behavior": 2, "self_trade_equality": 1}),
        ("create_order_expire_taker", {"self_trade_behavior": 1, "self_trade_equality": 0}),
        ("cancel_all_orders_market", {"cancel_market_index": 4}),
        ("modify_order_version", {"order_version": 3, "self_trade_behavior": 0}),
        (
            "modify_order_self_trade_version",
            {"order_version": 1_700_000_000_123, "self_trade_behavior": 3},
        ),
    ],
)
def test_attributes_travel_as_fields_and_sign_as_lighters(
    name: str, fields: dict[str, int]
) -> None:
    tx_type, tx_info, tx_hash = _case(name)
    tx = tx_from_json(tx_type, tx_info)
    assert {k: getattr(tx, k) for k in fields} == fields
    out = tx_to_json(tx)
    assert out["L2TxAttributes"] == json.loads(tx_info)["L2TxAttributes"]
    assert tx_from_json(tx_type, out) == tx
    # the attributes are in the signed message: another value is another message
    key = next(iter(fields))
    other = tx._replace(**{key: fields[key] ^ 1})
    assert message_hash_of(other, CHAIN).hex() != tx_hash
    assert not verify_tx(other, PK, CHAIN)


def test_a_tx_without_attributes_has_their_nil_values() -> None:
    order = tx_from_json(*_case("create_order")[:2])
    assert isinstance(order, CreateOrder)
    assert (order.self_trade_behavior, order.self_trade_equality) == (0, 0)
    cancel_all = tx_from_json(*_case("cancel_all_orders")[:2])
    assert isinstance(cancel_all, CancelAllOrders) and cancel_all.cancel_market_index == 255
    modify = tx_from_json(*_case("modify_order")[:2])
    assert isinstance(modify, ModifyOrder) and modify.order_version == 0
    assert "L2TxAttributes" not in tx_to_json(modify)


def test_integrator_fees_are_refused_as_a_feature_raydex_does_not_execute() -> None:
    tx_type, tx_info, _ = _case("create_order_integrator_skip_nonce")
    with pytest.raises(CodecError, match=r"integrator fees .* not executed by raydex") as e:
        tx_from_json(tx_type, tx_info)
    assert e.value.code == ResultCode.FEATURE_NOT_SUPPORTED


def _with_attrs(name: str, attrs: Any) -> Any:
    tx_type, tx_info, _ = _case(name)
    return tx_from_json(tx_type, {**json.loads(tx_info), "L2TxAttributes": attrs})


@pytest.mark.parametrize(
    ("name", "attrs", "why"),
    [
        # lighter-go's L2TxAttributes.Validate
        ("create_order", {"6": 4}, r"attribute 6 \(SelfTradeBehaviorMode\) = 4 out of range"),
        ("create_order", {"7": 2}, r"attribute 7 \(SelfTradeEqualityMode\) = 2 out of range"),
        ("cancel_all_orders", {"5": 256}, r"CancelAllMarketIndex\) = 256 out of range"),
        ("modify_order", {"8": 2**48}, r"OrderVersion\) = 281474976710656 out of range"),
        ("modify_order", {"8": -1}, r"OrderVersion\) = -1 out of range"),
        ("create_order", {"6": 3, "7": 1}, r"Reduce .* not allowed with .* MasterAccountIndex"),
        ("create_order", {"2": 10}, r"need the integrator account index"),
        ("create_order", {"1": 9, "2": 10, "6": 1}, r"not allowed with integrator fees"),
        ("create_order", {"1": 1, "5": 3, "6": 1, "7": 1, "8": 2}, r"at most 4"),
        # attributes the tx type does not take
        ("create_order", {"5": 3}, r"attribute 5 \(CancelAllMarketIndex\) does not apply to Cr"),
        ("create_order", {"8": 5}, r"attribute 8 \(OrderVersion\) does not apply to CreateOrder"),
        ("cancel_all_orders", {"6": 1}, r"SelfTradeBehaviorMode\) does not apply to CancelAll"),
        ("cancel_order", {"7": 1}, r"SelfTradeEqualityMode\) does not apply to CancelOrder"),
    ],
)
def test_attributes_are_checked_as_lighter_go_validates_them(
    name: str, attrs: dict[str, int], why: str
) -> None:
    with pytest.raises(CodecError, match=why) as e:
        _with_attrs(name, attrs)
    assert e.value.code == ResultCode.INVALID_TX_INFO


def test_not_set_attribute_values_are_the_same_tx_as_none() -> None:
    plain = tx_from_json(*_case("cancel_all_orders")[:2])
    assert _with_attrs("cancel_all_orders", {"5": 255, "6": 0, "8": 0}) == plain
    assert _with_attrs("create_order", {"6": 0, "7": 0, "1": 0}) == tx_from_json(
        *_case("create_order")[:2]
    )


def test_live_sdk_attribute_txs_parse_and_verify_as_raydex_txs() -> None:
    """Sign the attribute cases with the SDK's library now; skipped where it cannot load."""
    from kit import make_sdk_vectors

    names = {"create_order_self_trade", "cancel_all_orders_market", "modify_order_version"}
    try:
        doc = make_sdk_vectors.sdk_cases(names)
    except OSError as e:  # the .so does not load on this platform
        pytest.skip(f"lighter-sdk signer library unavailable: {e}")
    assert {c["name"] for c in doc["cases"]} == names
    for case in doc["cases"]:
        tx = tx_from_json(case["tx_type"], case["tx_info"])
        assert message_hash_of(tx, CHAIN).hex() == case["tx_hash"]
        assert verify_tx(tx, PK, CHAIN)


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
    with pytest.raises(CodecError, match="SkipTxNonce"):
        tx_from_json(tx_type, {**info, "L2TxAttributes": {"4": 2}})


def test_malformed_attributes_are_refused() -> None:
    tx_type, tx_info, _ = _case("create_order")
    info: dict[str, Any] = json.loads(tx_info)
    for bad in ([1], {"99": 1}, {"4": "1"}, "x"):
        with pytest.raises(CodecError, match="L2TxAttributes"):
            tx_from_json(tx_type, {**info, "L2TxAttributes": bad})
    assert isinstance(tx_from_json(tx_type, {**info, "L2TxAttributes": {}}), CreateOrder)
