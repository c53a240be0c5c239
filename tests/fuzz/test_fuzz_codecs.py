"""Decoders of untrusted input reject bad input with CodecError and never crash otherwise.

Random bytes, and valid encodings mutated (truncated, extended, bytes flipped or overwritten), for
``decode_tx``, ``decode_block_checked``, ``decode_block`` and every layout's ``decode_checked``;
random JSON values and strings for ``tx_from_json``. Any exception other than CodecError fails.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kit.wire_strategies import blocks, family_values

from raydex.codecs import (
    BY_CLASS,
    CodecError,
    codec_of,
    decode_block,
    decode_block_checked,
    decode_tx,
    encode_block,
    encode_tx,
    tx_from_json,
    tx_to_json,
    tx_type_of,
)

FUZZ = settings(max_examples=300, deadline=None)


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    buf = bytearray(draw(valid))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "extend", "flip", "set"]))
        if op == "truncate" and buf:
            del buf[draw(st.integers(0, len(buf) - 1)) :]
        elif op == "extend":
            buf += draw(st.binary(min_size=1, max_size=16))
        elif buf:
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] = (
                buf[i] ^ (1 << draw(st.integers(0, 7)))
                if op == "flip"
                else draw(st.integers(0, 255))
            )
    return bytes(buf)


def only_codec_errors(decode: Any, buf: Any, reencode: Any = None) -> None:
    """``decode(buf)`` either raises CodecError or returns a value that re-encodes to ``buf``."""
    try:
        value = decode(buf)
    except CodecError:
        return
    if reencode is not None:
        assert reencode(value) == buf


valid_txs = family_values("tx").map(encode_tx)
valid_blocks = blocks(max_events=8).map(lambda b: encode_block(*b))


@FUZZ
@given(buf=st.one_of(st.binary(max_size=300), mutated(valid_txs)))
def test_decode_tx_raises_only_codec_error(buf: bytes) -> None:
    only_codec_errors(decode_tx, buf, encode_tx)


@FUZZ
@given(buf=st.one_of(st.binary(max_size=400), mutated(valid_blocks)))
def test_block_decoders_raise_only_codec_error(buf: bytes) -> None:
    only_codec_errors(decode_block_checked, buf, lambda b: encode_block(*b))
    only_codec_errors(decode_block, buf, lambda b: encode_block(*b))


@FUZZ
@given(cls=st.sampled_from(sorted(BY_CLASS, key=lambda c: c.__name__)), data=st.data())
def test_every_layout_checked_decode_raises_only_codec_error(cls: type, data: Any) -> None:
    codec = codec_of(cls)
    size = codec.size
    buf = data.draw(
        st.one_of(
            st.binary(min_size=max(0, size - 2), max_size=size + 2),
            mutated(st.binary(min_size=size, max_size=size)),
        )
    )
    only_codec_errors(codec.decode_checked, buf, codec.encode)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated_tx_info(draw: st.DrawFn) -> tuple[int, Any]:
    tx = draw(family_values("tx"))
    info = tx_to_json(tx)
    key = draw(st.sampled_from(sorted(info))) if info else ""
    op = draw(st.sampled_from(["replace", "drop", "add"])) if info else "add"
    if op == "replace":
        info[key] = draw(json_values)
    elif op == "drop":
        del info[key]
    else:
        info[draw(st.text(max_size=12))] = draw(json_values)
    as_text = draw(st.booleans())
    return tx_type_of(type(tx)), json.dumps(info) if as_text else info


@settings(max_examples=200, deadline=None)
@given(
    case=st.one_of(
        st.tuples(
            st.integers(-5, 300),
            st.one_of(json_values, st.text(max_size=60), st.binary(max_size=60)),
        ),
        mutated_tx_info(),
    )
)
def test_tx_from_json_raises_only_codec_error(case: tuple[Any, Any]) -> None:
    tx_type, info = case
    if isinstance(info, list | int | float | bool) or info is None:
        info = json.dumps(info)  # the form field is always a string
    only_codec_errors(lambda i: tx_from_json(tx_type, i), info)
