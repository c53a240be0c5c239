"""Risk scenarios: liquidation against the book, auto-deleveraging at the bankruptcy price,
insurance-fund coverage of a deficit, and funding with rounding in the exchange's favour.

Market 0: 1 lot at 10_000 ticks = $1 (1_000_000 micro-USDC); initial margin 10%, maintenance 5%.
Account 1 holds $10 and buys 100 lots at 10_000 (exactly its initial margin)."""

from __future__ import annotations

import random

from kit.engine import OK, Desk, market

DOLLAR = 1_000_000


def _long_100(liq_fee: int = 0, sellers: tuple[tuple[int, int], ...] = ((2, 100),)) -> Desk:
    d = Desk(accounts=(1, 2, 3, 4), markets=(market(liquidation_fee=liq_fee),))
    assert d.withdraw(1, d.collateral - 10 * DOLLAR) == OK
    for who, lots in sellers:
        assert d.sell(who, lots, 10_000) == OK
    assert d.buy(1, 100, 10_000) == OK
    assert d.size(1) == 100
    return d


def test_an_account_above_maintenance_margin_is_left_alone() -> None:
    d = _long_100()
    assert d.mark(9_500) == OK
    assert d.size(1) == 100 and d.of("PositionLiquidated") == []


def test_an_account_under_maintenance_is_closed_against_the_book_with_a_fee_to_insurance() -> None:
    d = _long_100(liq_fee=10_000)
    assert d.buy(3, 100, 9_500) == OK
    assert d.sell(1, 1, 11_000) == OK  # a resting order of the account, cancelled first
    assert d.mark(9_450) == OK
    assert (d.size(1), d.size(3)) == (0, 100)
    (liq,) = d.of("PositionLiquidated")
    assert (liq.account_index, liq.size, liq.price, liq.fee) == (1, 100, 9_500, 950_000)
    statuses = [e.status for e in d.of("OrderUpdated") if e.account_index == 1]
    assert statuses[0] == 15  # CANCELED_LIQUIDATION
    assert d.cash(1) == 10 * DOLLAR - 5 * DOLLAR - 950_000
    assert d.eng.insurance_fund == 950_000
    assert d.bids() == [] and d.asks() == []


def test_what_the_book_cannot_absorb_is_deleveraged_against_the_most_profitable_opposite() -> None:
    d = _long_100(sellers=((2, 60), (3, 40)))
    assert d.mark(9_450) == OK
    adl = d.of("PositionDeleveraged")
    got = [(e.counterparty_index, e.size, e.price) for e in adl]
    assert got == [(2, 60, 9_000), (3, 40, 9_000)]
    assert (d.size(1), d.size(2), d.size(3)) == (0, 0, 0)
    assert d.cash(1) == 0
    assert d.eng.insurance_fund == 0


def test_deleveraging_ranks_equal_profits_by_account_index() -> None:
    # Accounts 3 and 2 sell 50 lots each at 10_000 (3 first): the same profit at any mark, so
    # the lower account index is deleveraged first, whatever the order they traded in.
    d = _long_100(sellers=((3, 50), (2, 50)))
    assert d.mark(9_450) == OK
    got = [(e.counterparty_index, e.size) for e in d.of("PositionDeleveraged")]
    assert got == [(2, 50), (3, 50)]
    assert (d.size(1), d.size(2), d.size(3)) == (0, 0, 0)


def test_deleveraging_takes_only_what_it_needs_from_the_most_profitable() -> None:
    # Account 1 goes long 100: 40 lots from 4 at 10_400 and 60 from 2 at 10_000; 3 is short
    # 30 (to 5). At 9_000 the shorts' profits are 2: $6.00, 4: $5.60, 3: $3.00, so 1 is
    # deleveraged against 2, then 4, which cover it; 3 keeps its position.
    d = Desk(accounts=(1, 2, 3, 4, 5), markets=(market(),))
    assert d.withdraw(1, d.collateral - 12 * DOLLAR) == OK
    assert d.sell(4, 40, 10_400) == OK and d.buy(1, 40, 10_400) == OK
    assert d.sell(2, 60, 10_000) == OK and d.buy(1, 60, 10_000) == OK
    assert d.sell(3, 30, 10_000) == OK and d.buy(5, 30, 10_000) == OK
    assert d.mark(9_000) == OK
    got = [(e.counterparty_index, e.size) for e in d.of("PositionDeleveraged")]
    assert got == [(2, 60), (4, 40)]
    assert (d.size(1), d.size(2), d.size(4), d.size(3)) == (0, 0, 0, -30)


