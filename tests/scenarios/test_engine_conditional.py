"""Conditional-order scenarios: stop-loss / take-profit (market and limit), TWAP and grouped orders
(OTO, OCO, OTOCO). One row = one command and what it leaves (book, positions, live conditional
orders); the tests below the table check the statuses the orders end with.

The desk's market: mark 10_000, band 50%, 10% initial margin, no fees. Accounts 1 and 2 open a
position against each other at 10_000 where a scenario needs one; account 3 provides liquidity.
"""

from __future__ import annotations

import pytest
from kit.engine import (
    DAY_MS,
    GTT,
    IOC,
    MARKET,
    NOW,
    OK,
    SIG,
    SL,
    SL_LIMIT,
    TP,
    TP_LIMIT,
    TWAP,
    Desk,
    Step,
    info,
    play,
)

from raydex.codecs import CreateGroupedOrders, GroupingType, OrderStatus, grouped_slots
from raydex.codecs import ResultCode as RC

OTO = GroupingType.ONE_TRIGGERS_THE_OTHER
OCO = GroupingType.ONE_CANCELS_THE_OTHER
OTOCO = GroupingType.ONE_TRIGGERS_A_ONE_CANCELS_THE_OTHER
FIRST = 1 << 48
MIN = 60_000
#: a day after the desk's clock: the conditional orders' expiry in the groups below
LATER = NOW + DAY_MS

#: account 1 long 10, account 2 short 10, at 10_000
LONG_10 = [Step("sell", (2, 10, 10_000)), Step("buy", (1, 10, 10_000), sizes={1: 10, 2: -10})]

