"""The replica's fast decimal strings (``views.decimal_str`` and the price memo) write exactly what
the codecs' reference ``ticks_to_str`` writes, for every integer and number of decimals."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raydex.actors.replica import views
from raydex.codecs import ticks_to_str

values = st.one_of(
    st.integers(-(10**40), 10**40),
    st.integers(-1_000, 1_000),
    st.sampled_from([0, 1, 9, 10, 99, 100, 10**6, 10**6 - 1, -(10**6)]),
)


@given(values, st.integers(0, 35))
def test_decimal_str_is_ticks_to_str(ticks: int, decimals: int) -> None:
    assert views.decimal_str(ticks, decimals) == ticks_to_str(ticks, decimals)


@given(st.lists(st.integers(0, 10**12), max_size=50), st.integers(0, 12))
def test_the_price_memo_answers_what_ticks_to_str_answers(prices: list[int], decimals: int) -> None:
    memo = views.decimal_memo(decimals)
    for p in prices + prices:  # second pass: hits
        assert memo[p] == ticks_to_str(p, decimals)
    assert len(memo) <= views.MEMO_ENTRIES
