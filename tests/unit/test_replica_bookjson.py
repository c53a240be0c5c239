"""The order_book update rendered in C (actors/replica/ws/_bookjson.c) is byte for byte what msgspec
encodes for the Python body (``fanout.book_update_body``), on a realistic stream's book deltas and
on the corners of the decimal rendering; what it does not render falls back to the body."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydex.actors.replica.cache.state import ReplicaState
from raydex.actors.replica.ws import fanout
from raydex.actors.replica.ws.fanout import book_update_body, book_update_json
from raydex.codecs import MarketRecord, decode_block
from raydex.observability.bench.apply import build_stream

pytestmark = pytest.mark.skipif(
    fanout._bookjson is None, reason="built without a C compiler: the body is encoded in Python"
)

_encode = msgspec.json.Encoder().encode
NOW_US = 1_796_590_082_350_370


def _c(mi: int, offset: int, bids: Any, asks: Any, m: MarketRecord, now_us: int = NOW_US) -> Any:
    assert fanout._bookjson is not None
    return fanout._bookjson.book_update(
        mi, offset, bids, asks, 7, 9, 1_796_590_082_349_000, now_us,
        m.price_decimals, m.size_decimals,
    )  # fmt: skip


def _py(mi: int, offset: int, bids: Any, asks: Any, m: MarketRecord, now_us: int = NOW_US) -> bytes:
    return _encode(book_update_body(mi, offset, bids, asks, 7, 9, 1_796_590_082_349_000, now_us, m))


def test_every_book_delta_of_a_stream_renders_as_msgspec_encodes_it() -> None:
    _, seq, height, frames, records = build_stream(2_000, 2_000, 10, 5, 300)
    st_ = ReplicaState.from_records(records, seq, height)
    deltas = [d for f in frames for d in st_.apply_block(decode_block(f)).books.values()]
    assert len(deltas) > 500 and any(len(d.bids) + len(d.asks) > 2 for d in deltas)
    decimals = {(st_.markets[d.market_index][2], st_.markets[d.market_index][3]) for d in deltas}
    assert len(decimals) > 1  # markets with different price and size decimals
    for i, d in enumerate(deltas):
        m = st_.markets[d.market_index]
        got = _c(d.market_index, i, d.bids, d.asks, m)
        assert got == _py(d.market_index, i, d.bids, d.asks, m)
    sample = json.loads(got)
    assert sample["type"] == "update/order_book" and sample["timestamp"] == NOW_US // 1000


ints = st.integers(0, 2**64 - 1)
small = st.integers(0, 10**7)
levels = st.lists(st.tuples(st.one_of(small, ints), st.one_of(small, ints)), max_size=6).map(tuple)


@settings(max_examples=300, deadline=None)
@given(bids=levels, asks=levels, pd=st.integers(0, 30), sd=st.integers(0, 30), now=ints)
def test_any_levels_and_decimals_render_as_msgspec_encodes_them(
    bids: Any, asks: Any, pd: int, sd: int, now: int
) -> None:
    # zeros, values under 1 (leading "0.000"), exactly 10**decimals, 20-digit values, 0 decimals
    m = MarketRecord(*([3] + ["X"] + [pd, sd] + [0] * 14))
    now = now % 2**63
    assert _c(3, 11, bids, asks, m, now) == _py(3, 11, bids, asks, m, now)


@pytest.mark.parametrize(
    "bids, decimals",
    [
        (((-5, 1),), (2, 4)),  # a negative value: views.decimal_str's "-"
        (((2**64, 1),), (2, 4)),  # past uint64
        (([1, 2],), (2, 4)),  # a level that is not a pair tuple
        (((1, 2),), (31, 4)),  # decimals past 30: ticks_to_str
    ],
)
def test_what_c_does_not_render_falls_back_to_the_body(
    bids: Any, decimals: tuple[int, int]
) -> None:
    m = MarketRecord(*([3] + ["X"] + list(decimals) + [0] * 14))
    assert _c(3, 1, bids, (), m) is None
    want = _py(3, 1, bids, (), m)
    assert book_update_json(3, 1, bids, (), 7, 9, 1_796_590_082_349_000, NOW_US, m) == want
