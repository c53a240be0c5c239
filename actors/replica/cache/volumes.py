"""Per-account trade counts and volumes over Lighter's four windows (day, week, month, total), for
the ``account_all`` and ``account_all_trades`` WebSocket channels.

Fed once per applied block with the block's trades (``History.add`` queues them, O(1); they
are counted after the block's fan-out, with the ledger's fold, or on the next read); both sides
of every trade count it. Windows are calendar windows in UTC from the block's time: the day,
the ISO week (Monday 00:00), the month; ``total`` since this replica booted (a replica booted
from a snapshot counts from its boot on, as its candles do: the block stream carries no
per-account history; a resync from a snapshot starts it again, with the rest of ``History``).
A window whose period has passed reads as zero, whether or not the account traded since.

Volume is the quote amount (``price * size * notional multiplier``, micro-USDC).

Cost: O(trades in the block): per trade and side one dict lookup and four additions (a new
day for the account: a fold of the finished day); a read is O(1).
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections import deque
from typing import NamedTuple

from raydex.codecs import MarketRecord
from raydex.engine.rules import notional_multiplier

from .rows import TradeRow

__all__ = ["MAX_PENDING", "AccountVolumes", "Volumes"]

_DAY_MS = 86_400_000
#: 1970-01-01 was a Thursday: ISO weeks start 4 days later (Monday 1970-01-05)
_WEEK_SHIFT_MS = 4 * _DAY_MS
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


@functools.lru_cache(maxsize=128)
def _month(day: int) -> int:
    """The calendar month (``year * 12 + month``) of a UTC day number (cached: reads ask the
    same few dozen days again and again)."""
    d = _dt.datetime.fromtimestamp(day * (_DAY_MS // 1000), _dt.UTC)
    return d.year * 12 + d.month


def _week(day: int) -> int:
    return (day * _DAY_MS - _WEEK_SHIFT_MS) // (7 * _DAY_MS)


class AccountVolumes:
    """Account -> ``[day, n, vol, total n, total vol, week, n, vol, month, n, vol]``: the day the
    account last traded with its figures, the totals, and the sums of its earlier days of that
    day's week and month (folded in when a new day starts). Per trade and side: one dict lookup
    and four additions; a read is O(1)."""

    def __init__(self) -> None:
        self._rows: dict[int, list[int]] = {}
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
                    if r is None:
                        r = rows_of[ai] = [day, 0, 0, 0, 0, _week(day), 0, 0, _month(day), 0, 0]
                    elif r[0] != day:
                        _roll(r, day)
                    r[1] += 1
                    r[2] += quote
                    r[3] += 1
                    r[4] += quote

    def get(self, ai: int, now_ms: int) -> Volumes:
        """``ai``'s figures as of ``now_ms`` (the newest block's time): windows passed read 0."""
        self.catch_up()
        r = self._rows.get(ai)
        if r is None:
            return ZERO
        day = now_ms // _DAY_MS
        week, month = _week(day), _month(day)
        last = r[0]
        today = last == day
        in_week = _week(last) == week
        in_month = _month(last) == month
        earlier_w = r[5] == week
        earlier_m = r[8] == month
        return Volumes(
            r[1] if today else 0,
            r[2] if today else 0,
            (r[1] if in_week else 0) + (r[6] if earlier_w else 0),
            (r[2] if in_week else 0) + (r[7] if earlier_w else 0),
            (r[1] if in_month else 0) + (r[9] if earlier_m else 0),
            (r[2] if in_month else 0) + (r[10] if earlier_m else 0),
            r[3],
            r[4],
        )


def _roll(r: list[int], day: int) -> None:
    """A new day for an account: fold the finished day into its week's and month's sums."""
    done = r[0]
    week, month = _week(done), _month(done)
    if r[5] != week:
        r[5], r[6], r[7] = week, 0, 0
    if r[8] != month:
        r[8], r[9], r[10] = month, 0, 0
    r[6] += r[1]
    r[7] += r[2]
    r[9] += r[1]
    r[10] += r[2]
    r[0], r[1], r[2] = day, 0, 0
