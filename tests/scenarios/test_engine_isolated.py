"""Isolated margin: a position in margin mode 1 stands on its own collateral.

Market 0 (and 1): 1 lot at 10_000 ticks = $1; initial margin 10%, maintenance 5%, no fees unless
given. Opening 100 lots at the mark takes their initial margin, $10, from the cross collateral
into the position; a reduction gives back its share, a close all of it; UpdateMargin moves more
in or out (out only down to the initial margin); the position is liquidated against its own
collateral, a deficit going to the insurance fund, never to the cross collateral. The Desk runs
``validate_internal_state`` after every command (conservation with the isolated collateral, no
position or account left under maintenance)."""

from __future__ import annotations

from kit.engine import OK, Desk, Step, market, play

from raydex.codecs import ResultCode as RC
from raydex.engine import Engine

DOLLAR = 1_000_000
CASH = 1_000 * DOLLAR


def _isolated_long(d: Desk, lots: int = 100, price: int = 10_000, m: int = 0) -> int:
    """Account 1 goes long ``lots`` in isolated mode against account 2; its cross cash before."""
    assert d.isolate(1, m) == OK
    before = d.cash(1)
    assert d.sell(2, lots, price, m=m) == OK
    assert d.buy(1, lots, price, m=m) == OK
    return before


def test_switching_margin_mode_needs_a_flat_position_without_orders() -> None:
    play(
        Desk(collateral=CASH),
        [
            Step("isolate", (1,)),
            Step("leverage", (1, 1_000, 0, 0)),  # back to cross, still flat
            Step("buy", (1, 10, 9_000)),
            Step("isolate", (1,), code=RC.MARGIN_MODE_LOCKED),  # an order rests there
            Step("cancel_all", (1,)),
            Step("isolate", (1,)),
            Step("sell", (2, 10, 10_000)),
            Step("buy", (1, 10, 10_000), sizes={1: 10, 2: -10}),
            Step("leverage", (1, 1_000, 0, 0), code=RC.MARGIN_MODE_LOCKED),  # open position
            Step("margin", (3, DOLLAR), code=RC.NO_ISOLATED_POSITION),  # no position
            Step("margin", (2, DOLLAR), code=RC.NO_ISOLATED_POSITION),  # 2 is cross
        ],
    )


def test_a_switch_shows_in_the_position_event() -> None:
    d = Desk(collateral=CASH)
    assert d.isolate(1, imf=2_000) == OK
    (ev,) = d.of("PositionChanged")
    assert (ev.margin_mode, ev.initial_margin_fraction, ev.allocated_margin) == (1, 2_000, 0)


def test_opening_takes_the_initial_margin_and_a_reduction_gives_back_its_share() -> None:
    d = Desk(collateral=CASH)
    before = _isolated_long(d)
    assert d.allocated(1) == 10 * DOLLAR
    assert d.cash(1) == before - 10 * DOLLAR
    assert d.buy(3, 40, 10_000) == OK and d.sell(1, 40, 10_000) == OK  # 40 of 100 lots
    assert (d.size(1), d.allocated(1)) == (60, 6 * DOLLAR)
    assert d.cash(1) == before - 6 * DOLLAR


def test_a_close_gives_back_the_collateral_with_the_profit() -> None:
    d = Desk(collateral=CASH)
    before = _isolated_long(d)
    assert d.mark(10_500) == OK
    assert d.buy(3, 100, 10_500) == OK and d.sell(1, 100, 10_500) == OK
    assert (d.size(1), d.allocated(1)) == (0, 0)
    assert d.cash(1) == before + 5 * DOLLAR  # the $5 profit, the $10 back


def test_a_fill_worse_than_the_mark_takes_the_loss_too() -> None:
    # bought at 10_200 with the mark at 10_000: $10 of margin plus the $2 it is down at once
    d = Desk(collateral=CASH)
    before = _isolated_long(d, price=10_200)
    assert d.allocated(1) == 12 * DOLLAR
    assert d.cash(1) == before - 12 * DOLLAR


def test_fees_of_an_isolated_position_come_out_of_its_collateral() -> None:
    d = Desk(collateral=CASH, markets=(market(taker_fee=1_000),))  # 0.1% taker
    before = _isolated_long(d)
    assert d.allocated(1) == 10 * DOLLAR - 100_000
    assert d.cash(1) == before - 10 * DOLLAR


def test_update_margin_adds_and_removes_down_to_the_initial_margin() -> None:
    d = Desk(collateral=CASH)
    before = _isolated_long(d)
    play(
        d,
        [
            Step("margin", (1, 5 * DOLLAR)),
            Step("margin", (1, 6 * DOLLAR, False), code=RC.NOT_ENOUGH_MARGIN),  # below $10 IM
            Step("margin", (1, 16 * DOLLAR, False), code=RC.INSUFFICIENT_BALANCE),
            Step("margin", (1, 5 * DOLLAR, False)),
            Step("margin", (1, CASH, True), code=RC.INSUFFICIENT_BALANCE),  # more than cross
        ],
    )
    assert (d.allocated(1), d.cash(1)) == (10 * DOLLAR, before - 10 * DOLLAR)
    assert d.mark(10_500) == OK  # $15 of equity, $10.50 of initial margin: $4.50 may come out
    assert d.margin(1, 4_600_000, False) == RC.NOT_ENOUGH_MARGIN
    assert d.margin(1, 4_500_000, False) == OK
    assert d.allocated(1) == 5_500_000


