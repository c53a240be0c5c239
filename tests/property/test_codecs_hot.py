"""Hot codecs agree with the construct reference, byte for byte, both ways, for every layout."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit.wire_strategies import blocks, field_values, wire_values

from raydex.codecs import (
    BLOCK_CONSTRUCT,
    BLOCK_DECODE_ACCELERATED,
    BY_CLASS,
    HEADER_SIZE,
    REGISTRY,
    BalanceChanged,
    CodecError,
    MarketChanged,
    TxExecuted,
    codec_of,
    decode_block,
    decode_block_checked,
    decode_block_loop,
    decode_block_reference,
    decode_tx,
    encode_block,
    encode_block_reference,
    encode_tx,
    is_signed_type,
    message_hash_of,
    peek_block_header,
    spec_of,
)

ALL_TYPES = sorted(BY_CLASS, key=lambda c: (spec_of(c).family, int(spec_of(c).tag)))
TX_TYPES = [s.cls for s in REGISTRY["tx"].values()]
COMPILED_BLOCK = BLOCK_CONSTRUCT.compile()


def reference_build(obj: Any) -> bytes:
    out: bytes = spec_of(type(obj)).construct.build(obj._asdict())
    return out


def reference_parse(cls: type, buf: bytes) -> Any:
    c = spec_of(cls).construct.parse(buf)
    return cls(*(c[f.name] for f in spec_of(cls).fields))


@pytest.mark.parametrize("cls", ALL_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_hot_and_construct_codecs_agree_both_ways_for_every_type(
    cls: type, data: st.DataObject
) -> None:
    obj = data.draw(wire_values(cls, respect_ranges=False))
    codec = codec_of(cls)
    buf = codec.encode(obj)
    assert buf == reference_build(obj)
    hot = codec.decode(buf, 0)
    assert hot == reference_parse(cls, buf) == obj
    assert type(hot) is cls


@pytest.mark.parametrize("cls", ALL_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_checked_decode_accepts_in_range_values_and_rejects_any_field_out_of_range(
    cls: type, data: st.DataObject
) -> None:
    codec = codec_of(cls)
    obj = data.draw(wire_values(cls))
    assert codec.decode_checked(codec.encode(obj)) == obj
    if not codec.ranges:
        return
    index, lo, hi, name = data.draw(st.sampled_from(codec.ranges), label="field")
    whole_type = field_values(spec_of(cls).fields[index], respect_ranges=False)
    bad = data.draw(whole_type.filter(lambda v: not lo <= v <= hi), label="bad")
    with pytest.raises(CodecError, match=name):
        codec.decode_checked(codec.encode(obj._replace(**{name: bad})))


@pytest.mark.parametrize("cls", TX_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_transactions_round_trip_through_their_tagged_encoding(
    cls: type, data: st.DataObject
) -> None:
    tx = data.draw(wire_values(cls))
    buf = encode_tx(tx)
    assert buf[0] == spec_of(cls).tag
    assert buf[1:] == reference_build(tx)
    assert decode_tx(buf) == tx


@pytest.mark.parametrize(
    "cls", [c for c in TX_TYPES if is_signed_type(c)], ids=lambda c: c.__name__
)
@settings(max_examples=20, deadline=None)
@given(data=st.data(), chain_id=st.integers(0, 2**32 - 1))
def test_the_message_hash_ignores_the_signature_and_binds_the_chain(
    cls: type, data: st.DataObject, chain_id: int
) -> None:
    tx = data.draw(wire_values(cls))
    hm = message_hash_of(tx, chain_id)
    assert len(hm) == 40
    assert message_hash_of(tx._replace(sig=bytes(80)), chain_id) == hm
    assert message_hash_of(tx, (chain_id + 1) % 2**32) != hm


#: Layouts carrying ``L2TxAttributes`` fields (``Attr`` extras after ``sig``).
ATTRIBUTE_TYPES = [c for c in TX_TYPES if any(f.attribute for f in spec_of(c).fields)]


@pytest.mark.parametrize("cls", ATTRIBUTE_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_attribute_fields_set_or_not_agree_with_construct_and_bind_the_message_hash(
    cls: type, data: st.DataObject
) -> None:
    """Each attribute field at its "not set" value and at a set one: the hot codec and the
    construct reference build and parse the same bytes, and the signed hash covers it."""
    codec = codec_of(cls)
    ranges = {name: (lo, hi) for _i, lo, hi, name in codec.ranges}
    tx = data.draw(wire_values(cls))
    for f in spec_of(cls).fields:
        attr = f.attribute
        if attr is None:
            continue
        lo, hi = ranges[f.name]
        value = data.draw(
            st.integers(lo, hi).filter(lambda v, nil=attr.nil: v != nil), label=f.name
        )
        unset, set_ = tx._replace(**{f.name: attr.nil}), tx._replace(**{f.name: value})
        for obj in (unset, set_):
            buf = codec.encode(obj)
            assert buf == reference_build(obj)
            assert codec.decode_checked(buf) == reference_parse(cls, buf) == obj
        assert message_hash_of(unset, 304) != message_hash_of(set_, 304)


@settings(max_examples=60, deadline=None)
@given(block=blocks(max_events=25))
def test_hot_block_codec_agrees_with_the_construct_reference(
    block: tuple[int, int, int, list[Any]],
) -> None:
    seq, height, ts, events = block
    buf = encode_block(seq, height, ts, events)
    assert buf == encode_block_reference(seq, height, ts, events)
    assert buf == encode_block_reference(seq, height, ts, events, compiled=COMPILED_BLOCK)
    decoded = decode_block(buf)
    assert decoded == decode_block_reference(buf) == decode_block_checked(buf)
    assert decoded == (seq, height, ts, events)
    assert [type(e) for e in decoded.events] == [type(e) for e in events]
    assert peek_block_header(buf) == (seq, height, ts, len(events))


# ---- the C block decoder (codecs/_blockdec.c) against the Python loop ---------------------------

needs_c_decoder = pytest.mark.skipif(
    not BLOCK_DECODE_ACCELERATED, reason="built without a C compiler: decode_block is the loop"
)


def _outcome(decode: Any, buf: bytes) -> Any:
    try:
        block = decode(buf)
    except CodecError as e:
        return ("error", str(e))
    return ("block", block, [type(e) for e in block.events])


@needs_c_decoder
@settings(max_examples=80, deadline=None)
@given(block=blocks(max_events=25), data=st.data())
def test_the_c_decoder_and_the_python_loop_agree_on_blocks_and_on_damaged_bodies(
    block: tuple[int, int, int, list[Any]], data: st.DataObject
) -> None:
    """Same events (classes and values) for a well-formed body; for a damaged one (cut, grown,
    a byte changed, the count changed) the same CodecError, or the same events where the damage
    still decodes (a changed value byte)."""
    buf = encode_block(*block)
    assert _outcome(decode_block, buf) == _outcome(decode_block_loop, buf)
    assert _outcome(decode_block, buf)[0] == "block"
    cut = data.draw(st.integers(HEADER_SIZE, len(buf)), label="cut")
    extra = data.draw(st.binary(max_size=3), label="extra")
    damaged = [buf[:cut], buf + extra]
    if len(buf) > HEADER_SIZE:
        at = data.draw(st.integers(HEADER_SIZE, len(buf) - 1), label="at")
        byte = data.draw(st.integers(0, 255), label="byte")
        damaged.append(buf[:at] + bytes([byte]) + buf[at + 1 :])
    count = data.draw(st.sampled_from([0, 1, 2**31, 2**32 - 1]), label="count")
    damaged.append(buf[: HEADER_SIZE - 4] + count.to_bytes(4, "little") + buf[HEADER_SIZE:])
    for bad in damaged:
        assert _outcome(decode_block, bad) == _outcome(decode_block_loop, bad)


@needs_c_decoder
def test_the_c_decoder_takes_every_buffer_kind_and_untracks_the_events_of_atoms() -> None:
    import gc

    events = [
        BalanceChanged(3, -5),
        TxExecuted(b"h" * 40, 14, 2**63, 255, -(2**63), 2**32 - 1),
        MarketChanged(1, "ETH-USD", 2, 4, 1, 0, 20, 50, 100, 1000, 500, 300, 200, 500, 7, 1),
    ]
    buf = encode_block(1, 2, 3, events)
    for b in (buf, bytearray(buf), memoryview(buf)):
        got = decode_block(b)
        assert got.events == events and [type(e) for e in got.events] == [type(e) for e in events]
    # a struct layout's event holds ints and bytes only: out of the collector's lists as built
    # (as observability/_untrack.c leaves it); a text layout's (MarketChanged: its symbol comes
    # from the Python unpacker) is tracked as tuple.__new__ leaves it
    assert [gc.is_tracked(e) for e in decode_block(buf).events] == [False, False, True]
    assert all(gc.is_tracked(e) for e in decode_block_loop(buf).events)  # the Python loop's
