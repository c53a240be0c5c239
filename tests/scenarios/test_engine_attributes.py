"""Lighter's ``L2TxAttributes`` as the engine executes them: the self-trade modes (6, 7) with the
orders' final statuses, the versioned modify (8) and cancel-all in one market (5); each state
change in the events, the snapshot records and the state hash."""

from __future__ import annotations

from typing import Any

import pytest
from kit.engine import KEY, NOW, OK, SIG, Desk, market

from raydex.codecs import (
    CreateSubAccount,
    OrderStatus,
    RegisterApiKey,
    ResultCode,
    SelfTradeBehavior,
    SelfTradeEquality,
)
from raydex.engine import Engine

SELF = int(OrderStatus.CANCELED_SELF_TRADE)
ACTIVE = int(OrderStatus.ACTIVE_LIMIT)
FILLED = int(OrderStatus.FILLED)
EXPIRE_MAKER, EXPIRE_TAKER, CANCEL_BOTH, REDUCE = (int(b) for b in SelfTradeBehavior)
MASTER = int(SelfTradeEquality.MASTER_ACCOUNT_INDEX)


def _orders(d: Desk) -> dict[int, tuple[int, int, int]]:
    """order index -> (status, initial, remaining) of the last command's OrderUpdated events."""
    return {
        e.order_index: (e.status, e.initial_base_amount, e.remaining_base_amount)
        for e in d.of("OrderUpdated")
    }


def _traded(d: Desk) -> list[tuple[int, int, int]]:
    return [(e.taker_account_index, e.maker_account_index, e.size) for e in d.of("TradeExecuted")]


def _resting(d: Desk, account: int) -> dict[int, Any]:
    return {o.order_index: o for o in d.eng.open_orders(account)}


@pytest.mark.parametrize(
    ("behavior", "maker", "taker", "trades", "asks"),
    [
        # the own ask at 10,000 (3 lots), account 2's at 10,010 (2 lots); the buy takes 4
        (EXPIRE_MAKER, (SELF, 3, 3), (ACTIVE, 4, 2), [(1, 2, 2)], []),
        (EXPIRE_TAKER, None, (SELF, 4, 4), [], [(10_000, 3), (10_010, 2)]),
        (CANCEL_BOTH, (SELF, 3, 3), (SELF, 4, 4), [], [(10_010, 2)]),
        # Reduce: the taker's 4 meet the own 3; the 3 are used up, the taker goes on with 1
        (REDUCE, (SELF, 3, 3), (FILLED, 1, 0), [(1, 2, 1)], [(10_010, 1)]),
    ],
)
def test_each_self_trade_behavior_ends_the_orders_as_lighter(
    behavior: int,
    maker: tuple[int, int, int] | None,
    taker: tuple[int, int, int],
    trades: list[tuple[int, int, int]],
    asks: list[tuple[int, int]],
) -> None:
    d = Desk()
    assert d.sell(1, 3, 10_000) == OK
    own = d.last_order_index()
    assert d.sell(2, 2, 10_010) == OK
    before = d.cash(1)
    assert d.buy(1, 4, 10_010, stb=behavior) == OK
    taker_index = max(_orders(d))
    got = _orders(d)
    assert got[taker_index] == taker
    assert got.get(own) == maker
    assert _traded(d) == trades  # never a trade between the account and itself
    assert d.asks() == asks
    assert d.size(1) == sum(q for _, _, q in trades)
    if not trades:
        assert d.cash(1) == before


def test_reduce_leaves_a_partly_used_maker_smaller_and_its_fills_counted() -> None:
    d = Desk()
    assert d.sell(1, 5, 10_000) == OK
    own = d.last_order_index()
    assert d.buy(2, 1, 10_000) == OK  # one lot of it filled
    assert d.buy(1, 2, 10_000, stb=REDUCE) == OK
    got = _orders(d)
    assert got[own] == (ACTIVE, 3, 2)  # size 5 -> 3, remaining 4 -> 2: the 1 filled stays filled
    assert got[max(got)] == (SELF, 2, 2)  # the taker was used up by the overlap
    assert d.asks() == [(10_000, 2)]
    rec = _resting(d, 1)[own]
    assert (rec.initial_base_amount, rec.remaining_base_amount) == (3, 2)


def test_a_modify_re_entering_the_book_matches_with_its_own_self_trade_mode() -> None:
    d = Desk()
    assert d.sell(1, 2, 10_000) == OK
    own_ask = d.last_order_index()
    assert d.buy(1, 2, 9_900) == OK
    bid = d.last_order_index()
    assert d.modify(1, bid, 2, 10_000, stb=EXPIRE_TAKER) == OK
    assert _orders(d) == {bid: (SELF, 2, 2)}
    assert d.asks() == [(10_000, 2)] and d.bids() == []
    assert set(_resting(d, 1)) == {own_ask}


