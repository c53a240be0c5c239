"""``decode_block_of`` gives the events of the kinds asked for, in order, exactly as
``decode_block`` decodes them, and refuses a damaged block as it does."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kit.wire_strategies import blocks

from raydex.codecs import (
    ApiKeyChanged,
    BalanceChanged,
    CodecError,
    PositionChanged,
    TxExecuted,
    decode_block,
    decode_block_of,
    encode_block,
)

KINDS = [TxExecuted, BalanceChanged, PositionChanged, ApiKeyChanged]
Raw = tuple[int, int, int, list[Any]]


@given(blocks(), st.sets(st.sampled_from(KINDS)))
def test_the_kinds_asked_for_in_order(block: Raw, kinds: set[type]) -> None:
    frame = encode_block(*block)
    full = decode_block(frame)
    only = decode_block_of(frame, frozenset(kinds))
    assert (only.seq, only.height, only.timestamp_ns) == (full.seq, full.height, full.timestamp_ns)
    assert only.events == [e for e in full.events if type(e) in kinds]


@given(blocks(max_events=10))
def test_a_truncated_or_padded_block_is_refused(block: Raw) -> None:
    frame = encode_block(*block)
    if not block[3]:
        return
    with pytest.raises(CodecError, match="truncated"):
        decode_block_of(frame[:-1], frozenset(KINDS))
    with pytest.raises(CodecError, match="truncated"):
        decode_block_of(frame[:-1], frozenset())  # nothing built: stepped over to the end
    with pytest.raises(CodecError, match="trailing"):
        decode_block_of(frame + b"\x00", frozenset(KINDS))
