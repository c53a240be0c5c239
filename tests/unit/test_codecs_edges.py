"""Lighter JSON, decimal strings, Lighter signatures, Arrow snapshots: examples and rejections."""

from __future__ import annotations

import base64
from pathlib import Path

import pyarrow as pa
import pytest

from raydex.codecs import (
    TABLES,
    AccountRecord,
    ApiKeyRecord,
    CancelOrder,
    ChangePubKey,
    CodecError,
    CreateOrder,
    Deposit,
    ExchangeRecord,
    MarketRecord,
    OrderRecord,
    ResultCode,
    TxType,
    Verifier,
    arrow_schema,
    generate_key,
    public_key_of,
    read_snapshot_ipc,
    records_to_tables,
    sign_tx,
    str_to_ticks,
    str_to_usdc,
    tables_to_records,
    ticks_to_str,
    tx_from_json,
    tx_to_json,
    usdc_to_str,
    verify_tx,
    write_snapshot_ipc,
)

SIG = base64.b64encode(b"\1" * 80).decode()
LIGHTER_CREATE_ORDER = (
    '{"AccountIndex":7,"ApiKeyIndex":3,"MarketIndex":0,"ClientOrderIndex":12,'
    '"BaseAmount":291,"Price":332746,"IsAsk":1,"Type":0,"TimeInForce":1,"ReduceOnly":0,'
    f'"TriggerPrice":0,"OrderExpiry":-1,"ExpiredAt":1766434822583,"Nonce":9,"Sig":"{SIG}"}}'
)


def test_a_lighter_create_order_tx_info_parses_into_a_create_order() -> None:
    tx = tx_from_json(TxType.CREATE_ORDER, LIGHTER_CREATE_ORDER)
    assert tx == CreateOrder(
        7, 3, 0, 12, 291, 332746, 1, 0, 1, 0, 0, -1, 1766434822583, 9, b"\1" * 80
    )


def test_tx_to_json_uses_lighter_keys_base64_sig_and_hex_keys() -> None:
    tx = ChangePubKey(7, 3, b"\xab" * 40, b"\2" * 65, 10, 9, b"\1" * 80)
    info = tx_to_json(tx)
    assert list(info) == [
        "AccountIndex",
        "ApiKeyIndex",
        "PubKey",
        "L1Sig",
        "ExpiredAt",
        "Nonce",
        "Sig",
    ]
    # as Lighter writes them: PubKey base64, L1Sig 0x-hex
    assert info["PubKey"] == base64.b64encode(b"\xab" * 40).decode() and info["Sig"] == SIG
    assert info["L1Sig"] == "0x" + "02" * 65
    assert tx_from_json(8, {**info, "L1Sig": "02" * 65}) == tx


def test_json_keys_that_are_not_pascal_case_come_from_the_declaration() -> None:
    assert set(tx_to_json(Deposit(1, 5))) == {"AccountIndex", "USDCAmount"}


def test_boolean_flags_are_accepted_where_lighter_sends_zero_or_one() -> None:
    info = tx_to_json(tx_from_json(14, LIGHTER_CREATE_ORDER))
    assert tx_from_json(14, {**info, "IsAsk": False}).is_ask == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"Price": 0}, r"CreateOrder\.Price: 0 out of range"),
        ({"Price": 1.5}, r"CreateOrder\.Price: needs an integer, got float"),
        ({"Price": "332746"}, r"CreateOrder\.Price: needs an integer, got str"),
        ({"Nonce": True}, r"CreateOrder\.Nonce: needs an integer, got bool"),
        ({"Type": 7}, r"CreateOrder\.Type: 7 out of range \[0, 6\]"),
        ({"Sig": "!!"}, r"CreateOrder\.Sig: not valid base64"),
        ({"Sig": base64.b64encode(b"x").decode()}, r"CreateOrder\.Sig: needs 80 bytes"),
        ({"Extra": 1}, r"unexpected keys \['Extra'\]"),
    ],
)
def test_bad_tx_info_is_rejected_naming_the_field(change: dict[str, object], message: str) -> None:
    info = {**tx_to_json(tx_from_json(14, LIGHTER_CREATE_ORDER)), **change}
    with pytest.raises(CodecError, match=message) as err:
        tx_from_json(14, info)
    assert err.value.code == ResultCode.INVALID_TX_INFO


def test_missing_keys_and_non_objects_are_rejected() -> None:
    with pytest.raises(CodecError, match=r"missing keys \['Sig'\]"):
        tx_from_json(
            15,
            '{"AccountIndex":1,"ApiKeyIndex":0,"MarketIndex":0,"Index":1,"ExpiredAt":1,"Nonce":1}',
        )
    for text in ("[]", "{", "null", b"\xff"):
        with pytest.raises(CodecError):
            tx_from_json(15, text)


def test_an_unknown_tx_type_is_rejected_with_invalid_tx_type() -> None:
    with pytest.raises(CodecError, match="unknown tx type 99") as err:
        tx_from_json(99, "{}")
    assert err.value.code == ResultCode.INVALID_TX_TYPE


