"""Per-account trade counts and volumes over Lighter's four windows (day, week, month, total), for
the ``account_all`` and ``account_all_trades`` WebSocket channels.

Fed once per applied block with the block's trades (``History.add``); both sides of every trade
count it. Windows are calendar windows in UTC from the block's time: the day, the ISO week
(Monday 00:00), the month; ``total`` since this replica booted (a replica booted from a snapshot
counts from its boot on, as its candles do: the block stream carries no per-account history).
A window whose period has passed reads as zero, whether or not the account traded since.

Volume is the quote amount (``price * size * notional multiplier``, micro-USDC).

Cost: O(trades in the block), two small list updates per trade; a read is O(1).
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, NamedTuple

from raydex.engine.rules import notional_multiplier

if TYPE_CHECKING:
    from raydex.codecs import MarketRecord

    from .state import TradeRow

__all__ = ["AccountVolumes", "Volumes"]

_DAY_MS = 86_400_000
#: 1970-01-01 was a Thursday: ISO weeks start 3 days later
_WEEK_SHIFT_MS = 3 * _DAY_MS


class Volumes(NamedTuple):
    """One account's trade counts and quote volumes (micro-USDC) per window."""

    daily_trades: int
    daily_volume: int
    weekly_trades: int
    weekly_volume: int
    monthly_trades: int
    monthly_volume: int
    total_trades: int
    total_volume: int


ZERO = Volumes(0, 0, 0, 0, 0, 0, 0, 0)


def _month(ts_ms: int) -> int:
    d = _dt.datetime.fromtimestamp(ts_ms // 1000, _dt.UTC)
    return d.year * 12 + d.month


class AccountVolumes:
    """Account -> ``[day, n, vol, week, n, vol, month, n, vol, n, vol]`` (module docstring)."""

    def __init__(self) -> None:
        self._rows: dict[int, list[int]] = {}
        self._month_of_day: tuple[int, int] = (-1, 0)

    def _month_of(self, day: int) -> int:
        cached_day, month = self._month_of_day
        if cached_day != day:
            month = _month(day * _DAY_MS)
            self._month_of_day = (day, month)
        return month

    def add(self, trades: dict[int, list[TradeRow]], markets: dict[int, MarketRecord]) -> None:
        """Count one block's trades (market -> rows) for both sides of each."""
        for mi, rows in trades.items():
            m = markets[mi]
            mult = notional_multiplier(m.price_decimals, m.size_decimals)
            for row in rows:
                t = row.trade
                quote = t.price * t.size * mult
                day = row.timestamp_ms // _DAY_MS
                week = (row.timestamp_ms - _WEEK_SHIFT_MS) // (7 * _DAY_MS)
                month = self._month_of(day)
                self._count(t.taker_account_index, quote, day, week, month)
                if t.maker_account_index != t.taker_account_index:
                    self._count(t.maker_account_index, quote, day, week, month)

    def _count(self, ai: int, quote: int, day: int, week: int, month: int) -> None:
        r = self._rows.get(ai)
        if r is None:
            r = self._rows[ai] = [day, 0, 0, week, 0, 0, month, 0, 0, 0, 0]
        if r[0] != day:
            r[0], r[1], r[2] = day, 0, 0
        if r[3] != week:
            r[3], r[4], r[5] = week, 0, 0
        if r[6] != month:
            r[6], r[7], r[8] = month, 0, 0
        r[1] += 1
        r[2] += quote
        r[4] += 1
        r[5] += quote
        r[7] += 1
        r[8] += quote
        r[9] += 1
        r[10] += quote

    def get(self, ai: int, now_ms: int) -> Volumes:
        """``ai``'s figures as of ``now_ms`` (the newest block's time): windows passed read 0."""
        r = self._rows.get(ai)
        if r is None:
            return ZERO
        day = now_ms // _DAY_MS
        week = (now_ms - _WEEK_SHIFT_MS) // (7 * _DAY_MS)
        month = self._month_of(day)
        d = (r[1], r[2]) if r[0] == day else (0, 0)
        w = (r[4], r[5]) if r[3] == week else (0, 0)
        mo = (r[7], r[8]) if r[6] == month else (0, 0)
        return Volumes(*d, *w, *mo, r[9], r[10])