def test_an_isolated_position_is_liquidated_on_its_own_collateral_only() -> None:
    """Account 1 keeps ~$990 of cross collateral and a cross position in market 1; its isolated
    long in market 0 ($10 of collateral) falls under maintenance at 9_450 and is closed against
    the bid at 9_500: its $5 loss comes out of its own collateral, the $5 left goes back to the
    cross collateral, and the cross position is not touched."""
    d = Desk(collateral=CASH, markets=(market(0), market(1)))
    assert d.sell(3, 10, 10_000, m=1) == OK and d.buy(1, 10, 10_000, m=1) == OK  # cross
    before = _isolated_long(d)
    assert d.buy(3, 100, 9_500) == OK
    assert d.mark(9_470) == OK  # $4.70 of equity, $4.735 of maintenance: under it
    closed = d.of("PositionLiquidated")
    (liq,) = closed
    assert (liq.account_index, liq.market_index, liq.size, liq.price) == (1, 0, 100, 9_500)
    assert (d.size(1), d.allocated(1)) == (0, 0)
    assert d.cash(1) == before - 5 * DOLLAR
    assert d.size(1, m=1) == 10  # the cross position stays
    assert d.eng.insurance_fund == 0


def test_an_isolated_deficit_goes_to_the_insurance_fund_not_the_cross_collateral() -> None:
    d = Desk(collateral=CASH)
    before = _isolated_long(d)
    assert d.buy(3, 100, 8_000) == OK
    assert d.mark(8_000) == OK  # a gap: $20 lost on $10 of collateral
    assert d.size(1) == 0
    assert d.cash(1) == before - 10 * DOLLAR  # only what it had put in
    assert d.eng.insurance_fund == -10 * DOLLAR


def test_a_cross_liquidation_leaves_isolated_positions_alone() -> None:
    """Account 1 has $10 of cross collateral backing a cross long of 100 lots in market 0, and
    an isolated long in market 1 it funded before. Market 0 falls: the cross account is closed;
    the isolated position and its collateral stay as they were."""
    d = Desk(collateral=CASH, markets=(market(0), market(1)))
    _isolated_long(d, m=1)
    assert d.withdraw(1, d.cash(1) - 10 * DOLLAR) == OK
    assert d.sell(2, 100, 10_000) == OK and d.buy(1, 100, 10_000) == OK  # cross, at IM
    assert d.buy(3, 100, 9_500) == OK
    assert d.mark(9_450) == OK
    assert [e.market_index for e in d.of("PositionLiquidated")] == [0]
    assert (d.size(1), d.size(1, m=1), d.allocated(1, m=1)) == (0, 100, 10 * DOLLAR)


def test_resting_orders_of_an_isolated_market_reserve_cross_margin() -> None:
    d = Desk(collateral=10 * DOLLAR)
    play(
        d,
        [
            Step("isolate", (1,)),
            Step("buy", (1, 100, 10_000)),  # $10 of initial margin, reserved in the cross pool
            Step("buy", (1, 1, 10_000), code=RC.NOT_ENOUGH_MARGIN),
            Step("withdraw", (1, 1), code=RC.NOT_ENOUGH_MARGIN),
            Step("sell", (2, 100, 10_000), sizes={1: 100, 2: -100}),  # fills: $10 moves in
        ],
    )
    assert (d.cash(1), d.allocated(1)) == (0, 10 * DOLLAR)


def test_funding_is_charged_to_the_isolated_collateral() -> None:
    d = Desk(collateral=CASH)
    before = _isolated_long(d)
    assert d.funding(1_000_000) == OK  # 1% of $100: the long pays $1
    assert (d.allocated(1), d.cash(1)) == (9 * DOLLAR, before - 10 * DOLLAR)
    assert d.funding(5_000_000) == OK  # $5 more: $4 of equity against $5 of maintenance
    # deleveraged against the short at its bankruptcy price (9_600: $4 lost, nothing left)
    assert [(e.counterparty_index, e.price) for e in d.of("PositionDeleveraged")] == [(2, 9_600)]
    assert (d.size(1), d.allocated(1), d.cash(1)) == (0, 0, before - 10 * DOLLAR)


def test_isolated_state_survives_a_snapshot_round_trip() -> None:
    d = Desk(collateral=CASH, markets=(market(0), market(1)))
    _isolated_long(d)
    assert d.isolate(1, m=1) == OK
    assert d.buy(1, 5, 9_000, m=1) == OK  # a resting order of an isolated market
    assert d.margin(1, 3 * DOLLAR) == OK
    again = Engine.from_records(d.eng.records())
    again.validate_internal_state()
    assert again.state_hash() == d.eng.state_hash()
    assert again.position(1, 0) == d.eng.position(1, 0)
    assert again.state.accounts[1].isolated == 2