def test_decimal_strings_are_exact() -> None:
    assert ticks_to_str(332746, 2) == "3327.46"
    assert ticks_to_str(-5, 4) == "-0.0005"
    assert ticks_to_str(0, 4) == "0.0000"
    assert ticks_to_str(17, 0) == "17"
    assert str_to_ticks("3327.46", 2) == 332746
    assert str_to_ticks("3327.4", 2) == 332740
    assert str_to_ticks("3327", 2) == 332700
    assert str_to_ticks("1.50", 1) == 15  # extra zeros are exact
    assert usdc_to_str(1_500_000) == "1.500000" and str_to_usdc("0.000001") == 1


@pytest.mark.parametrize("text", ["3327.461", "1e5", "", "--1", "1.2.3", " 1", "nan", "\u0661"])
def test_decimal_strings_with_too_many_decimals_or_junk_are_rejected(text: str) -> None:
    with pytest.raises(CodecError):
        str_to_ticks(text, 2)


def test_signatures_verify_only_for_the_same_key_chain_and_fields() -> None:
    seed, pub = generate_key()
    assert public_key_of(seed) == pub
    tx = sign_tx(CancelOrder(7, 0, 1, 5, 100, 3, b""), seed)
    assert verify_tx(tx, pub)
    assert not verify_tx(tx._replace(index=6), pub)
    assert not verify_tx(tx, pub, chain_id=305)
    assert not verify_tx(tx, generate_key()[1])


@pytest.mark.parametrize("pub", [b"", b"x" * 39, b"\xff" * 40, b"\0" * 40, "not bytes"])
def test_verify_returns_false_instead_of_raising_on_bad_keys(pub: object) -> None:
    seed, _ = generate_key()
    tx = sign_tx(CancelOrder(7, 0, 1, 5, 100, 3, b""), seed)
    assert verify_tx(tx, pub) is False  # type: ignore[arg-type]
    assert verify_tx(tx._replace(sig=b"short"), public_key_of(seed)) is False
    assert verify_tx(Deposit(1, 1), public_key_of(seed)) is False


def test_the_verifier_caches_keys_and_stays_bounded() -> None:
    v = Verifier(max_keys=2)
    seed, pub = generate_key()
    tx = sign_tx(CancelOrder(7, 0, 1, 5, 100, 3, b""), seed)
    for _ in range(3):
        assert v.verify(tx, pub)
    assert len(v) == 1
    for _ in range(5):
        v.verify(tx, generate_key()[1])
    assert len(v) <= 2


def test_arrow_schemas_follow_the_wire_types() -> None:
    schema = arrow_schema(ApiKeyRecord)
    assert [(f.name, str(f.type)) for f in schema] == [
        ("account_index", "uint64"),
        ("api_key_index", "uint8"),
        ("nonce", "int64"),
        ("pub_key", "fixed_size_binary[40]"),
    ]
    assert arrow_schema(MarketRecord).field("symbol").type == pa.string()


RECORDS = [
    ExchangeRecord(1, 2, 3, 4, 5, 6, 7),
    MarketRecord(0, "BTC", 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 1, 15, 16),
    AccountRecord(2, 5, 2),
    AccountRecord(1, -5, 1),
    ApiKeyRecord(1, 0, 3, b"k" * 40),
    OrderRecord(0, 1 << 48, 1, 2, 1, 100, 5, 5, -1, 0, 1, 0, 9, 0),
]


def test_records_become_six_tables_and_come_back_in_canonical_order(tmp_path: Path) -> None:
    tables = records_to_tables(reversed(RECORDS))
    assert list(tables) == list(TABLES)
    assert tables["positions"].num_rows == 0
    assert [type(r) for r in tables_to_records(tables)] == [type(r) for r in RECORDS]
    assert list(tables_to_records(records_to_tables(RECORDS))) == RECORDS


def test_a_snapshot_written_as_ipc_reads_back_with_its_seq(tmp_path: Path) -> None:
    write_snapshot_ipc(tmp_path, 99, records_to_tables(RECORDS))
    seq, tables = read_snapshot_ipc(tmp_path)
    assert seq == 99
    assert list(tables_to_records(tables)) == RECORDS


def test_a_snapshot_whose_files_disagree_on_seq_is_rejected(tmp_path: Path) -> None:
    write_snapshot_ipc(tmp_path / "a", 1, records_to_tables(RECORDS))
    write_snapshot_ipc(tmp_path / "b", 2, records_to_tables(RECORDS))
    (tmp_path / "b" / "orders.arrow").replace(tmp_path / "a" / "orders.arrow")
    with pytest.raises(CodecError, match="disagree on seq"):
        read_snapshot_ipc(tmp_path / "a")


def test_a_missing_or_corrupt_snapshot_file_is_a_codec_error(tmp_path: Path) -> None:
    with pytest.raises(CodecError, match="exchange"):
        read_snapshot_ipc(tmp_path)
    write_snapshot_ipc(tmp_path, 1, records_to_tables(RECORDS))
    (tmp_path / "accounts.arrow").write_bytes(b"garbage")
    with pytest.raises(CodecError, match="accounts"):
        read_snapshot_ipc(tmp_path)


def test_records_that_are_not_snapshot_records_are_rejected() -> None:
    with pytest.raises(CodecError, match="snapshot record"):
        records_to_tables([Deposit(1, 1)])