SCENARIOS: dict[str, list[Step]] = {
    "a stop-loss sell waits off the book and fires as a market order when the mark falls to it": [
        *LONG_10,
        Step("buy", (3, 10, 9_000)),
        Step("trigger", (1, SL, 1, 10, 8_000, 9_500), bids=[(9_000, 10)], waiting={1: 1}),
        Step("mark", (9_501,), sizes={1: 10}, waiting={1: 1}),
        Step("mark", (9_500,), bids=[], sizes={1: 0, 3: 10}, waiting={1: 0}),
    ],
    "a stop-loss buy fires when the mark rises to it; a take-profit sell too": [
        *LONG_10,
        Step("sell", (3, 20, 11_000)),
        Step("trigger", (2, SL, 0, 4, 12_000, 10_500), waiting={2: 1}),
        Step("trigger", (1, TP, 1, 4, 10_000, 10_800), waiting={1: 1}),
        Step("mark", (10_500,), asks=[(11_000, 16)], sizes={2: -6}, waiting={1: 1, 2: 0}),
        Step("buy", (3, 10, 10_000)),
        Step("mark", (10_800,), sizes={1: 6, 3: 0}, waiting={1: 0}),
    ],
    "a take-profit buy fires when the mark falls to it": [
        *LONG_10,
        Step("buy", (3, 10, 9_000)),
        Step("sell", (3, 10, 9_100)),
        Step("trigger", (2, TP, 0, 10, 9_500, 9_200), waiting={2: 1}),
        Step("mark", (9_300,), sizes={2: -10}),
        Step("mark", (9_200,), asks=[], sizes={2: 0, 3: -10}, waiting={2: 0}),
    ],
    # a market order's price bounds its average fill (Lighter): 4 at 9,000 then 4 at 7,000
    # average 8,000; a fifth at 7,000 would take the average below the stop's price
    "a market stop-loss fills while its average stays within its price": [
        *LONG_10,
        Step("buy", (3, 4, 9_000)),
        Step("buy", (3, 6, 7_000)),
        Step("trigger", (1, SL, 1, 10, 8_000, 9_500)),
        Step("mark", (9_400,), bids=[(7_000, 2)], sizes={1: 2}, waiting={1: 0}),
    ],
    "a position-tied stop-loss (size 0) closes the position as it is when it fires": [
        *LONG_10,
        Step("trigger", (1, SL, 1, 0, 5_000, 9_000), waiting={1: 1}),
        Step("sell", (2, 5, 10_000)),
        Step("buy", (1, 5, 10_000), sizes={1: 15}),
        Step("buy", (3, 20, 8_900)),
        Step("mark", (9_000,), bids=[(8_900, 5)], sizes={1: 0, 3: 15}, waiting={1: 0}),
    ],
    "position-tied orders end when their position closes": [
        *LONG_10,
        Step("trigger", (1, SL, 1, 0, 5_000, 9_000)),
        Step("trigger", (1, TP_LIMIT, 1, 0, 11_000, 11_000)),
        Step("trigger", (1, SL, 1, 5, 5_000, 8_000), waiting={1: 3}),
        Step("buy", (2, 10, 10_000)),
        Step("sell", (1, 10, 10_000), sizes={1: 0, 2: 0}, waiting={1: 1}),
    ],
    "a stop-loss-limit rests at its price when it fires": [
        *LONG_10,
        Step("trigger", (1, SL_LIMIT, 1, 10, 9_400, 9_500)),
        Step("mark", (9_500,), asks=[(9_400, 10)], waiting={1: 1}),
        Step("buy", (3, 4, 9_400), asks=[(9_400, 6)], sizes={1: 6}, waiting={1: 1}),
        Step("buy", (3, 6, 9_400), asks=[], sizes={1: 0}, waiting={1: 0}),
    ],
    "a trigger armed beyond the mark fires at once": [
        *LONG_10,
        Step("buy", (3, 10, 9_900)),
        Step("trigger", (1, SL, 1, 10, 9_000, 10_500), bids=[], sizes={1: 0}, waiting={1: 0}),
    ],
    "stop-loss / take-profit orders are checked before they wait": [
        *LONG_10,
        Step("trigger", (1, SL, 1, 10, 9_000, 0), code=RC.INVALID_TRIGGER_PRICE),
        Step(
            "trigger", (1, SL, 1, 10, 9_000, 9_500), kw={"tif": GTT}, code=RC.INVALID_TIME_IN_FORCE
        ),
        Step("trigger", (1, SL, 1, 10, 9_000, 9_500), kw={"expiry": 0}, code=RC.INVALID_EXPIRY),
        Step("trigger", (1, SL, 1, 10, 9_000, 9_500), kw={"expiry": -1}, code=RC.INVALID_EXPIRY),
        Step("trigger", (1, SL, 1, 0, 9_000, 9_500), kw={"ro": 0}, code=RC.INVALID_SIZE),
        Step("trigger", (1, SL, 0, 5, 9_000, 9_500), code=RC.REDUCE_ONLY_INCREASES_POSITION),
        Step("trigger", (3, SL, 1, 0, 9_000, 9_500), code=RC.REDUCE_ONLY_INCREASES_POSITION),
        Step("trigger", (1, 7, 1, 10, 9_000, 9_500), code=RC.INVALID_ORDER_TYPE),
        Step("trigger", (1, SL, 1, 10, 0, 9_500), code=RC.INVALID_PRICE),
        Step("trigger", (1, SL_LIMIT, 1, 10, 9_000, 9_500), kw={"tif": IOC}, waiting={1: 1}),
    ],
    "client order indexes are unique over resting and waiting orders": [
        *LONG_10,
        Step("trigger", (1, SL, 1, 10, 9_000, 9_500), kw={"coi": 77}),
        Step("buy", (1, 1, 9_000), kw={"coi": 77}, code=RC.CLIENT_ORDER_INDEX_EXISTS),
        Step(
            "trigger",
            (1, TP, 1, 10, 9_000, 11_000),
            kw={"coi": 77},
            code=RC.CLIENT_ORDER_INDEX_EXISTS,
        ),
        Step("buy", (1, 1, 9_000), kw={"coi": 78}),
        Step(
            "trigger",
            (1, TP, 1, 10, 9_000, 11_000),
            kw={"coi": 78},
            code=RC.CLIENT_ORDER_INDEX_EXISTS,
        ),
    ],
    "a waiting order cancels by client or exchange index, and with cancel-all": [
        *LONG_10,
        Step("trigger", (1, SL, 1, 10, 9_000, 9_500), kw={"coi": 5}),
        Step("trigger", (1, TP, 1, 10, 9_000, 11_000)),
        Step("cancel", (1, 5), waiting={1: 1}),
        Step("cancel", (1, 5), code=RC.NOT_ACTIVE_LIMIT_ORDER),
        Step("buy", (1, 1, 9_000)),
        Step("cancel_all", (1,), bids=[], waiting={1: 0}),
    ],
    "ModifyOrder moves a waiting stop-loss: its new trigger is the one that fires": [
        *LONG_10,
        Step("buy", (3, 10, 8_500)),
        Step("trigger", (1, SL, 1, 10, 8_000, 9_500), kw={"coi": 9}),
        Step("modify", (1, 9, 10, 8_000), kw={"trigger": 9_000}, waiting={1: 1}),
        Step("mark", (9_400,), sizes={1: 10}, waiting={1: 1}),
        Step("mark", (9_000,), sizes={1: 0}, waiting={1: 0}),
    ],
    "ModifyOrder of a waiting order beyond the mark fires it; a TWAP is not modified": [
        *LONG_10,
        Step("buy", (3, 10, 9_900)),
        Step("trigger", (1, SL, 1, 0, 8_000, 9_500), kw={"coi": 9}),
        Step("modify", (1, 9, 4, 8_000), kw={"trigger": 10_500}, sizes={1: 6}, waiting={1: 0}),
        Step("twap", (1, 1, 5, 9_000, 5), kw={"coi": 10}),
        Step("modify", (1, 10, 5, 9_500), code=RC.NOT_ACTIVE_LIMIT_ORDER, waiting={1: 1}),
        Step("modify", (1, 11, 5, 9_500), code=RC.NOT_ACTIVE_LIMIT_ORDER),
    ],
    "a waiting order expires after its expiry, at the first command then": [
        *LONG_10,
        Step("trigger", (1, SL, 1, 10, 9_000, 9_500), kw={"expiry": NOW + 10_000}),
        Step("tick", (10_000,), waiting={1: 1}),
        Step("tick", (1,), waiting={1: 0}),
    ],
    "a fired order that fails the initial-margin check ends without trading": [
        Step("sell", (3, 100, 10_000)),
        Step("trigger", (1, SL, 0, 20_000_000, 11_000, 10_500), kw={"ro": 0}, waiting={1: 1}),
        Step("mark", (10_500,), asks=[(10_000, 100)], sizes={1: 0}, waiting={1: 0}),
    ],
    "an opening stop buy (not reduce-only) takes margin only when it fires": [
        Step("sell", (3, 100, 10_000)),
        Step("trigger", (1, SL, 0, 50, 11_000, 10_500), kw={"ro": 0}, sizes={1: 0}),
        Step("mark", (10_500,), asks=[(10_000, 50)], sizes={1: 50}, waiting={1: 0}),
    ],
    "OCO: the take-profit that fires cancels the stop-loss": [
        *LONG_10,
        Step(
            "grouped",
            (
                1,
                OCO,
                info(1, 10, 11_000, TP_LIMIT, ro=1, trigger=11_000, expiry=LATER),
                info(1, 10, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            waiting={1: 2},
        ),
        Step("mark", (11_000,), asks=[(11_000, 10)], waiting={1: 1}),
        Step("buy", (3, 10, 11_000), asks=[], sizes={1: 0}, waiting={1: 0}),
        Step("mark", (9_000,), sizes={1: 0}),
    ],
    "OCO: cancelling one cancels the other": [
        *LONG_10,
        Step(
            "grouped",
            (
                1,
                OCO,
                info(1, 0, 11_000, TP, ro=1, trigger=11_000, expiry=LATER),
                info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
        ),
        Step("cancel", (1, FIRST + 2), waiting={1: 0}),
    ],
    "OCO is checked as lighter-go checks it": [
        *LONG_10,
        Step(
            "grouped",
            (
                1,
                OCO,
                info(1, 10, 11_000, TP, ro=1, trigger=11_000, expiry=LATER),
                info(1, 5, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            code=RC.INVALID_GROUP_BASE_AMOUNT,
        ),
        Step(
            "grouped",
            (
                1,
                OCO,
                info(1, 10, 11_000, TP, ro=1, trigger=11_000, expiry=LATER),
                info(0, 10, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            code=RC.INVALID_GROUP_SIDE,
        ),
        Step(
            "grouped",
            (
                1,
                OCO,
                info(1, 10, 11_000, TP, ro=0, trigger=11_000, expiry=LATER),
                info(1, 10, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            code=RC.INVALID_REDUCE_ONLY,
        ),
        Step(
            "grouped",
            (
                1,
                OCO,
                info(1, 10, 11_000, TP, ro=1, trigger=11_000, expiry=LATER),
                info(1, 10, 8_000, TP, ro=1, trigger=9_000, expiry=LATER),
            ),
            code=RC.INVALID_ORDER_TYPE,
        ),
        Step(
            "grouped",
            (
                1,
                OCO,
                info(1, 10, 11_000, TP, ro=1, trigger=11_000, expiry=LATER),
                info(1, 10, 8_000, SL, ro=1, trigger=9_000, expiry=LATER, m=1),
            ),
            code=RC.GROUP_MARKET_MISMATCH,
        ),
        Step(
            "grouped",
            (
                1,
                OCO,
                info(1, 10, 11_000, TP, ro=1, trigger=11_000, expiry=LATER, coi=9),
                info(1, 10, 8_000, SL, ro=1, trigger=9_000, expiry=LATER, coi=9),
            ),
            code=RC.DUPLICATE_CLIENT_ORDER_INDEX,
        ),
        Step(
            "grouped",
            (
                1,
                9,
                info(1, 10, 11_000, TP, ro=1, trigger=11_000, expiry=LATER),
                info(1, 10, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            code=RC.INVALID_GROUPING_TYPE,
        ),
        Step(
            "grouped",
            (1, OCO, info(1, 10, 11_000, TP, ro=1, trigger=11_000, expiry=LATER)),
            code=RC.INVALID_GROUP_SIZE,
            waiting={1: 0},
        ),
    ],
    "OTO: the child waits for the entry's first fill, then for the mark (and its sale into the "
    "account's own entry expires the entry: self-trade prevention)": [
        Step(
            "grouped",
            (
                1,
                OTO,
                info(0, 10, 9_900, expiry=LATER),
                info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            bids=[(9_900, 10)],
            waiting={1: 2},
        ),
        Step("sell", (2, 4, 9_900), bids=[(9_900, 6)], sizes={1: 4}, waiting={1: 2}),
        Step("buy", (3, 20, 8_500)),
        Step("mark", (9_000,), bids=[(8_500, 16)], sizes={1: 0}, waiting={1: 0}),
    ],
    "OTO: an entry cancelled before any fill takes its child with it": [
        Step(
            "grouped",
            (
                1,
                OTO,
                info(0, 10, 9_900, expiry=LATER),
                info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
        ),
        Step("cancel", (1, FIRST), bids=[], waiting={1: 0}),
    ],
    "OTO: an IOC entry that does not fill places nothing that waits": [
        Step(
            "grouped",
            (
                1,
                OTO,
                info(0, 10, 9_900, tif=IOC),
                info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            bids=[],
            waiting={1: 0},
        ),
    ],
    "OTOCO: a market entry arms both children; the take-profit's fill cancels the stop-loss": [
        Step("sell", (3, 10, 10_000)),
        Step(
            "grouped",
            (
                1,
                OTOCO,
                info(0, 10, 10_500, MARKET),
                info(1, 0, 11_000, TP_LIMIT, ro=1, trigger=11_000, expiry=LATER),
                info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            asks=[],
            sizes={1: 10},
            waiting={1: 2},
        ),
        Step("mark", (11_000,), asks=[(11_000, 10)], waiting={1: 1}),
        Step("buy", (2, 10, 11_000), asks=[], sizes={1: 0, 2: 10}, waiting={1: 0}),
    ],
    "grouped orders are all or nothing: a refused entry places no child": [
        Step(
            "grouped",
            (
                1,
                OTOCO,
                info(0, 20_000_000, 10_000, expiry=LATER),
                info(1, 0, 11_000, TP, ro=1, trigger=11_000, expiry=LATER),
                info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            code=RC.NOT_ENOUGH_MARGIN,
            bids=[],
            waiting={1: 0},
        ),
        Step(
            "grouped",
            (
                1,
                OTOCO,
                info(0, 10, 10_000, expiry=LATER),
                info(1, 0, 11_000, TP, ro=1, trigger=11_000, expiry=LATER),
                info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER + 1),
            ),
            code=RC.INVALID_EXPIRY,
            bids=[],
        ),
        Step(
            "grouped",
            (
                1,
                OTOCO,
                info(0, 10, 10_000, expiry=LATER),
                info(0, 0, 11_000, TP, ro=1, trigger=11_000, expiry=LATER),
                info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            code=RC.INVALID_GROUP_SIDE,
            bids=[],
        ),
        Step(
            "grouped",
            (
                1,
                OTO,
                info(0, 10, 10_000, expiry=LATER),
                info(1, 3, 8_000, SL, ro=1, trigger=9_000, expiry=LATER),
            ),
            code=RC.INVALID_GROUP_BASE_AMOUNT,
            bids=[],
            waiting={1: 0},
        ),
    ],
    "a TWAP slices every 30 seconds on schedule and ends filled": [
        Step("sell", (3, 100, 10_000)),
        Step("twap", (1, 0, 10, 10_100, 5), waiting={1: 1}),
        Step("tick", (29_999,), sizes={1: 0}),
        Step("tick", (1,), sizes={1: 1}),
        Step("tick", (30_000,), sizes={1: 2}),
        Step("tick", (60_000,), sizes={1: 4}),
        Step("tick", (150_000,), sizes={1: 7}, waiting={1: 1}),
        Step("tick", (30_000,), sizes={1: 10}, asks=[(10_000, 90)], waiting={1: 0}),
    ],
    "a TWAP catching up on a late schedule takes at most three slices at once": [
        Step("sell", (3, 100, 10_000)),
        Step("twap", (1, 0, 10, 10_100, 5)),
        Step("tick", (300_000,), sizes={1: 3}, waiting={1: 0}),
    ],
    "a TWAP never fills worse than its price and ends expired with size left": [
        Step("sell", (3, 3, 10_000)),
        Step("sell", (3, 100, 10_200)),
        Step("twap", (1, 0, 10, 10_100, 5)),
        Step("tick", (150_000,), sizes={1: 3}),
        Step("tick", (150_000,), sizes={1: 3}, asks=[(10_200, 100)], waiting={1: 0}),
    ],
    "a TWAP is checked before it runs and cancels like any order": [
        Step("twap", (1, 0, 10, 10_100, 4), code=RC.INVALID_EXPIRY),
        Step("twap", (1, 0, 10, 10_100, 24 * 60 + 1), code=RC.INVALID_EXPIRY),
        Step("twap", (1, 0, 0, 10_100, 5), code=RC.INVALID_SIZE),
        Step(
            "order",
            (1, 0, 10, 10_100),
            kw={"otype": TWAP, "tif": IOC, "expiry": NOW + 5 * MIN},
            code=RC.INVALID_TIME_IN_FORCE,
        ),
        Step(
            "order",
            (1, 0, 10, 10_100),
            kw={"otype": TWAP, "tif": GTT, "expiry": NOW + 5 * MIN, "trigger": 9_000},
            code=RC.INVALID_TRIGGER_PRICE,
        ),
        Step("twap", (1, 0, 10, 10_100, 5), waiting={1: 1}),
        Step("cancel", (1, FIRST), waiting={1: 0}),
        Step("tick", (60_000,), sizes={1: 0}),
    ],
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_conditional_scenario(name: str) -> None:
    play(Desk(), SCENARIOS[name])


def _long(d: Desk, size: int = 10) -> None:
    assert d.sell(2, size, 10_000) == OK
    assert d.buy(1, size, 10_000) == OK


def test_a_fired_stop_loss_executes_under_its_own_order_index_and_reports_its_trigger() -> None:
    d = Desk()
    _long(d)
    assert d.buy(3, 10, 9_000) == OK
    assert d.trigger(1, SL, 1, 10, 8_000, 9_500, coi=12) == OK
    (sl,) = d.conds(1)
    assert (sl.status, sl.trigger_status, sl.trigger_price, sl.client_order_index) == (
        1,  # PENDING
        2,  # MARK_PRICE
        9_500,
        12,
    )
    assert d.mark(9_500) == OK
    assert d.statuses() == {sl.order_index: ("IN_PROGRESS", "READY")}
    (fired,) = d.of("ConditionalOrderUpdated")
    assert fired.trigger_time == d.now
    assert d.order_statuses()[sl.order_index] == "FILLED"
    (trade,) = d.of("TradeExecuted")
    assert (trade.taker_order_index, trade.price, trade.size) == (sl.order_index, 9_000, 10)


def test_oco_the_fired_order_cancels_its_sibling_as_canceled_oco() -> None:
    d = Desk()
    _long(d)
    tp = info(1, 0, 11_000, TP, ro=1, trigger=11_000, expiry=LATER)
    sl = info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER)
    assert d.grouped(1, OCO, tp, sl) == OK
    a, b = d.conds(1)
    assert (a.to_cancel_order_index_0, b.to_cancel_order_index_0) == (b.order_index, a.order_index)
    assert d.buy(3, 10, 8_500) == OK
    assert d.mark(9_000) == OK
    assert d.statuses() == {
        b.order_index: ("IN_PROGRESS", "READY"),
        a.order_index: ("CANCELED_OCO", "MARK_PRICE"),
    }
    assert d.size(1) == 0


def test_otoco_children_wait_with_parent_order_status_and_lapse_with_an_unfilled_entry() -> None:
    d = Desk()
    entry = info(0, 10, 9_900, expiry=LATER)
    tp = info(1, 0, 11_000, TP, ro=1, trigger=11_000, expiry=LATER)
    sl = info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER)
    assert d.grouped(1, OTOCO, entry, tp, sl) == OK
    e, k1, k2 = d.conds(1)
    assert (e.to_trigger_order_index_0, e.to_trigger_order_index_1) == (
        k1.order_index,
        k2.order_index,
    )
    assert (k1.parent_order_index, k2.parent_order_index) == (e.order_index, e.order_index)
    assert (k1.status, k1.trigger_status) == (1, 4)  # PENDING, PARENT_ORDER
    assert d.order_statuses() == {e.order_index: "ACTIVE_LIMIT"}
    assert d.cancel(1, e.order_index) == OK
    assert d.statuses() == {
        k1.order_index: ("CANCELED_CHILD", "PARENT_ORDER"),
        k2.order_index: ("CANCELED_CHILD", "PARENT_ORDER"),
    }
    assert d.conds(1) == []


def test_a_fired_order_refused_for_margin_ends_canceled_margin_not_allowed() -> None:
    d = Desk()
    assert d.sell(3, 100, 10_000) == OK
    assert d.trigger(1, SL, 0, 20_000_000, 11_000, 10_500, ro=0) == OK
    (c,) = d.conds(1)
    assert d.mark(10_500) == OK
    assert d.statuses() == {c.order_index: ("CANCELED_MARGIN_NOT_ALLOWED", "READY")}
    assert d.order_statuses() == {}


def test_a_twap_reports_its_schedule_and_each_slice_is_a_market_order_of_its_own() -> None:
    d = Desk()
    assert d.sell(3, 100, 10_000) == OK
    assert d.twap(1, 0, 10, 10_100, 5) == OK
    (t,) = d.conds(1)
    assert (t.status, t.trigger_status, t.next_slice_at, t.created_at) == (
        2,
        3,
        d.now + 30_000,
        d.now,
    )
    assert d.tick(30_000) == OK
    (after,) = d.of("ConditionalOrderUpdated")
    assert after.remaining_base_amount == 9 and after.next_slice_at == d.now + 30_000
    slice_orders = d.of("OrderUpdated")
    sub = [o for o in slice_orders if o.order_index == after.slice_order_index]
    assert [(o.order_type, o.time_in_force, o.initial_base_amount) for o in sub] == [
        (MARKET, IOC, 1)
    ]
    assert d.cancel(1, t.order_index) == OK
    assert d.statuses() == {t.order_index: ("CANCELED", "TWAP")}


def test_a_liquidation_cancels_the_accounts_waiting_orders() -> None:
    d = Desk(collateral=0)
    for a in (1, 2, 3):
        assert d.deposit(a, 12_000_000 if a == 1 else 10**12) == OK
    assert d.sell(2, 100, 10_000) == OK
    assert d.buy(1, 100, 10_000) == OK  # $100 at 10%: 10 of its 12 USDC
    assert d.trigger(1, TP, 1, 0, 12_000, 12_000) == OK
    assert d.buy(3, 200, 8_000) == OK
    assert d.mark(8_500) == OK
    assert d.size(1) == 0
    (c,) = [e for e in d.of("ConditionalOrderUpdated")]
    assert OrderStatus(c.status).name == "CANCELED_LIQUIDATION"


def test_a_grouped_layout_with_a_value_past_its_order_count_places_nothing() -> None:
    """The fixed layout's unused slots are 0 (Lighter's ``Orders`` list has no such slots): a
    value in one is 20001 ``INVALID_PARAM``; the same orders with clean slots are placed."""
    d = Desk()
    _long(d)
    tp = info(1, 0, 11_000, TP, ro=1, trigger=11_000, expiry=LATER)
    sl = info(1, 0, 8_000, SL, ro=1, trigger=9_000, expiry=LATER)
    slots = list(grouped_slots([tp, sl]))
    for junk_at in (len(slots) - 1, 2 * len(tp)):  # the third slot's last and first field
        dirty = slots.copy()
        dirty[junk_at] = 1
        cmd = CreateGroupedOrders(
            1,
            0,
            OCO,
            2,
            *dirty,
            d.now + 60_000,
            d.nonce(1),
            SIG,  # type: ignore[call-arg]
        )
        assert d.run(cmd) == RC.INVALID_PARAM
        assert d.conds(1) == []
    assert d.grouped(1, OCO, tp, sl) == OK
    assert [c.order_type for c in d.conds(1)] == [TP, SL]
