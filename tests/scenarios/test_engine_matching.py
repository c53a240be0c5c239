"""Order-book scenarios: price-time matching, the self-trade modes, post-only, IOC, a market
market price protection, modify priority, cancels (in one market too) and
client order indexes. One row = one command and what it leaves."""

from __future__ import annotations

import pytest
from kit.engine import IOC, MARKET, OK, POST_ONLY, Desk, Step, market, play

from raydex.codecs import ResultCode as RC

POST_ONLY_WOULD_CROSS = RC.POST_ONLY_WOULD_CROSS
NOT_ACTIVE = RC.NOT_ACTIVE_LIMIT_ORDER
COI_EXISTS = RC.CLIENT_ORDER_INDEX_EXISTS
FAT_FINGER = RC.FAT_FINGER_PRICE
UNSUPPORTED = RC.UNSUPPORTED_TX_TYPE
FIRST = 1 << 48

SCENARIOS: dict[str, list[Step]] = {
    "resting orders aggregate per price level, best first": [
        Step("buy", (1, 5, 9_900), bids=[(9_900, 5)], asks=[]),
        Step("buy", (2, 3, 9_900), bids=[(9_900, 8)]),
        Step("buy", (2, 4, 9_950), bids=[(9_950, 4), (9_900, 8)]),
        Step("sell", (3, 2, 10_100), asks=[(10_100, 2)]),
        Step("sell", (3, 2, 10_050), asks=[(10_050, 2), (10_100, 2)]),
    ],
    "a crossing order fills at the makers' prices in price-time order and rests the rest": [
        Step("sell", (1, 2, 10_000)),
        Step("sell", (2, 2, 10_000)),
        Step("sell", (1, 2, 10_010)),
        Step("buy", (3, 5, 10_010), asks=[(10_010, 1)], bids=[], sizes={1: -3, 2: -2, 3: 5}),
        Step("buy", (3, 3, 10_020), asks=[], bids=[(10_020, 2)], sizes={1: -4, 3: 6}),
    ],
    "a limit order does not trade through its price": [
        Step("sell", (1, 2, 10_050)),
        Step("buy", (2, 2, 10_000), asks=[(10_050, 2)], bids=[(10_000, 2)], sizes={2: 0}),
    ],
    "self-trade prevention cancels the resting maker and keeps matching": [
        Step("sell", (1, 2, 10_000)),
        Step("sell", (2, 2, 10_010)),
        Step("buy", (1, 3, 10_010), asks=[], bids=[(10_010, 1)], sizes={1: 2, 2: -2}),
    ],
    "post-only is rejected when it would cross and rests when it would not": [
        Step("sell", (1, 2, 10_000)),
        Step("buy", (2, 1, 10_000), kw={"tif": POST_ONLY}, code=POST_ONLY_WOULD_CROSS, bids=[]),
        Step("buy", (2, 1, 9_990), kw={"tif": POST_ONLY}, bids=[(9_990, 1)], asks=[(10_000, 2)]),
    ],
    "IOC takes what crosses and cancels the remainder": [
        Step("sell", (1, 2, 10_000)),
        Step("buy", (2, 5, 10_000), kw={"tif": IOC}, bids=[], asks=[], sizes={2: 2}),
        Step("buy", (2, 5, 10_000), kw={"tif": IOC}, bids=[], sizes={2: 2}),
    ],
    "a market order's price limits its average fill: past it, only the lots that keep it": [
        Step("sell", (1, 2, 10_000)),
        Step("sell", (1, 2, 10_300)),
        # 2 at 10,000 leave 200 under the limit 10,100: 1 lot at 10,300 (200 over) keeps the
        # average at 10,100 exactly, a second would not
        Step(
            "buy",
            (2, 4, 10_100),
            kw={"tif": IOC, "otype": MARKET},
            asks=[(10_300, 1)],
            bids=[],
            sizes={2: 3},
        ),
        Step("sell", (1, 1, 10_250)),
        # nothing under the limit yet: a level beyond it takes nothing
        Step(
            "buy",
            (2, 1, 10_200),
            kw={"tif": IOC, "otype": MARKET},
            asks=[(10_250, 1), (10_300, 1)],
            sizes={2: 3},
        ),
        Step("buy", (3, 1, 9_999), kw={"otype": MARKET, "tif": IOC}, sizes={3: 0}),
        Step("buy", (3, 2, 4_294_967_295), kw={"tif": IOC, "otype": MARKET}, asks=[], sizes={3: 2}),
    ],
    "a sell market order's price is the floor of its average fill": [
        Step("buy", (1, 2, 10_000)),
        Step("buy", (1, 2, 9_700)),
        Step(
            "sell",
            (2, 4, 9_900),
            kw={"tif": IOC, "otype": MARKET},
            bids=[(9_700, 1)],
            asks=[],
            sizes={2: -3},
        ),
        Step("sell", (3, 1, 1), kw={"tif": IOC, "otype": MARKET}, bids=[], sizes={3: -1}),
    ],
    "a market order must be IOC": [
        Step("buy", (2, 4, 10_100), kw={"tif": 1, "otype": MARKET}, code=RC.INVALID_TIME_IN_FORCE),
    ],
    "a limit order more aggressive than the band around the mark is rejected, a passive one not": [
        Step("buy", (2, 1, 15_001), code=FAT_FINGER),
        Step("sell", (2, 1, 4_999), code=FAT_FINGER),
        Step("sell", (2, 1, 5_000), asks=[(5_000, 1)]),
        Step("cancel_all", (2,), asks=[]),
        Step("buy", (2, 1, 15_000), bids=[(15_000, 1)]),
        Step("cancel_all", (2,), bids=[]),
        Step("buy", (2, 1, 4_999), bids=[(4_999, 1)]),
        Step("sell", (2, 1, 15_001), asks=[(15_001, 1)]),
        Step("sell", (3, 1, 400_000), asks=[(15_001, 1), (400_000, 1)]),
        Step("modify", (2, FIRST + 2, 1, 15_001), code=FAT_FINGER, bids=[(4_999, 1)]),
    ],
    "client order indexes are unique among an account's open orders": [
        Step("buy", (1, 1, 9_900), kw={"coi": 7}),
        Step("buy", (1, 1, 9_800), kw={"coi": 7}, code=COI_EXISTS, bids=[(9_900, 1)]),
        Step("buy", (2, 1, 9_800), kw={"coi": 7}, bids=[(9_900, 1), (9_800, 1)]),
        Step("cancel", (1, 7), bids=[(9_800, 1)]),
        Step("buy", (1, 1, 9_700), kw={"coi": 7}, bids=[(9_800, 1), (9_700, 1)]),
    ],
    "cancel by client or exchange index; unknown ones are not active limit orders": [
        Step("buy", (1, 1, 9_900), kw={"coi": 5}),
        Step("buy", (1, 2, 9_800)),
        Step("cancel", (1, 5), bids=[(9_800, 2)]),
        Step("cancel", (1, 5), code=NOT_ACTIVE),
        Step("cancel", (2, FIRST + 1), code=NOT_ACTIVE, bids=[(9_800, 2)]),
        Step("cancel", (1, FIRST + 1), bids=[]),
    ],
    "cancel-all removes every open order; scheduled cancel-all is unsupported": [
        Step("buy", (1, 1, 9_900)),
        Step("sell", (1, 1, 10_100)),
        Step("buy", (2, 1, 9_800)),
        Step("cancel_all", (1,), bids=[(9_800, 1)], asks=[]),
        Step("cancel_all", (1, 1), code=UNSUPPORTED),
    ],
    "self-trade ExpireMaker (the default) cancels the resting order and keeps matching": [
        Step("sell", (1, 2, 10_000)),
        Step("sell", (2, 2, 10_010)),
        Step("buy", (1, 3, 10_010), kw={"stb": 0}, asks=[], bids=[(10_010, 1)], sizes={1: 2}),
    ],
    "self-trade ExpireTaker cancels the incoming order and leaves the resting one": [
        Step("sell", (2, 1, 9_990)),
        Step("sell", (1, 2, 10_000)),
        Step("buy", (1, 3, 10_010), kw={"stb": 1}, asks=[(10_000, 2)], bids=[], sizes={1: 1}),
    ],
    "self-trade CancelBoth cancels both": [
        Step("sell", (1, 2, 10_000)),
        Step("sell", (2, 2, 10_010)),
        Step("buy", (1, 3, 10_010), kw={"stb": 2}, asks=[(10_010, 2)], bids=[], sizes={1: 0}),
    ],
    "self-trade Reduce shrinks both by the overlap; the taker goes on against others": [
        Step("sell", (1, 2, 10_000)),
        Step("sell", (2, 2, 10_010)),
        Step("buy", (1, 3, 10_010), kw={"stb": 3}, asks=[(10_010, 1)], bids=[], sizes={1: 1}),
        Step("sell", (1, 5, 10_020)),
        Step("buy", (1, 2, 10_020), kw={"stb": 3}, asks=[(10_020, 4)], bids=[], sizes={1: 2}),
    ],
    "cancel-all with a market cancels that market's orders only": [
        Step("buy", (1, 1, 9_900)),
        Step(
            "buy",
            (
                1,
                1,
                9_800,
            ),
            kw={"m": 1},
        ),
        Step("buy", (2, 1, 9_700)),
        Step("cancel_all", (1,), kw={"market": 0}, bids=[(9_700, 1)]),
        Step("cancel_all", (1,), kw={"market": 7}, code=RC.MARKET_NOT_FOUND),
    ],
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_matching_scenario(name: str) -> None:
    play(Desk(markets=(market(0), market(1))), SCENARIOS[name])


def test_modify_keeping_price_and_shrinking_size_keeps_time_priority() -> None:
    d = Desk()
    assert d.buy(1, 3, 9_900) == OK
    first = d.last_order_index()
    assert d.buy(2, 3, 9_900) == OK
    assert d.modify(1, first, 2, 9_900) == OK
    assert d.bids() == [(9_900, 5)]
    assert d.sell(3, 2, 9_900) == OK
    assert (d.size(1), d.size(2)) == (2, 0)


def test_modify_growing_size_loses_time_priority() -> None:
    d = Desk()
    assert d.buy(1, 3, 9_900) == OK
    first = d.last_order_index()
    assert d.buy(2, 3, 9_900) == OK
    assert d.modify(1, first, 4, 9_900) == OK
    assert d.sell(3, 3, 9_900) == OK
    assert (d.size(1), d.size(2)) == (0, 3)


def test_modify_to_a_crossing_price_trades_and_rests_the_rest() -> None:
    d = Desk()
    assert d.sell(1, 2, 10_000) == OK
    assert d.buy(2, 3, 9_900) == OK
    assert d.modify(2, d.last_order_index(), 3, 10_000) == OK
    assert d.asks() == [] and d.bids() == [(10_000, 1)]
    assert d.size(2) == 2


def test_modify_below_the_filled_amount_cancels_the_order() -> None:
    d = Desk()
    assert d.buy(1, 5, 9_900) == OK
    idx = d.last_order_index()
    assert d.sell(2, 3, 9_900) == OK
    assert d.modify(1, idx, 3, 9_900) == OK
    assert d.bids() == []
    assert d.modify(1, idx, 3, 9_900) == NOT_ACTIVE


def test_each_touched_level_is_reported_once_with_its_final_size() -> None:
    d = Desk()
    for _ in range(3):
        assert d.sell(1, 1, 10_000) == OK
    assert d.buy(2, 2, 10_000) == OK
    levels = d.of("LevelChanged")
    assert [(e.is_ask, e.price, e.size) for e in levels] == [(1, 10_000, 1)]
    assert len(d.of("TradeExecuted")) == 2


def test_fees_go_to_the_fee_pool_and_cash_is_conserved() -> None:
    from kit.engine import market

    d = Desk(markets=(market(maker_fee=100, taker_fee=500),))
    assert d.sell(1, 10, 10_000) == OK
    before = (d.cash(1), d.cash(2))
    assert d.buy(2, 10, 10_000) == OK
    notional = 10 * 10_000 * 100
    assert d.cash(1) == before[0] - notional * 100 // 1_000_000
    assert d.cash(2) == before[1] - notional * 500 // 1_000_000
    assert d.eng.fee_pool == notional * 600 // 1_000_000
    trade = d.of("TradeExecuted")[0]
    assert (trade.taker_fee, trade.maker_fee) == (notional * 500 // 10**6, notional * 100 // 10**6)


def test_client_order_indexes_resolve_with_few_orders_and_with_many() -> None:
    """An account with a few resting orders finds them by client index on its order list; one
    with many keeps a map (past 8, ``COI_SCAN``, dropped again at half). Lookups, duplicate
    checks and cancels by client index must behave the same on both sides of the switch (the
    Desk validates the map against the orders after every command)."""
    many = 16
    d = Desk(accounts=(1, 2))
    acct = d.eng.state.accounts[1]
    assert d.buy(1, 1, 9_000) == OK  # no client index: never found as client index 0
    assert acct.coi is None
    for coi in range(1, many + 1):
        assert d.buy(1, 1, 9_000 + coi, coi=coi) == OK
    assert acct.coi is not None
    assert d.buy(1, 1, 8_000, coi=3) == RC.CLIENT_ORDER_INDEX_EXISTS
    assert d.cancel(1, 0) == RC.NOT_ACTIVE_LIMIT_ORDER
    for coi in range(many, 2, -1):  # down to three orders: the map is dropped
        assert d.cancel(1, coi) == OK
        assert d.cancel(1, coi) == RC.NOT_ACTIVE_LIMIT_ORDER
    assert acct.coi is None and acct.order_count == 3
    assert d.buy(1, 1, 8_000, coi=2) == RC.CLIENT_ORDER_INDEX_EXISTS
    assert d.buy(2, 1, 8_000, coi=2) == OK  # another account's index is its own
    assert d.cancel(1, 0) == RC.NOT_ACTIVE_LIMIT_ORDER
    assert d.cancel(1, 2) == OK
    assert d.cancel(1, 2) == RC.NOT_ACTIVE_LIMIT_ORDER
    assert d.buy(1, 1, 8_000, coi=2) == OK
    assert d.modify(1, 2, 3, 8_100) == OK  # modify by client index, re-entered: still found
    assert d.cancel(1, 2) == OK
    assert [p for p, _ in d.bids()] == [9_001, 9_000, 8_000]


def test_order_expiries_up_to_the_i64_limit_rest_and_past_it_are_refused() -> None:
    # An explicit expiry is checked against 2**63 - 1 only past 2**62 - 1 (compiled, the
    # larger constant is a boxed comparison): both sides of both bounds.
    d = Desk()
    for expiry in (2**62 - 1, 2**62, 2**63 - 1):
        assert d.buy(1, 1, 9_000, expiry=expiry) == OK
    for expiry in (2**63, 2**64):
        assert d.buy(1, 1, 9_000, expiry=expiry) == RC.INVALID_EXPIRY
    assert d.bids() == [(9_000, 3)]
