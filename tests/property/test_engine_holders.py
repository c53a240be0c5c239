"""Funding charges every holder once, in account order, however positions open, close and flip.

``Market.holders_by_account`` does not sort every holder at each settlement: it merges the
order kept from the last one (``holder_order``, which may hold positions since gone flat) with
the positions that went non-zero since (``new_holders``, unsorted, with repeats when a position
closes and opens again). A merge that kept a flat position or a repeat would charge it funding
twice or for nothing, and the books would still balance, so ``validate_internal_state`` cannot
see it: here each settlement's charges are recomputed from the positions before it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kit.engine import OK, Desk

from raydex.codecs import FUNDING_RATE_SCALE as FUNDING_SCALE

ACCOUNTS = (1, 2, 3, 4, 5, 6)
# ("trade", buyer, seller, lots): the seller rests an ask and the buyer takes it at the mark;
# ("funding", rate) settles one (the sign says who pays).
STEPS = st.one_of(
    st.tuples(
        st.just("trade"),
        st.sampled_from(ACCOUNTS),
        st.sampled_from(ACCOUNTS),
        st.integers(1, 3),
    ),
    st.tuples(st.just("funding"), st.integers(-50_000, 50_000).filter(bool)),
)


def _charges(d: Desk, rate: int) -> dict[int, int]:
    """What a settlement at ``rate`` must charge each holder (the engine's rounding)."""
    m = d.eng.state.markets[0]
    out = {}
    for ai, pos in m.holders.items():
        raw = pos.size * m.mark_q * rate
        out[ai] = -(-raw // FUNDING_SCALE)  # payers (raw > 0) round up, receivers toward zero
    return out


def _funding_paid(d: Desk) -> dict[int, int]:
    return {a: pos.funding_paid for a in ACCOUNTS if (pos := d.eng.position(a, 0)) is not None}


def _check_order(d: Desk) -> None:
    m = d.eng.state.markets[0]
    order = m.holders_by_account()
    assert [p.account.index for p in order] == sorted(m.holders)
    assert all(m.holders[p.account.index] is p for p in order)


@settings(max_examples=60, deadline=None)
@given(st.lists(STEPS, min_size=1, max_size=60))
def test_each_settlement_charges_each_holder_once_in_account_order(steps: list[tuple]) -> None:
    d = Desk(accounts=ACCOUNTS)
    for step in steps:
        if step[0] == "trade":
            _, buyer, seller, lots = step
            if buyer == seller:
                continue
            assert d.sell(seller, lots, 10_000) == OK
            assert d.buy(buyer, lots, 10_000) == OK
        else:
            rate = step[1]
            due = _charges(d, rate)
            before = _funding_paid(d)
            assert d.funding(rate) == OK
            after = _funding_paid(d)
            paid = {a: after[a] - before.get(a, 0) for a in after if after[a] != before.get(a, 0)}
            assert paid == {a: x for a, x in due.items() if x}
            charged = [e.account_index for e in d.of("PositionChanged")]
            assert charged == sorted(due)
        _check_order(d)


def test_a_market_without_settlements_folds_its_new_holders_in() -> None:
    """Thousands of opens and closes with no funding: ``new_holders`` stays bounded (folded
    into the order past 2 * holders + 1024), and the order is still right afterwards."""
    d = Desk(accounts=(1, 2, 3))
    m = d.eng.state.markets[0]
    peak = 0
    for _ in range(600):  # each round opens and closes the positions of accounts 1 and 2
        assert d.sell(2, 1, 10_000) == OK and d.buy(1, 1, 10_000) == OK
        assert d.sell(1, 1, 10_000) == OK and d.buy(2, 1, 10_000) == OK
        peak = max(peak, len(m.new_holders))
    assert 1_000 < peak <= 2 * 2 + 1024  # 1,200 opens: folded in, never past its bound
    assert d.sell(3, 2, 10_000) == OK and d.buy(1, 2, 10_000) == OK
    _check_order(d)