def test_a_deficit_left_after_liquidation_is_covered_by_the_insurance_fund() -> None:
    d = _long_100()
    assert d.buy(3, 100, 8_000) == OK
    assert d.mark(8_000) == OK
    assert d.size(1) == 0 and d.cash(1) == 0
    assert d.eng.insurance_fund == -10 * DOLLAR


def test_a_fill_that_leaves_a_maker_under_maintenance_liquidates_it_in_the_same_command() -> None:
    d = Desk(accounts=(1, 2, 3))
    assert d.withdraw(1, d.collateral - 10 * DOLLAR) == OK
    assert d.buy(1, 100, 10_000) == OK  # rests at exactly initial margin
    assert d.mark(9_400) == OK  # no position yet: nothing to liquidate
    assert d.buy(3, 100, 9_300) == OK
    assert d.sell(2, 100, 10_000) == OK  # fills account 1 at 10_000, $6 under the mark
    assert (d.size(1), d.size(2), d.size(3)) == (0, -100, 100)
    assert [e.account_index for e in d.of("PositionLiquidated")] == [1]
    assert d.cash(1) == 3 * DOLLAR


def test_the_unarmed_queue_of_a_still_market_stays_bounded_and_still_liquidates() -> None:
    """Account 1 holds markets 0 and 1 and trades round trips in market 0: each unarms it,
    queueing both its positions, and the next move of market 0 re-arms it, leaving its entry in
    market 1's queue stale. Market 1 never moves, so its queue only grows by churn: it is
    compacted and stays bounded. After a last round trip (unarmed again, its triggers stale),
    the move of market 1 that puts it under maintenance still closes it in that command: it is
    reached through the queue (the Desk checks after every command that no account is left
    under maintenance)."""
    d = Desk(accounts=(1, 2, 3, 4), markets=(market(0), market(1)))
    assert d.withdraw(1, d.collateral - 11 * DOLLAR) == OK
    assert d.sell(2, 100, 10_000, m=1) == OK and d.buy(1, 100, 10_000, m=1) == OK
    assert d.sell(4, 1, 10_000) == OK and d.buy(1, 1, 10_000) == OK
    m1 = d.eng.state.markets[1]
    peak = 0
    for i in range(700):
        assert d.sell(3, 1, 10_000) == OK and d.buy(1, 1, 10_000) == OK
        assert d.buy(3, 1, 10_000) == OK and d.sell(1, 1, 10_000) == OK
        assert d.mark(10_000 + i % 2) == OK
        peak = max(peak, len(m1.unarmed))
    assert (d.size(1), d.eng.position(1, 1).size) == (1, 100)  # type: ignore[union-attr]
    limit = 2 * len(m1.holders) + 256  # a queue past this is compacted (``unarm``)
    assert peak == limit  # stale entries reached it (700 round trips) and went no further
    assert d.sell(3, 1, 10_000) == OK and d.buy(1, 1, 10_000) == OK  # unarmed again
    assert d.eng.state.accounts[1].unarmed
    for price in range(9_990, 5_000, -10):  # market 1 down until account 1 is under maintenance
        assert d.mark(price, m=1) == OK
        if d.eng.position(1, 1).size == 0:  # type: ignore[union-attr]
            break
    closed = d.of("PositionLiquidated") + d.of("PositionDeleveraged")
    assert {e.account_index for e in closed} == {1}


def test_funding_moves_cash_from_longs_to_shorts() -> None:
    d = _long_100()
    before = (d.cash(1), d.cash(2))
    assert d.funding(1_000_000) == OK  # 1% of $100
    assert (d.cash(1), d.cash(2)) == (before[0] - DOLLAR, before[1] + DOLLAR)
    assert d.eng.position(1, 0).funding_paid == DOLLAR  # type: ignore[union-attr]
    assert d.funding(-1_000_000) == OK
    assert (d.cash(1), d.cash(2)) == before