def test_master_account_equality_treats_accounts_under_one_master_as_one() -> None:
    """Master 2 and its sub-account (CreateSubAccount, tx 9): with MasterAccountIndex they do
    not trade with each other, with AccountIndex (the default) they do."""
    d = Desk()
    assert d.run(CreateSubAccount(2, 0, NOW + 60_000, d.nonce(2), SIG)) == OK
    (ev,) = d.of("SubAccountCreated")
    sub = int(ev.account_index)
    assert d.eng.master_index(sub) == 2
    assert d.run(RegisterApiKey(sub, 0, KEY)) == OK
    assert d.deposit(sub, d.collateral) == OK
    assert d.sell(sub, 2, 10_000) == OK
    sub_ask = d.last_order_index()
    assert d.buy(2, 1, 10_000, ste=MASTER) == OK
    assert _orders(d)[sub_ask] == (SELF, 2, 2) and _traded(d) == []
    assert d.sell(sub, 2, 10_000) == OK
    assert d.buy(2, 1, 10_000) == OK
    assert _traded(d) == [(2, sub, 1)]
    assert d.sell(1, 1, 10_000) == OK  # another master's order: a trade under either mode
    assert d.buy(2, 2, 10_000, ste=MASTER) == OK
    assert _traded(d) == [(2, 1, 1)]


def test_reduce_with_master_equality_is_refused_and_consumes_the_nonce() -> None:
    d = Desk()
    assert d.buy(1, 1, 9_900, stb=REDUCE, ste=MASTER) == ResultCode.INVALID_PARAM
    assert d.of("NonceUpdated") and not d.of("OrderUpdated")
    assert d.buy(1, 1, 9_900, stb=4) == ResultCode.INVALID_PARAM


def test_a_versioned_modify_applies_only_above_the_orders_version() -> None:
    """lighter-sdk's ``modify_order(..., order_version=V)``: applied when V is above the
    order's version, which becomes V; a stale one is refused and changes nothing but its
    nonce; a modify without a version applies and keeps it."""
    d = Desk()
    assert d.sell(1, 10, 10_100, coi=77) == OK
    oi = d.last_order_index()
    assert _resting(d, 1)[oi].order_version == 0
    assert d.modify(1, 77, 11, 10_110, version=100) == OK
    assert [e.order_version for e in d.of("OrderUpdated")] == [100]
    assert d.modify(1, oi, 12, 10_150, version=100) == ResultCode.STALE_ORDER_VERSION
    assert d.of("NonceUpdated") and not d.of("OrderUpdated") and not d.of("LevelChanged")
    assert d.asks() == [(10_110, 11)]
    assert d.modify(1, oi, 12, 10_150, version=99) == ResultCode.STALE_ORDER_VERSION
    assert d.modify(1, oi, 12, 10_150, version=200) == OK
    assert d.asks() == [(10_150, 12)]
    assert d.modify(1, oi, 12, 10_160) == OK  # no version: applies, keeps 200
    rec = _resting(d, 1)[oi]
    assert (rec.price, rec.order_version) == (10_160, 200)
    # its version is state: in the records, the hash, and a snapshot round trip
    again = Engine.from_records(d.eng.records())
    assert again.state_hash() == d.eng.state_hash()
    assert again.open_orders(1)[0].order_version == 200
    assert d.modify(1, oi, 5, 10_160, version=2**48) == ResultCode.INVALID_PARAM


def test_a_version_that_shrinks_the_order_to_its_fills_cancels_it_with_that_version() -> None:
    d = Desk()
    assert d.sell(1, 3, 10_100) == OK
    oi = d.last_order_index()
    assert d.buy(2, 2, 10_100) == OK
    assert d.modify(1, oi, 2, 10_100, version=7) == OK
    (ev,) = d.of("OrderUpdated")
    assert (ev.status, ev.order_version) == (int(OrderStatus.CANCELED), 7)


def test_cancel_all_in_one_market_reports_those_orders_cancelled() -> None:
    d = Desk(markets=(market(0), market(1)))
    assert d.buy(1, 1, 9_900) == OK
    assert d.buy(1, 1, 9_800, m=1) == OK
    in_one = d.last_order_index()
    assert d.cancel_all(1, market=1) == OK
    assert _orders(d) == {in_one: (int(OrderStatus.CANCELED), 1, 1)}
    assert d.bids(0) == [(9_900, 1)] and d.bids(1) == []
    assert d.cancel_all(1) == OK
    assert d.bids(0) == []
