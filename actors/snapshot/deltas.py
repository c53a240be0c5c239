"""The snapshot holder's state, rebuilt from the blocks' deltas alone (no engine execution).

The engine's events carry absolute values (a level's size, an account's collateral, a position's
and an order's full state with its time priority, the exchange's ledger), so the state the engine
would snapshot (``Engine.records()``) is a fold of the events over the previous state.
:class:`DeltaState` is that fold: one table per snapshot record type, updated in place per event:
``ExchangeRecord`` from ``ExchangeBalancesChanged`` and the highest order index, priority and trade
id seen; ``MarketRecord`` from ``MarketChanged``/``MarketStatsChanged``; ``AccountRecord`` from
``BalanceChanged``; ``PositionRecord`` from ``PositionChanged`` (an order in a market without a
position creates the engine's empty one); ``ApiKeyRecord`` from ``NonceUpdated``/``ApiKeyChanged``;
``OrderRecord`` from ``OrderUpdated`` (resting while active with lots remaining);
``FundingRecord`` from ``FundingChanged``; ``L1AddressRecord`` from ``L1AddressSet`` and
``SubAccountCreated`` (which also names the sub-account's master in its ``AccountRecord``);
``ConditionalOrderRecord`` from ``ConditionalOrderUpdated`` (kept while its status is live:
pending, running or in progress; dropped with a final status, or when an ``OrderUpdated`` of
the same index leaves the book: a fired or entry order's condition goes with it).

Invariant (tested against the sequencer's engine by state hash,
``tests/unit/test_snapshot_deltas.py``): applying a block's events to the state at ``seq - 1``
gives the state at ``seq``; re-applying one is harmless except for the counters, which only grow.
Order records come out sorted by (market, bids best first then asks, priority), what
``Engine.from_records`` rebuilds from.

Cost: per event one type test and one dict update; :meth:`records` sorts the orders,
O(n log n), once per snapshot; :meth:`state_hash` is O(state).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from raydex.codecs import (
    FIRST_ORDER_INDEX,
    AccountRecord,
    ApiKeyChanged,
    ApiKeyRecord,
    BalanceChanged,
    ConditionalOrderRecord,
    ConditionalOrderUpdated,
    Event,
    ExchangeBalancesChanged,
    ExchangeRecord,
    FundingChanged,
    FundingRecord,
    L1AddressRecord,
    L1AddressSet,
    MarketChanged,
    MarketRecord,
    MarketStatsChanged,
    NonceUpdated,
    OrderRecord,
    OrderStatus,
    OrderUpdated,
    PositionChanged,
    PositionRecord,
    SubAccountCreated,
    TradeExecuted,
)
from raydex.engine import records_hash

_ACTIVE = int(OrderStatus.ACTIVE_LIMIT)
#: a conditional order's statuses while it is live (``engine._pending``)
_LIVE = frozenset(
    {int(OrderStatus.PENDING), int(OrderStatus.ACTIVE_LIMIT), int(OrderStatus.IN_PROGRESS)}
)
_new = tuple.__new__


class DeltaState:
    """The full exchange state as tables of snapshot records, folded from block events."""

    __slots__ = (
        "accounts",
        "conds",
        "fee_pool",
        "funding",
        "insurance_fund",
        "keys",
        "l1",
        "markets",
        "masters",
        "next_order_index",
        "next_priority",
        "next_trade_id",
        "orders",
        "positions",
        "total_deposits",
        "total_withdrawals",
    )

    def __init__(self) -> None:
        self.fee_pool = 0
        self.insurance_fund = 0
        self.total_deposits = 0
        self.total_withdrawals = 0
        self.next_order_index = FIRST_ORDER_INDEX
        self.next_trade_id = 1
        self.next_priority = 1
        self.markets: dict[int, MarketRecord] = {}
        self.accounts: dict[int, int] = {}
        self.positions: dict[tuple[int, int], PositionRecord] = {}
        #: (account, key) -> [nonce, pub key]
        self.keys: dict[tuple[int, int], list[Any]] = {}
        #: resting orders by order index
        self.orders: dict[int, OrderRecord] = {}
        #: funding clocks by market
        self.funding: dict[int, FundingRecord] = {}
        #: L1 addresses by account
        self.l1: dict[int, bytes] = {}
        #: live conditional orders by order index
        self.conds: dict[int, ConditionalOrderRecord] = {}
        #: sub-account -> its master (a master, its own, has no entry)
        self.masters: dict[int, int] = {}

    # ---- records in, records out -----------------------------------------------------------------

    @classmethod
    def from_records(cls, records: Iterable[Any]) -> DeltaState:
        """The state of ``records`` (``Engine.records()`` or a snapshot's rows)."""
        st = cls()
        for r in records:
            t = type(r)
            if t is ExchangeRecord:
                (
                    st.fee_pool,
                    st.insurance_fund,
                    st.total_deposits,
                    st.total_withdrawals,
                    st.next_order_index,
                    st.next_trade_id,
                    st.next_priority,
                ) = r
            elif t is MarketRecord:
                st.markets[r.market_index] = r
            elif t is AccountRecord:
                st.accounts[r.account_index] = r.collateral
                if r.master_index != r.account_index:
                    st.masters[r.account_index] = r.master_index
            elif t is PositionRecord:
                st.positions[(r.account_index, r.market_index)] = r
            elif t is ApiKeyRecord:
                st.keys[(r.account_index, r.api_key_index)] = [r.nonce, r.pub_key]
            elif t is OrderRecord:
                st.orders[r.order_index] = r
            elif t is FundingRecord:
                st.funding[r.market_index] = r
            elif t is L1AddressRecord:
                st.l1[r.account_index] = r.l1_address
            elif t is ConditionalOrderRecord:
                st.conds[r.order_index] = r
            else:
                raise TypeError(f"not a snapshot record: {t.__name__}")
        return st

    def records(self) -> Iterator[Any]:
        """The state as snapshot records, in ``Engine.records()``'s canonical order."""
        yield ExchangeRecord(
            self.fee_pool,
            self.insurance_fund,
            self.total_deposits,
            self.total_withdrawals,
            self.next_order_index,
            self.next_trade_id,
            self.next_priority,
        )
        markets = self.markets
        for mi in sorted(markets):
            yield markets[mi]
        accounts = self.accounts
        masters = self.masters
        for ai in sorted(accounts):
            yield _new(AccountRecord, (ai, accounts[ai], masters.get(ai, ai)))
        positions = self.positions
        for k in sorted(positions):
            yield positions[k]
        keys = self.keys
        for ai, ki in sorted(keys):
            nonce, pub = keys[(ai, ki)]
            yield _new(ApiKeyRecord, (ai, ki, nonce, pub))
        yield from sorted(self.orders.values(), key=_book_order)
        funding = self.funding
        for mi in sorted(funding):
            yield funding[mi]
        l1 = self.l1
        for ai in sorted(l1):
            yield _new(L1AddressRecord, (ai, l1[ai]))
        conds = self.conds
        for oi in sorted(conds):
            yield conds[oi]

    def state_hash(self) -> bytes:
        """The engine's state hash of the same state (``raydex.engine.records_hash``)."""
        digest: bytes = records_hash(self.records())
        return digest

    # ---- applying events ------------------------------------------------------------------------

    def apply(self, events: Iterable[Event]) -> None:
        """Fold one block's events (in block order) into the state."""
        orders = self.orders
        positions = self.positions
        accounts = self.accounts
        for ev in events:
            t = type(ev)
            if t is OrderUpdated:
                mi, oi, ai = ev[0], ev[1], ev[2]
                if ev[12] == _ACTIVE and ev[7] > 0:  # status, remaining
                    orders[oi] = _new(OrderRecord, (*ev[:12], ev[13], ev[14]))
                else:
                    orders.pop(oi, None)
                    if self.conds:
                        self.conds.pop(oi, None)
                if (ai, mi) not in positions:
                    imf = self.markets[mi].default_initial_margin_fraction
                    positions[(ai, mi)] = _new(PositionRecord, (ai, mi, 0, 0, 0, 0, imf, 0, 0))
                if oi >= self.next_order_index:
                    self.next_order_index = oi + 1
                if ev[13] >= self.next_priority:
                    self.next_priority = ev[13] + 1
            elif t is BalanceChanged:
                accounts[ev[0]] = ev[1]
            elif t is PositionChanged:
                positions[(ev[0], ev[1])] = _new(PositionRecord, ev)
            elif t is NonceUpdated:
                key = self.keys.get((ev[0], ev[1]))
                if key is None:
                    self.keys[(ev[0], ev[1])] = [ev[2], None]
                else:
                    key[0] = ev[2]
            elif t is TradeExecuted:
                if ev[1] >= self.next_trade_id:
                    self.next_trade_id = ev[1] + 1
            elif t is MarketStatsChanged:
                m = self.markets[ev[0]]
                self.markets[ev[0]] = _new(MarketRecord, (*m[:14], ev[1], m[15], ev[2], ev[3]))
            elif t is ExchangeBalancesChanged:
                (
                    self.fee_pool,
                    self.insurance_fund,
                    self.total_deposits,
                    self.total_withdrawals,
                ) = ev
            elif t is ApiKeyChanged:
                key = self.keys.get((ev[0], ev[1]))
                if key is None:
                    self.keys[(ev[0], ev[1])] = [-1, ev[2]]
                else:
                    key[1] = ev[2]
            elif t is MarketChanged:
                old = self.markets.get(ev[0])
                ltp, oi_ = (old.last_trade_price, old.open_interest) if old else (0, 0)
                self.markets[ev[0]] = _new(MarketRecord, (*ev, ltp, oi_))
            elif t is FundingChanged:
                mi, samples, premium_sum, last_rate, last_funding_ms, hour, last_minute = ev
                self.funding[mi] = _new(
                    FundingRecord,
                    (mi, hour, last_minute, samples, premium_sum, last_rate, last_funding_ms),
                )
            elif t is L1AddressSet:
                self.l1[ev[0]] = ev[1]
            elif t is ConditionalOrderUpdated:
                oi = ev[1]
                if ev[12] in _LIVE:  # status
                    self.conds[oi] = _new(ConditionalOrderRecord, ev)
                else:
                    self.conds.pop(oi, None)
                if oi >= self.next_order_index:
                    self.next_order_index = oi + 1
            elif t is SubAccountCreated:
                ai, master, addr = ev
                self.masters[ai] = master
                accounts.setdefault(ai, 0)
                if any(addr):
                    self.l1[ai] = addr
            # LevelChanged, TxExecuted, PositionLiquidated, PositionDeleveraged: nothing to keep


def _book_order(o: OrderRecord) -> tuple[int, int, int, int]:
    """(market, bids before asks, best price first, time priority): ``Engine.records()``'s order."""
    return (o[0], o[4], o[5] if o[4] else -o[5], o[12])
