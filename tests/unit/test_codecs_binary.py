"""Hot codecs, tx framing and blocks: derived formats, exact errors, header peeking."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from raydex.codecs import (
    HEADER_SIZE,
    BalanceChanged,
    CancelOrder,
    CodecError,
    CreateOrder,
    Deposit,
    LevelChanged,
    MarketChanged,
    ResultCode,
    TxExecuted,
    codec_of,
    decode_block,
    decode_block_checked,
    decode_tx,
    encode_block,
    encode_tx,
    message_hash_of,
    peek_block_header,
    tx_hash,
)

ORDER = CreateOrder(7, 0, 1, 42, 1000, 332_746, 1, 0, 1, 0, 0, -1, 1_766_434_222_583, 5, b"s" * 80)
MARKET = MarketChanged(1, "ETH-USD", 2, 4, 1, 0, 20, 50, 100, 1000, 500, 300, 200, 500, 332_746, 1)


def test_struct_formats_are_derived_from_the_construct_fields() -> None:
    assert codec_of(LevelChanged).struct.format == "<BBIQ"
    assert codec_of(MarketChanged).struct.format.startswith("<B16sBB")
    assert codec_of(TxExecuted).struct.format == "<40sBQBqI"
    # 62 bytes of fields + the 80-byte signature + its two self-trade attribute bytes
    assert codec_of(CreateOrder).size == 144


def test_symbols_are_nul_padded_on_encode_and_stripped_on_decode() -> None:
    buf = codec_of(MarketChanged).encode(MARKET)
    assert buf[1:17] == b"ETH-USD" + b"\0" * 9
    assert codec_of(MarketChanged).decode(buf, 0).symbol == "ETH-USD"


def test_encode_refuses_to_pad_or_truncate_silently() -> None:
    with pytest.raises(CodecError, match="sig"):
        codec_of(CreateOrder).encode(ORDER._replace(sig=b"short"))
    with pytest.raises(CodecError, match="symbol"):
        codec_of(MarketChanged).encode(MARKET._replace(symbol="X" * 17))
    with pytest.raises(CodecError, match="symbol"):
        codec_of(MarketChanged).encode(MARKET._replace(symbol="É"))
    with pytest.raises(CodecError, match="LevelChanged"):
        codec_of(LevelChanged).encode(LevelChanged(1, 0, 2**32, 1))


def test_encode_into_writes_at_the_offset_and_returns_the_next_one() -> None:
    buf = bytearray(3 + codec_of(BalanceChanged).size)
    end = codec_of(BalanceChanged).encode_into(buf, 3, BalanceChanged(9, -5))
    assert end == len(buf)
    assert codec_of(BalanceChanged).decode(buf, 3) == BalanceChanged(9, -5)


def test_decode_reads_at_an_offset_and_reports_truncation_as_codec_error() -> None:
    buf = b"xx" + codec_of(LevelChanged).encode(LevelChanged(1, 1, 99, 5))
    assert codec_of(LevelChanged).decode(buf, 2) == LevelChanged(1, 1, 99, 5)
    with pytest.raises(CodecError, match="LevelChanged: truncated"):
        codec_of(LevelChanged).decode(buf[:-1], 2)


def test_checked_decode_demands_the_exact_length() -> None:
    buf = codec_of(LevelChanged).encode(LevelChanged(1, 1, 99, 5))
    with pytest.raises(CodecError, match="exactly 14 bytes"):
        codec_of(LevelChanged).decode_checked(buf + b"\0")


def test_a_transaction_is_its_type_byte_then_its_layout() -> None:
    buf = encode_tx(ORDER)
    assert buf[0] == 14 and buf[1:] == codec_of(CreateOrder).encode(ORDER)
    assert decode_tx(buf) == ORDER
    assert tx_hash(ORDER) == hashlib.sha256(buf).digest()


def test_decode_tx_names_the_unknown_type_and_maps_it_to_invalid_tx_type() -> None:
    with pytest.raises(CodecError, match="unknown tx type 99") as err:
        decode_tx(b"\x63" + b"\0" * 20)
    assert err.value.code == ResultCode.INVALID_TX_TYPE


def test_decode_tx_rejects_empty_short_long_and_out_of_range_input() -> None:
    buf = encode_tx(ORDER)
    for bad in (b"", buf[:-1], buf + b"\0"):
        with pytest.raises(CodecError):
            decode_tx(bad)
    with pytest.raises(CodecError, match=r"CreateOrder\.price"):
        decode_tx(encode_tx(ORDER._replace(price=0)))


def test_the_message_hash_covers_the_chain_and_every_field_but_the_signature() -> None:
    hm = message_hash_of(ORDER, 304)
    assert len(hm) == 40
    assert message_hash_of(ORDER._replace(sig=b""), 304) == hm
    assert message_hash_of(ORDER, 305) != hm
    for name in ORDER._fields:  # every field but sig, the attribute fields after it included
        if name != "sig":
            changed = ORDER._replace(**{name: getattr(ORDER, name) + 1})
            assert message_hash_of(changed, 304) != hm, name
    with pytest.raises(CodecError, match="Deposit"):
        message_hash_of(Deposit(1, 5), 304)  # operator commands are not signed


EVENTS = [
    TxExecuted(b"h" * 40, 14, 7, 0, 5, 200),
    LevelChanged(1, 1, 332_746, 29),
    MARKET,
    BalanceChanged(7, -3),
]


def test_a_block_is_a_header_then_tagged_events() -> None:
    buf = encode_block(9, 3, 1234, EVENTS)
    assert peek_block_header(buf) == (9, 3, 1234, 4)
    assert buf[HEADER_SIZE] == 13  # TxExecuted's tag
    block = decode_block(buf)
    assert block.seq == 9 and block.events == EVENTS
    assert decode_block_checked(buf) == block


def test_an_empty_block_round_trips() -> None:
    assert decode_block(encode_block(1, 1, 1, [])) == (1, 1, 1, [])


@pytest.mark.parametrize("decode", [decode_block, decode_block_checked])
def test_block_decoders_reject_truncated_trailing_and_unknown_tags(decode: object) -> None:
    buf = encode_block(9, 3, 1234, EVENTS)
    with pytest.raises(CodecError, match="truncated"):
        decode(buf[:-1])  # type: ignore[operator]
    with pytest.raises(CodecError, match="trailing"):
        decode(buf + b"\0")  # type: ignore[operator]
    with pytest.raises(CodecError, match="unknown event tag 200"):
        decode(buf[:HEADER_SIZE] + b"\xc8" + buf[HEADER_SIZE + 1 :])  # type: ignore[operator]
    with pytest.raises(CodecError, match="header"):
        decode(buf[:10])  # type: ignore[operator]


def test_checked_block_decode_refuses_a_count_the_body_cannot_hold() -> None:
    buf = bytearray(encode_block(1, 1, 1, [BalanceChanged(1, 1)]))
    buf[24:28] = (10**9).to_bytes(4, "little")
    with pytest.raises(CodecError, match="cannot fit"):
        decode_block_checked(bytes(buf))


def test_encode_block_rejects_a_class_that_is_not_an_event() -> None:
    with pytest.raises(CodecError, match="registered event"):
        encode_block(1, 1, 1, [CancelOrder(1, 0, 0, 1, 0, 1, b"s" * 80)])  # type: ignore[list-item]
    with pytest.raises(CodecError, match="40 bytes"):
        encode_block(1, 1, 1, [TxExecuted(b"short", 14, 7, 0, 5, 200)])


def test_importing_the_codecs_does_not_import_pyarrow() -> None:
    code = "import sys, raydex.codecs; print('pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
