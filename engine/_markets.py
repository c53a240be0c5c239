"""Markets: CreateMarket, UpdateMarket, SetMarkPrice, ApplyFunding (operator commands; cold paths).

Functions over the ``ExchangeState``, one per command, plus the market-parameter helpers the
snapshot code shares (:func:`valid_params`, :func:`set_params`, :func:`market_fields`).

- A mark move or a parameter change bumps ``ExchangeState.epoch`` (every cached account risk sum
  is stale) and runs the liquidation checks for that market (``_liquidation``); a mark move
  first fires the stop-loss / take-profit orders it reached (``_triggers.fire_crossed``).
- Funding: ``size * mark * mult * rate / 1e8`` per holder, in account order; payers round up,
  receivers down; the residue goes to the insurance fund; a payer is checked for maintenance
  unless its payment fits in the reserve its liquidation triggers left out (``_liquidation.arm``:
  then it cannot be under maintenance, and the reserve shrinks by the payment). An isolated
  position pays and receives through its own collateral, a payer always checked.

Cost: CreateMarket / UpdateMarket O(1) plus the holders' checks; SetMarkPrice O(crossed triggers
+ unarmed holders); ApplyFunding O(holders + k log k) for k positions opened since the last
(``Market.holders_by_account``).
"""

from __future__ import annotations

from typing import Any, Final

from raydex.codecs import ApplyFunding, CreateMarket, MarketChanged, SetMarkPrice, UpdateMarket

from ._deltas import Deltas
from ._liquidation import check_accounts, liquidate_crossed, liquidate_holders
from ._model import Market
from ._orders import expire
from ._state import (
    BPS,
    FUNDING_SCALE,
    MAX_48,
    MAX_I63,
    MAX_MARKET_INDEX,
    PPM,
    ExchangeState,
    is_int,
    new_tuple,
)
from ._triggers import fire_crossed
from .codes import (
    INVALID_MARKET_PARAMS,
    INVALID_PARAM,
    INVALID_PRICE,
    MARKET_EXISTS,
    MARKET_NOT_FOUND,
    OK,
)
from .rules import MAX_PRICE, USDC_DECIMALS, product


def create_market(st: ExchangeState, c: CreateMarket, now: int, out: Deltas) -> int:
    mi = c.market_index
    if not is_int(mi) or not 0 <= mi <= MAX_MARKET_INDEX:
        return INVALID_MARKET_PARAMS
    if mi in st.markets:
        return MARKET_EXISTS
    pd, sd, sym = c.price_decimals, c.size_decimals, c.symbol
    if not (is_int(pd) and is_int(sd) and pd >= 0 and sd >= 0 and pd + sd <= USDC_DECIMALS):
        return INVALID_MARKET_PARAMS
    if not isinstance(sym, str) or not sym.isascii() or not 0 < len(sym) <= 16:
        return INVALID_MARKET_PARAMS
    if not is_int(c.mark_price) or not 1 <= c.mark_price <= MAX_PRICE:
        return INVALID_MARKET_PARAMS
    if not valid_params(c[4:14], c.status):
        return INVALID_MARKET_PARAMS
    m = Market(int(mi), sym, int(pd), int(sd))
    set_params(m, c[4:14], c.status)
    m.set_mark(int(c.mark_price))
    st.add_market(m)
    out.event(new_tuple(MarketChanged, market_fields(m)))
    st.mark_market(m)
    return OK


def update_market(st: ExchangeState, c: UpdateMarket, now: int, out: Deltas) -> int:
    m = st.markets.get(c.market_index)
    if m is None:
        return MARKET_NOT_FOUND
    if not valid_params(c[1:11], c.status):
        return INVALID_MARKET_PARAMS
    set_params(m, c[1:11], c.status)
    st.epoch += 1
    out.event(new_tuple(MarketChanged, market_fields(m)))
    liquidate_holders(st, m, now, out)
    return OK


