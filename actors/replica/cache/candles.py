"""Candles (OHLCV) per market and resolution, built from the trade stream the replica applies.

::

    apply_block ─► Applied.trades {market: [TradeRow]} ─► Candles.queue (O(1))
    after the block's fan-out, or on the next read: Candles.catch_up ─► Candles.add ─►
        per (market, resolution): the open candle updated in place, a new one appended at each
        bucket change
    REST ``candles`` / WS ``candle/{m}/{res}`` ◄── Candles.window / Candles.last (caught up first)

- Resolutions are Lighter's (``RESOLUTIONS``: 1m ... 1w, those lighter-sdk and ccxt name). A
  candle's ``t`` is its bucket's start in ms, aligned on the Unix epoch (``t = ts - ts % width``:
  weeks start on Thursdays 00:00 UTC). ``o h l c`` are trade prices, ``v`` the base volume, ``V``
  the quote volume, ``i`` the bucket's last trade id: integers until an answer is built.
- A bucket with no trade has no candle (as on Lighter); trades are the only input, so a replica
  has candles from its snapshot on. A trade stamped before the open candle is folded into it.
- ``KEEP`` candles per (market, resolution), oldest dropped; an answer holds ``MAX_ANSWER``.

Cost: ``queue`` is O(1) on the apply path; the fold (``add``: O(trades) plus O(resolutions) per
market and minute a block touched) runs after the block's fan-out, on the next read, or inline
past ``MAX_PENDING`` queued blocks. ``window`` scans back from the newest candle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from raydex.codecs import MarketRecord

from .rows import TradeRow

__all__ = [
    "KEEP",
    "MAX_ANSWER",
    "MAX_PENDING",
    "RESOLUTIONS",
    "Candle",
    "Candles",
    "candle_channel",
    "candle_json",
    "parse_candle_channel",
]

_MIN = 60_000
#: Lighter's candle resolutions -> bucket width in ms.
RESOLUTIONS: dict[str, int] = {
    "1m": _MIN,
    "5m": 5 * _MIN,
    "15m": 15 * _MIN,
    "30m": 30 * _MIN,
    "1h": 60 * _MIN,
    "4h": 240 * _MIN,
    "12h": 720 * _MIN,
    "1d": 1_440 * _MIN,
    "1w": 10_080 * _MIN,
}
#: Candles kept per market and resolution.
KEEP = 1_000
#: Most candles one ``candles`` answer holds (Lighter's limit per call).
MAX_ANSWER = 500
#: Blocks queued before :meth:`Candles.queue` folds them inline (a bound on what waits when
#: nothing reads and no fold is scheduled, e.g. a state applied outside the replica service).
MAX_PENDING = 256

# One candle: [t, open, high, low, close, base volume, quote volume, last trade id]
Candle = list[int]
_T, _O, _H, _L, _C, _V, _Q, _I = range(8)
_WIDTHS = tuple(RESOLUTIONS.values())


class Candles:
    """Every market's candles at every resolution; fed once per block by the replica."""

    def __init__(self) -> None:
        #: (market, resolution) -> candles, oldest first; the last one is the open candle
        self._series: dict[tuple[int, str], deque[Candle]] = {}
        #: market -> the same deques in ``RESOLUTIONS`` order (the fold walks them without a
        #: key built and looked up per resolution)
        self._by_market: dict[int, tuple[deque[Candle], ...]] = {}
        #: blocks' trades not folded yet, oldest first
        self._pending: deque[Mapping[int, Iterable[TradeRow]]] = deque()

    def queue(self, trades: Mapping[int, Iterable[TradeRow]]) -> None:
        """One block's trades (``Applied.trades``), folded later (O(1) here): by
        :meth:`catch_up`, which the replica schedules after the block's fan-out, or by the next
        read; inline once ``MAX_PENDING`` blocks wait."""
        self._pending.append(trades)
        if len(self._pending) > MAX_PENDING:
            self.catch_up()

    def catch_up(self) -> None:
        """Fold every queued block, oldest first."""
        pending = self._pending
        while pending:
            self.add(pending.popleft())

    def add(self, trades: Mapping[int, Iterable[TradeRow]]) -> None:
        """Fold one block's trades (``Applied.trades``) into every resolution: the trades of a
        market are first summed per minute (a block's trades almost always share one), then each
        minute's sum is folded into each resolution, since every width is a whole number of
        minutes."""
        for mi, rows in trades.items():
            part: Candle | None = None
            for row in rows:
                t = row.trade
                price, size, ts = t.price, t.size, row.timestamp_ms
                start = ts - ts % _MIN
                if part is None or start > part[_T]:
                    if part is not None:
                        self._fold(mi, part)
                    part = [start, price, price, price, price, size, price * size, t.trade_id]
                    continue
                if price > part[_H]:
                    part[_H] = price
                if price < part[_L]:
                    part[_L] = price
                part[_C] = price
                part[_V] += size
                part[_Q] += price * size
                part[_I] = t.trade_id
            if part is not None:
                self._fold(mi, part)

    def _fold(self, mi: int, part: Candle) -> None:
        """Merge one minute's sum into the open candle of every resolution (or start one)."""
        row = self._by_market.get(mi)
        if row is None:
            series = self._series
            row = self._by_market[mi] = tuple(
                series.setdefault((mi, res), deque(maxlen=KEEP)) for res in RESOLUTIONS
            )
        ts, high, low, close, volume, quote, last_id = (
            part[_T], part[_H], part[_L], part[_C], part[_V], part[_Q], part[_I]
        )  # fmt: skip
        for width, candles in zip(_WIDTHS, row, strict=True):
            start = ts - ts % width
            if not candles or start > (last := candles[-1])[_T]:
                c = part.copy()
                c[_T] = start
                candles.append(c)
                continue
            if high > last[_H]:
                last[_H] = high
            if low < last[_L]:
                last[_L] = low
            last[_C] = close
            last[_V] += volume
            last[_Q] += quote
            last[_I] = last_id

    def last(self, mi: int, res: str) -> Candle | None:
        """The newest candle of ``mi`` at ``res`` (the one a trade just moved), or None."""
        if self._pending:
            self.catch_up()
        candles = self._series.get((mi, res))
        return candles[-1] if candles else None

    def window(
        self, mi: int, res: str, start_ms: int, end_ms: int, count_back: int
    ) -> list[Candle]:
        """Candles with ``start_ms <= t <= end_ms``, oldest first: the newest ``count_back`` of
        them when ``count_back > 0``, else the newest ``MAX_ANSWER``."""
        if self._pending:
            self.catch_up()
        candles = self._series.get((mi, res))
        if not candles or end_ms < start_ms:
            return []
        want = min(count_back, MAX_ANSWER) if count_back > 0 else MAX_ANSWER
        out: list[Candle] = []
        for c in reversed(candles):
            t = c[_T]
            if t > end_ms:
                continue
            if t < start_ms or len(out) >= want:
                break
            out.append(c)
        out.reverse()
        return out


def candle_json(c: Candle, m: MarketRecord) -> dict[str, Any]:
    """Lighter's abbreviated ``Candle``: ``t o h l c v V i`` as JSON numbers."""
    pd, sd = m.price_decimals, m.size_decimals
    p = 10**pd
    return {
        "t": c[_T],
        "o": c[_O] / p,
        "h": c[_H] / p,
        "l": c[_L] / p,
        "c": c[_C] / p,
        "v": c[_V] / 10**sd,
        "V": c[_Q] / 10 ** (pd + sd),
        "i": c[_I],
    }


def parse_candle_channel(channel: str) -> tuple[int, str] | None:
    """``"candle/0/1m"`` -> ``(0, "1m")``; None when it is not a candle channel of a known
    resolution."""
    parts = channel.split("/")
    if len(parts) != 3 or parts[0] != "candle" or parts[2] not in RESOLUTIONS:
        return None
    arg = parts[1]
    if not arg.isascii() or not arg.isdigit() or len(arg) > 3:
        return None
    return int(arg), parts[2]


def candle_channel(mi: int, res: str) -> str:
    """The ``channel`` field of candle replies: ``candle:0:1m``."""
    return f"candle:{mi}:{res}"