def test_funding_that_leaves_a_payer_under_maintenance_liquidates_it_in_the_same_command() -> None:
    # Account 1: $10 at 10_000, maintenance $5 there; each tick down costs its buffer $0.0095.
    # Armed at 10_000 with 1/8 of the $5 held back as the reserve funding may spend without a
    # check ($0.625), its trigger is ~9_540: at 9_560 nothing re-checks it and it keeps $0.82.
    d = _long_100()
    assert d.mark(10_000) == OK
    assert d.mark(9_560) == OK
    assert d.size(1) == 100
    assert d.funding(941_500) == OK  # $0.90: more than the reserve and than the buffer
    closed = d.of("PositionLiquidated") + d.of("PositionDeleveraged")
    assert [e.account_index for e in closed] == [1]
    assert d.size(1) == 0


def test_a_reserve_set_aside_before_a_withdrawal_is_not_spent_after_it() -> None:
    # Armed with $50 of equity at 10_000 (buffer $45, reserve ~$5.6); the withdrawal of $40 leaves
    # it at initial margin (buffer $5), so a $5.50 payment must be checked, not taken from the
    # reserve the old triggers had left out.
    d = _long_100()
    assert d.deposit(1, 40 * DOLLAR) == OK
    assert d.mark(10_000) == OK
    assert d.withdraw(1, 40 * DOLLAR) == OK
    assert d.funding(5_500_000) == OK
    closed = d.of("PositionLiquidated") + d.of("PositionDeleveraged")
    assert [e.account_index for e in closed] == [1]


def test_payments_a_reserve_absorbs_never_hide_an_account_under_maintenance() -> None:
    # Small payments are spent from the reserve without an exact check; the Desk validates after
    # every command that no account is left under maintenance, whatever the mix of mark moves.
    for seed in range(3):
        d = _long_100()
        rng = random.Random(seed)
        steps = 0
        while d.size(1) and steps < 2_000:
            steps += 1
            if rng.random() < 0.3:
                assert d.mark(rng.randint(9_500, 10_100)) == OK
            else:
                assert d.funding(rng.randint(-5_000, 30_000)) == OK
        assert d.size(1) == 0, f"seed {seed}: the payments outran 2,000 steps"


def test_funding_rounds_in_the_exchanges_favour_and_keeps_the_residue() -> None:
    d = Desk()
    assert d.sell(2, 7, 10_000) == OK
    assert d.buy(1, 7, 10_000) == OK
    before = (d.cash(1), d.cash(2))
    assert d.funding(3) == OK  # 7 lots * $1 * 3e-8 = 0.21 micro-USDC
    assert (d.cash(1), d.cash(2)) == (before[0] - 1, before[1])
    assert d.eng.insurance_fund == 1


def test_the_trigger_index_stays_bounded_under_churn_and_still_liquidates() -> None:
    """Thousands of re-arms: every round trip of one lot unarms the traders, and the next mark
    move arms them again while their old entries (not crossed) go stale. The trigger heaps are
    compacted and their slots reused, so neither grows with the churn; then the move that puts
    the long under maintenance closes it in that command (the Desk checks after every command
    that no account is left under maintenance, so no earlier move missed it)."""
    d = _long_100()
    m = d.eng.state.markets[0]
    peak = 0
    for i in range(700):
        assert d.buy(3, 1, 10_000) == OK and d.sell(1, 1, 10_000) == OK
        assert d.sell(3, 1, 10_000) == OK and d.buy(1, 1, 10_000) == OK
        assert d.mark(10_000 + i % 2) == OK
        peak = max(peak, len(m.long_triggers) + len(m.short_triggers))
    assert d.size(1) == 100 and len(m.holders) == 2
    limit = 4 * len(m.holders) + 256  # a heap past this is compacted (``arm``)
    assert peak == limit + 1  # stale entries reached it (700 rounds re-armed ~1,400 times)
    assert len(m.trigger_account) <= limit + 2  # and the freed slots were reused
    for price in range(9_800, 5_000, -50):  # down until the long goes under maintenance
        assert d.mark(price) == OK
        if d.size(1) == 0:
            break
    closed = d.of("PositionLiquidated") + d.of("PositionDeleveraged")  # no bids: deleveraged
    assert d.size(1) == 0 and {e.account_index for e in closed} == {1}
