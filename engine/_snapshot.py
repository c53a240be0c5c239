"""Snapshot records and the state hash: the engine's state as rows, and back.

- :func:`records`: the full state as ``codecs`` snapshot records in one canonical order (the
  exchange row, markets, accounts, positions, API keys by account, resting orders by market in
  book order, funding clocks by market, L1 addresses by account, conditional orders by order
  index), whatever the history that built it. A state without conditional orders has no such
  rows, so its hash is what it was before they existed.
- :func:`load`: rebuild the state from those rows (in that order): books and every index are
  rebuilt (the masters' sub-account counts and the next sub-account index too, from the
  accounts' masters), every account holding a position is armed (liquidation triggers) at the
  loaded marks, conditional orders are registered, armed and linked again
  (``_triggers.load_cond``).
- :func:`state_hash`: sha256 over :func:`records` (:func:`records_hash`); equal states hash equal
  (snapshot round trips, WAL replay and replicas are compared by it).

Cost: O(state) each, with one sort per map; not on the hot path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any, TypeAlias

from raydex.codecs import AccountRecord as _AccountRecord
from raydex.codecs import (
    ApiKeyRecord,
    ConditionalOrderRecord,
    ExchangeRecord,
    FundingRecord,
    L1AddressRecord,
    MarketRecord,
    OrderRecord,
    PositionRecord,
)

from ._liquidation import arm
from ._markets import market_fields, set_params
from ._model import Account, ApiKey, FundingClock, Market, Order, Position
from ._orders import equity_mmr, iter_market_orders, position_for, rest
from ._pending import cond_fields
from ._state import BPS, ExchangeState, new_tuple
from ._triggers import link_loaded, load_cond

Record: TypeAlias = (
    ExchangeRecord
    | MarketRecord
    | _AccountRecord
    | PositionRecord
    | ApiKeyRecord
    | OrderRecord
    | FundingRecord
    | L1AddressRecord
    | ConditionalOrderRecord
)


def records(st: ExchangeState) -> Iterator[Record]:
    """The full state as snapshot records (see ``codecs._records``), in a canonical order."""
    yield new_tuple(
        ExchangeRecord,
        (
            st.fee_pool,
            st.insurance_fund,
            st.total_deposits,
            st.total_withdrawals,
            st.next_order_index,
            st.next_trade_id,
            st.next_priority,
        ),
    )
    markets = st.markets
    for mi in sorted(markets):
        yield market_record(markets[mi])
    accounts = st.accounts
    ais = sorted(accounts)
    for ai in ais:
        acct = accounts[ai]
        yield new_tuple(_AccountRecord, (ai, acct.collateral, acct.master_index))
    for ai in ais:
        positions = accounts[ai].positions
        for mi in sorted(positions):
            yield position_record(positions[mi])
    for ai in ais:
        acct = accounts[ai]
        keys = acct.keys
        for ki in sorted(keys):
            k = keys[ki]
            yield new_tuple(ApiKeyRecord, (ai, ki, acct.last_nonce(k), k.pub_key))
    for mi in sorted(markets):
        for o in iter_market_orders(markets[mi]):
            yield order_record(o)
    clocks = st.funding
    for mi in sorted(clocks):
        c = clocks[mi]
        yield new_tuple(
            FundingRecord,
            (mi, c.hour, c.last_minute, c.samples, c.premium_sum, c.last_rate, c.last_funding_ms),
        )
    for ai in ais:
        addr = accounts[ai].l1_address
        if addr:
            yield new_tuple(L1AddressRecord, (ai, addr))
    conds = st.conds
    for i in sorted(conds):
        yield new_tuple(ConditionalOrderRecord, cond_fields(conds[i]))


def load(st: ExchangeState, rows: Iterable[Any]) -> None:
    """Fill a fresh ``ExchangeState`` from :func:`records` output (rows in that order)."""
    for r in rows:
        if isinstance(r, ExchangeRecord):
            (
                st.fee_pool,
                st.insurance_fund,
                st.total_deposits,
                st.total_withdrawals,
                st.next_order_index,
                st.next_trade_id,
                st.next_priority,
            ) = r
        elif isinstance(r, MarketRecord):
            m = Market(r.market_index, r.symbol, r.price_decimals, r.size_decimals)
            set_params(m, r[4:14], r.status)
            m.set_mark(r.mark_price)
            m.last_trade_price = r.last_trade_price
            m.open_interest = r.open_interest
            st.add_market(m)
        elif isinstance(r, _AccountRecord):
            acct = Account(r.account_index, r.collateral)
            acct.master_index = r.master_index
            st.add_account(acct)
        elif isinstance(r, PositionRecord):
            acct = st.accounts[r.account_index]
            m = st.markets[r.market_index]
            pos = Position(acct, m, r.initial_margin_fraction)
            (pos.size, pos.entry_quote, pos.realized_pnl, pos.funding_paid) = r[2:6]
            pos.margin_mode = r.margin_mode
            pos.allocated = r.allocated_margin
            if pos.margin_mode:
                acct.isolated += 1
            acct.add_position(pos)
            if pos.size:
                m.add_holder(pos)
        elif isinstance(r, ApiKeyRecord):
            acct = st.accounts[r.account_index]
            acct.add_key(r.api_key_index, ApiKey(r.pub_key, r.nonce))
        elif isinstance(r, OrderRecord):
            acct = st.accounts[r.account_index]
            m = st.markets[r.market_index]
            o = Order(
                r.order_index,
                acct,
                r.client_order_index,
                m,
                r.is_ask,
                r.price,
                r.initial_base_amount,
                r.order_expiry,
                r.order_type,
                r.time_in_force,
                r.reduce_only,
                r.priority,
            )
            o.remaining = r.remaining_base_amount
            o.version = r.order_version
            rest(st, m, o, acct, position_for(acct, m))
        elif isinstance(r, FundingRecord):
            c = st.funding[r.market_index] = FundingClock()
            (c.hour, c.last_minute, c.samples, c.premium_sum, c.last_rate, c.last_funding_ms) = r[
                1:
            ]
        elif isinstance(r, L1AddressRecord):
            acct = st.accounts[r.account_index]
            acct.l1_address = r.l1_address
            if acct.master_index == acct.index:  # (a sub-account shares its master's address)
                st.by_l1[r.l1_address] = r.account_index
        elif isinstance(r, ConditionalOrderRecord):
            load_cond(st, r)
        else:
            raise TypeError(f"not a snapshot record: {type(r).__name__}")
    st.forget_levels()
    link_loaded(st)
    accounts = st.accounts
    for acct in accounts.values():
        if acct.master_index != acct.index:
            accounts[acct.master_index].sub_accounts += 1
            if acct.index <= st.next_sub_index:
                st.next_sub_index = acct.index - 1
    for acct in st.accounts.values():
        if any(p.size for p in acct.positions.values()):
            equity, num = equity_mmr(st, acct)
            arm(st, acct, max(0, equity * BPS - num))


def state_hash(st: ExchangeState) -> bytes:
    """sha256 over the canonical records: equal for equal state, whatever the history."""
    return records_hash(records(st))


def records_hash(rows: Iterable[Any]) -> bytes:
    """sha256 over snapshot records in canonical order (:func:`records`): the state hash.
    Anything that holds the same state in another shape (the snapshot holder's delta-applied
    tables) hashes its records with this, so equal state gives the equal hash."""
    h = hashlib.sha256()
    for r in rows:
        h.update(type(r).__name__.encode())
        h.update("|".join(map(str, r)).encode())
        h.update(b"\n")
    return h.digest()


def market_record(m: Market) -> MarketRecord:
    return new_tuple(MarketRecord, (*market_fields(m), m.last_trade_price, m.open_interest))


def position_record(p: Position) -> PositionRecord:
    return new_tuple(
        PositionRecord,
        (
            p.account.index,
            p.market.index,
            p.size,
            p.entry_quote,
            p.realized_pnl,
            p.funding_paid,
            p.imf,
            p.margin_mode,
            p.allocated,
        ),
    )


def order_record(o: Order) -> OrderRecord:
    return new_tuple(
        OrderRecord,
        (
            o.market.index,
            o.index,
            o.account.index,
            o.client_index,
            o.is_ask,
            o.price,
            o.initial,
            o.remaining,
            o.expiry,
            o.order_type,
            o.tif,
            o.reduce_only,
            o.priority,
            o.version,
        ),
    )
