"""Funding as Lighter runs it: a premium sampled every minute, settled on every hour mark.

Semantics (integers only; rates in 1e-8 = ``FUNDING_SCALE``, > 0: longs pay shorts):

- ``FundingTick(market)`` at ``now_ms`` runs the market's clock. First, if ``now_ms`` is in a later
  hour than the one being sampled, that hour is settled: its rate (``funding_rate``) is charged to
  every holder exactly as ``ApplyFunding`` charges (size * mark * mult * rate / 1e8, payers round
  up, receivers down, the residue to the insurance fund, then the payers' maintenance is checked),
  and sampling restarts in the current hour. Hours in which no tick came (the sequencer was down)
  are not charged retroactively: one settlement per tick at most. Then, if no sample was taken in
  ``now_ms``'s minute, one is: the premium of the market's book against its index.
- Premium (Lighter's formula): ``(max(0, impact_bid - index) - max(0, index - impact_ask)) /
  index``. The index is the market's mark price (raydex's oracle price: there is no separate spot
  index); the impact bid (ask) is the average price of selling (buying) ``IMPACT_NOTIONAL`` micro-
  USDC against the book, walking at most ``IMPACT_DEPTH`` levels; a side that cannot fill it
  contributes 0, so an empty or thin book has no premium.
- Rate of an hour (8-hour convention as Lighter's and its peers'): with ``P`` the mean of the
  hour's samples (0 when there were none) and ``I = INTEREST_RATE_8H``,
  ``rate = clamp((P + clamp(I - P, -INTEREST_CLAMP, INTEREST_CLAMP)) / 8, -RATE_CAP, RATE_CAP)``,
  integer division truncating toward zero. With a flat premium the hourly rate is
  ``I / 8`` = 0.00125 %.
- Everything depends on the commands and their ``now_ms`` only, and the clock of every market
  (``ExchangeState.funding``, a ``_model.FundingClock`` each) is in ``records()``
  (``FundingRecord``), so replay and snapshots reproduce it; each tick that changes a clock emits
  ``FundingChanged`` with its absolute values.

Knobs (module constants, as Lighter fixes them per exchange rather than per market): the interest
rate, its clamp, the hourly cap and the impact notional. A larger impact notional makes the premium
read deeper into the book (harder to move with a small order, slower to react to a thin one).

Cost: a sample walks at most ``IMPACT_DEPTH`` levels of each side (``nsmallest`` over the side's
levels: O(L log depth)); a settlement is ``ApplyFunding``'s O(holders). One tick per market per
interval from the sequencer, so none of it is on the order path.
"""

from __future__ import annotations

from typing import Final

from raydex.codecs import ApplyFunding, FundingChanged, FundingTick

from ._deltas import Deltas
from ._markets import apply_funding
from ._model import FundingClock
from ._state import ExchangeState
from .codes import MARKET_NOT_FOUND, OK

FUNDING_SCALE: Final = 100_000_000
HOUR_MS: Final = 3_600_000
MINUTE_MS: Final = 60_000
#: 0.01 % per 8 hours (1e-8 units): the hourly rate of a market at its index is 0.00125 %.
INTEREST_RATE_8H: Final = 10_000
#: the interest term moves the rate by at most 0.05 % (per 8 hours) away from the premium
INTEREST_CLAMP: Final = 50_000
#: at most 0.5 % per hour either way
RATE_CAP: Final = 500_000
#: the impact prices fill this much notional (micro-USDC): 500 USDC
IMPACT_NOTIONAL: Final = 500_000_000
#: levels of one side walked for an impact price
IMPACT_DEPTH: Final = 64

__all__ = ["funding_rate", "premium", "tick"]


def _div(a: int, b: int) -> int:
    """``a / b`` truncated toward zero (symmetric for longs and shorts)."""
    q = abs(a) // b
    return q if a >= 0 else -q


def funding_rate(premium_sum: int, samples: int) -> int:
    """The hourly rate (1e-8) of an hour whose ``samples`` premiums sum to ``premium_sum``."""
    p = _div(premium_sum, samples) if samples else 0
    nudge = min(max(INTEREST_RATE_8H - p, -INTEREST_CLAMP), INTEREST_CLAMP)
    return min(max(_div(p + nudge, 8), -RATE_CAP), RATE_CAP)


def _impact(levels: list[tuple[int, int]], mult: int) -> tuple[int, int] | None:
    """``(notional, lots)`` of filling ``IMPACT_NOTIONAL`` against ``levels`` (best first), the
    last level taken partly; None when the levels hold less."""
    need = IMPACT_NOTIONAL
    notional = lots = 0
    for price, size in levels:
        unit = price * mult  # micro-USDC per lot
        take = min(size, -(-need // unit))
        notional += take * unit
        lots += take
        need -= take * unit
        if need <= 0:
            return notional, lots
    return None


def premium(index: int, bids: list[tuple[int, int]], asks: list[tuple[int, int]], mult: int) -> int:
    """Lighter's premium (1e-8) of a book (levels best first) against ``index`` (ticks)."""
    if index <= 0:
        return 0
    out = 0
    bid = _impact(bids, mult)
    if bid is not None:  # impact bid above the index: longs are paying up
        notional, lots = bid
        over = notional - index * mult * lots  # (avg - index) * lots * mult
        if over > 0:
            out += over * FUNDING_SCALE // (index * mult * lots)
    ask = _impact(asks, mult)
    if ask is not None:  # impact ask below the index
        notional, lots = ask
        under = index * mult * lots - notional
        if under > 0:
            out -= under * FUNDING_SCALE // (index * mult * lots)
    return out


def tick(st: ExchangeState, cmd: FundingTick, now: int, out: Deltas) -> int:
    """Run ``cmd.market_index``'s clock at ``now`` (see the module docstring)."""
    mi = cmd.market_index
    m = st.market(mi)
    if m is None:
        return MARKET_NOT_FOUND
    c = st.funding.get(mi)
    if c is None:
        c = st.funding[mi] = FundingClock()
    hour = now // HOUR_MS
    minute = now // MINUTE_MS
    changed = False
    if c.hour == -1:
        c.hour = hour
    elif hour > c.hour:
        rate = funding_rate(c.premium_sum, c.samples)
        code = apply_funding(st, ApplyFunding(mi, rate), now, out)
        if code != OK:  # cannot happen for a known market and a capped rate
            return code
        c.last_rate, c.last_funding_ms = rate, hour * HOUR_MS
        c.hour, c.samples, c.premium_sum = hour, 0, 0
        changed = True
    if minute > c.last_minute:
        bids = m.bids.best_levels(IMPACT_DEPTH)
        asks = m.asks.best_levels(IMPACT_DEPTH)
        c.premium_sum += premium(m.mark, bids, asks, m.mult)
        c.samples += 1
        c.last_minute = minute
        changed = True
    if changed:
        out.event(
            FundingChanged(
                mi,
                c.samples,
                c.premium_sum,
                c.last_rate,
                c.last_funding_ms,
                c.hour,
                c.last_minute,
            )
        )
    return OK
