"""Round trips at the edges: Lighter JSON, Lighter signatures, Arrow tables and IPC files."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit.wire_strategies import family_values, wire_values

from raydex.codecs import (
    REGISTRY,
    ChangePubKey,
    CodecError,
    ResultCode,
    SelfTradeBehavior,
    SelfTradeEquality,
    Transfer,
    generate_key,
    is_signed_type,
    read_snapshot_ipc,
    records_to_tables,
    sign_tx,
    str_to_ticks,
    tables_to_records,
    ticks_to_str,
    tx_from_json,
    tx_to_json,
    tx_to_json_str,
    tx_type_of,
    verify_tx,
    write_snapshot_ipc,
)

TX_TYPES = [s.cls for s in REGISTRY["tx"].values()]
U64 = (1 << 64) - 1
P = 0xFFFFFFFF00000001
SIGNED = [c for c in TX_TYPES if is_signed_type(c)]
KEYS = [generate_key() for _ in range(3)]
RECORD_ORDER = [s.cls for _, s in sorted(REGISTRY["record"].items())]


@pytest.mark.parametrize("cls", TX_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_transaction_round_trips_through_lighter_json(cls: type, data: st.DataObject) -> None:
    tx = data.draw(wire_values(cls))
    tag = tx_type_of(cls)
    if _reduce_with_master(tx):  # each in range, but lighter-go's Validate forbids the pair
        with pytest.raises(CodecError, match="Reduce") as e:
            tx_from_json(tag, tx_to_json(tx))
        assert e.value.code == ResultCode.INVALID_TX_INFO
        return
    assert tx_from_json(tag, tx_to_json(tx)) == tx
    assert tx_from_json(tag, tx_to_json_str(tx)) == tx
    assert tx_from_json(tag, tx_to_json_str(tx).encode()) == tx


def _reduce_with_master(tx: Any) -> bool:
    return (
        getattr(tx, "self_trade_behavior", 0) == SelfTradeBehavior.REDUCE
        and getattr(tx, "self_trade_equality", 0) == SelfTradeEquality.MASTER_ACCOUNT_INDEX
    )


@pytest.mark.parametrize("cls", SIGNED, ids=lambda c: c.__name__)
@settings(max_examples=10, deadline=None)
@given(data=st.data(), chain_id=st.integers(0, 2**32 - 1))
def test_a_signed_tx_verifies_and_any_changed_field_breaks_it(
    cls: type, data: st.DataObject, chain_id: int
) -> None:
    seed, pub = KEYS[data.draw(st.integers(0, len(KEYS) - 1))]
    tx = sign_tx(data.draw(wire_values(cls)), seed, chain_id)
    assert verify_tx(tx, pub, chain_id)
    other = data.draw(wire_values(cls))
    # ChangePubKey's and Transfer's l1_sig and Transfer's memo are not in Lighter's Schnorr
    # message: an L1 signature is checked on its own (the account's L1 address must have made
    # it, over a text that holds the memo), so changing them keeps this signature valid
    fields = [f for f in cls._fields if f != "sig"]  # type: ignore[attr-defined]
    if cls is ChangePubKey:
        fields.remove("l1_sig")
    if cls is Transfer:
        fields.remove("l1_sig")
        fields.remove("memo")
    name = data.draw(st.sampled_from(fields))
    tampered = tx._replace(**{name: getattr(other, name)})
    # Lighter hashes each value as a field element: its 64-bit two's complement mod p, so e.g.
    # -1 and 2^32 - 2 sign alike; only such congruent values may keep the signature valid
    a, b = getattr(tx, name), getattr(tampered, name)
    same = a == b or (type(a) is int and (a & U64) % P == (b & U64) % P)
    assert verify_tx(tampered, pub, chain_id) == same
    assert not verify_tx(tx, KEYS[(KEYS.index((seed, pub)) + 1) % len(KEYS)][1], chain_id)
    assert not verify_tx(tx, pub, (chain_id + 1) % 2**32)


@settings(max_examples=40, deadline=None)
@given(records=st.lists(family_values("record"), max_size=30))
def test_snapshot_records_round_trip_through_arrow_tables_and_ipc_files(records: list[Any]) -> None:
    canonical = sorted(records, key=lambda r: RECORD_ORDER.index(type(r)))  # stable: rows kept
    tables = records_to_tables(records)
    assert list(tables_to_records(tables)) == canonical
    with tempfile.TemporaryDirectory() as tmp:
        write_snapshot_ipc(tmp, 17, tables)
        seq, read = read_snapshot_ipc(tmp)
        assert seq == 17
        assert list(tables_to_records(read)) == canonical


@settings(max_examples=200, deadline=None)
@given(ticks=st.integers(-(2**70), 2**70), decimals=st.integers(0, 12))
def test_decimal_strings_round_trip_exactly(ticks: int, decimals: int) -> None:
    text = ticks_to_str(ticks, decimals)
    assert str_to_ticks(text, decimals) == ticks
    assert "e" not in text and (decimals == 0 or len(text.split(".")[1]) == decimals)
