"""Per-account trade counts and volumes over Lighter's four windows (day, week, month, total), for
the ``account_all`` and ``account_all_trades`` WebSocket channels.

Fed once per applied block with the block's trades (``History.add`` queues them, O(1); they
are counted after the block's fan-out, with the ledger's fold, or on the next read); both sides
of every trade count it. Windows are calendar windows in UTC from the block's time: the day,
the ISO week (Monday 00:00), the month; ``total`` since this replica booted (a replica booted
from a snapshot counts from its boot on, as its candles do: the block stream carries no
per-account history).
A window whose period has passed reads as zero, whether or not the account traded since.

Volume is the quote amount (``price * size * notional multiplier``, micro-USDC).

Cost: O(trades in the block): per trade and side one dict lookup and four additions (a new
day for the account: one append); a read is O(days kept), at most 32 entries.
"""

from __future__ import annotations

import datetime as _dt
from collections import deque
from typing import TYPE_CHECKING, NamedTuple

from raydex.engine.rules import notional_multiplier

if TYPE_CHECKING:
    from raydex.codecs import MarketRecord

    from .state import TradeRow

__all__ = ["KEEP_DAYS", "MAX_PENDING", "AccountVolumes", "Volumes"]

_DAY_MS = 86_400_000
#: 1970-01-01 was a Thursday: ISO weeks start 4 days later (Monday 1970-01-05)
_WEEK_SHIFT_MS = 4 * _DAY_MS
#: earlier days kept per account (a month's worth, for the monthly figure)
KEEP_DAYS = 31
#: blocks queued before :meth:`AccountVolumes.queue` counts them inline (bounds the backlog)
MAX_PENDING = 256


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
    """Account -> ``[day, n, vol, total n, total vol]`` plus its earlier days (module docstring).

    Per trade and side: one dict lookup and four additions; a new UTC day moves the account's
    day into its history (at most ``KEEP_DAYS`` kept, enough for the month). Weekly and monthly
    figures are summed from the kept days when read."""

    def __init__(self) -> None:
        self._rows: dict[int, list[int]] = {}
        self._days: dict[int, deque[tuple[int, int, int]]] = {}
        self._pending: deque[tuple[dict[int, list[TradeRow]], dict[int, MarketRecord]]] = deque()

    def queue(self, trades: dict[int, list[TradeRow]], markets: dict[int, MarketRecord]) -> None:
        """One block's trades, counted later (O(1) here): by :meth:`catch_up`, which the replica
        schedules after the block's fan-out with the ledger's fold, or by the next read; inline
        once ``MAX_PENDING`` blocks wait."""
        self._pending.append((trades, markets))
        if len(self._pending) > MAX_PENDING:
            self.catch_up()

    def catch_up(self) -> None:
        """Count every queued block."""
        pending = self._pending
        while pending:
            self.add(*pending.popleft())

    def add(self, trades: dict[int, list[TradeRow]], markets: dict[int, MarketRecord]) -> None:
        """Count one block's trades (market -> rows, all at the block's time) for both sides."""
        rows_of = self._rows
        day = -1
        for mi, rows in trades.items():
            m = markets[mi]
            mult = notional_multiplier(m.price_decimals, m.size_decimals)
            for row in rows:
                if day < 0:
                    day = row.timestamp_ms // _DAY_MS
                t = row.trade
                quote = t.price * t.size * mult
                taker, maker = t.taker_account_index, t.maker_account_index
                for ai in (taker, maker) if taker != maker else (taker,):
                    r = rows_of.get(ai)
                    if r is None or r[0] != day:
                        r = self._roll(ai, r, day)
                    r[1] += 1
                    r[2] += quote
                    r[3] += 1
                    r[4] += quote

    def _roll(self, ai: int, r: list[int] | None, day: int) -> list[int]:
        if r is None:
            r = self._rows[ai] = [day, 0, 0, 0, 0]
            return r
        days = self._days.get(ai)
        if days is None:
            days = self._days[ai] = deque(maxlen=KEEP_DAYS)
        days.append((r[0], r[1], r[2]))
        r[0], r[1], r[2] = day, 0, 0
        return r

    def get(self, ai: int, now_ms: int) -> Volumes:
        """``ai``'s figures as of ``now_ms`` (the newest block's time): windows passed read 0."""
        self.catch_up()
        r = self._rows.get(ai)
        if r is None:
            return ZERO
        day = now_ms // _DAY_MS
        week = (day * _DAY_MS - _WEEK_SHIFT_MS) // (7 * _DAY_MS)
        month = _month(day * _DAY_MS)
        d = w = mo = (0, 0)
        for dd, n, v in (*self._days.get(ai, ()), (r[0], r[1], r[2])):
            if dd > day:
                continue
            if dd == day:
                d = (d[0] + n, d[1] + v)
            if (dd * _DAY_MS - _WEEK_SHIFT_MS) // (7 * _DAY_MS) == week:
                w = (w[0] + n, w[1] + v)
            if _month(dd * _DAY_MS) == month:
                mo = (mo[0] + n, mo[1] + v)
        return Volumes(*d, *w, *mo, r[3], r[4])
