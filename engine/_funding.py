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
- Everything depends on the commands and their ``now_ms`` only, and the clock of every market is
  in ``records()`` (``FundingRecord``), so replay and snapshots reproduce it; each tick that changes
  a clock emits ``FundingChanged`` with its absolute values.

Knobs (module constants, as Lighter fixes them per exchange rather than per market): the interest
rate, its clamp, the hourly cap and the impact notional. A larger impact notional makes the premium
read deeper into the book (harder to move with a small order, slower to react to a thin one).

Cost: a sample walks at most ``IMPACT_DEPTH`` levels of each side (``nsmallest`` over the side's
levels: O(L log depth)); a settlement is ``ApplyFunding``'s O(holders). One tick per market per
interval from the sequencer, so none of it is on the order path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from raydex.codecs import ApplyFunding, FundingChanged, FundingRecord, FundingTick, ResultCode

if TYPE_CHECKING:
    from ._deltas import Deltas
    from ._engine import Engine

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
_NONE: Final = -1
_OK: Final = int(ResultCode.OK)

__all__ = ["FundingClock", "funding_rate", "premium"]


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


class _Clock:
    __slots__ = ("hour", "last_funding_ms", "last_minute", "last_rate", "premium_sum", "samples")

    def __init__(self) -> None:
        self.hour = _NONE
        self.last_minute = _NONE
        self.samples = 0
        self.premium_sum = 0
        self.last_rate = 0
        self.last_funding_ms = 0


class FundingClock:
    """Every market's funding clock; the engine holds one and hands it ``FundingTick``s."""

    def __init__(self) -> None:
        self._clocks: dict[int, _Clock] = {}

    def tick(self, eng: Engine, cmd: FundingTick, now: int, out: Deltas) -> int:
        """Run ``cmd.market_index``'s clock at ``now`` (see the module docstring)."""
        mi = cmd.market_index
        m = eng.market(mi)
        if m is None:
            return int(ResultCode.MARKET_NOT_FOUND)
        c = self._clocks.get(mi)
        if c is None:
            c = self._clocks[mi] = _Clock()
        hour = now // HOUR_MS
        minute = now // MINUTE_MS
        changed = False
        if c.hour == _NONE:
            c.hour = hour
        elif hour > c.hour:
            rate = funding_rate(c.premium_sum, c.samples)
            from ._markets import apply_funding  # here: _markets imports this module's users

            code = apply_funding(eng, ApplyFunding(mi, rate), now, out)
            if code != _OK:  # cannot happen for a known market and a capped rate
                return code
            c.last_rate, c.last_funding_ms = rate, hour * HOUR_MS
            c.hour, c.samples, c.premium_sum = hour, 0, 0
            changed = True
        if minute > c.last_minute:
            mult = 10 ** (6 - m.price_decimals - m.size_decimals)
            bids = eng.book_levels(mi, 0, IMPACT_DEPTH)
            asks = eng.book_levels(mi, 1, IMPACT_DEPTH)
            c.premium_sum += premium(m.mark_price, bids, asks, mult)
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
        return _OK

    # ---- snapshots ------------------------------------------------------------------------------

    def records(self) -> list[FundingRecord]:
        return [
            FundingRecord(
                mi, c.hour, c.last_minute, c.samples, c.premium_sum, c.last_rate, c.last_funding_ms
            )
            for mi, c in sorted(self._clocks.items())
        ]

    def restore(self, r: FundingRecord) -> None:
        c = self._clocks[r.market_index] = _Clock()
        (c.hour, c.last_minute, c.samples, c.premium_sum, c.last_rate, c.last_funding_ms) = r[1:]