def set_mark_price(st: ExchangeState, c: SetMarkPrice, now: int, out: Deltas) -> int:
    mi, price = c
    m = st.markets.get(mi)
    if m is None:
        return MARKET_NOT_FOUND
    if not is_int(price) or not 1 <= price <= MAX_PRICE:
        return INVALID_PRICE
    if m.next_expiry < now:
        expire(st, m, now, out)
    m.set_mark(int(price))
    st.epoch += 1
    st.mark_market(m)
    if m.trig_up or m.trig_down:
        fire_crossed(st, m, now, out)
    liquidate_crossed(st, m, now, out)
    return OK


def apply_funding(st: ExchangeState, c: ApplyFunding, now: int, out: Deltas) -> int:
    mi, rate = c
    m = st.markets.get(mi)
    if m is None:
        return MARKET_NOT_FOUND
    if not is_int(rate) or not -(2**31) <= rate < 2**31:
        return INVALID_PARAM
    if rate == 0 or not m.holders:
        return OK
    mq = m.mark_q
    paid = 0
    received = 0
    payers: list[int] = []
    for pos in m.holders_by_account():
        acct = pos.account
        raw = product(product(pos.size, mq), rate)
        isolated = pos.margin_mode
        if raw > 0:
            amount = -(-raw // FUNDING_SCALE)
            paid += amount
            # Spent from the reserve its triggers left out (``arm``): still above maintenance,
            # the triggers still conservative; otherwise checked exactly below (an isolated
            # position pays out of its own collateral: always checked).
            cost = product(amount, BPS)
            if not isolated and acct.reserve_version == acct.risk_version and cost <= acct.reserve:
                acct.reserve -= cost
            else:
                payers.append(acct.index)
        else:
            amount = -((-raw) // FUNDING_SCALE)
            received -= amount
        pos.funding_paid += amount
        if not pos.dirty:
            st.mark_position(pos)
        if isolated:
            pos.allocated -= amount
        else:
            acct.collateral -= amount
            if not acct.dirty:
                st.mark_account(acct)
    st.insurance_fund += paid - received
    st.mark_exchange()
    # Only payers lost buffer (receivers' triggers stay conservative), and only those whose
    # payment did not fit in their reserve need the exact check.
    check_accounts(st, payers, now, out)
    return OK


# ---- market parameters ---------------------------------------------------------------------------

#: ``Market`` attributes of the ten market parameters, in the order of ``CreateMarket`` /
#: ``UpdateMarket`` / ``MarketChanged`` (min_base_amount ... max_price_deviation).
PARAMS: Final = (
    "min_base",
    "min_quote",
    "maker_fee",
    "taker_fee",
    "liquidation_fee",
    "default_imf",
    "min_imf",
    "maintenance_mf",
    "closeout_mf",
    "max_price_deviation",
)


def valid_params(p: tuple[Any, ...], status: object) -> bool:
    """(min_base, min_quote, maker, taker, liq fee, default imf, min imf, mmf, closeout, dev)."""
    if not all(is_int(x) for x in p) or not is_int(status):
        return False
    min_base, min_quote, maker, taker, liq, dimf, mimf, mmf, cmf, dev = p
    return (
        1 <= min_base <= MAX_48
        and 0 <= min_quote <= MAX_I63
        and all(0 <= f <= PPM for f in (maker, taker, liq))
        and 0 <= cmf <= mmf
        and 0 < mmf <= mimf <= dimf <= BPS
        and 0 <= dev <= BPS
        and status in (0, 1)
    )


def set_params(m: Market, p: tuple[Any, ...], status: int) -> None:
    """Store the parameters :func:`valid_params` accepted (same order) and the status."""
    for name, x in zip(PARAMS, p, strict=True):
        setattr(m, name, int(x))
    m.status = int(status)


def market_fields(m: Market) -> tuple[Any, ...]:
    """The fields of ``MarketChanged``, which are also the head of a ``MarketRecord``."""
    return (
        m.index,
        m.symbol,
        m.price_decimals,
        m.size_decimals,
        *[getattr(m, name) for name in PARAMS],
        m.mark,
        m.status,
    )
