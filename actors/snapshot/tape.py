"""The market tape as of each snapshot: what a replica booting from that snapshot starts its
``recentTrades`` with, so that every replica behind one port shows the same history.

::

    holder: stamped block ──► TradeTape.add(seq, ts, events)   per market: the last ``kept`` trades
            snapshot(seq) ──► TradeTape.mark(seq)              a copy, kept for the newest snapshots
    replica boot: latest_snapshot() (seq S) ──► recent_trades(S) ──► its tape before catching up

A row is ``(market, TradeExecuted, tx hash, block seq, block time in ms)``: exactly what a replica
makes of the block itself (its ``TradeRow``: the trade, the hash of the last ``TxExecuted`` before
it in the block, the seq, the block's time), so a booted replica's tape continues as if it had
applied those blocks. ``kept`` is the replica's own per-market depth (``RECENT_TRADES``).

Limits: the tape is kept in memory only. A holder that restarts, or catches up by re-executing WAL
records (far behind the sequencer's ring), starts it again from the blocks it then applies; a
snapshot taken before the tape covers the whole depth offers what it has (a replica booting from
it shows fewer trades than its elders until new ones push the old out of theirs).
Cost: one dict lookup per event and one append per trade; a copy of ``kept`` x markets rows per
snapshot.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Any

from raydex.codecs import TradeExecuted, TxExecuted

__all__ = ["TAPE_DEPTH", "TradeTape"]

#: trades kept per market: as many as a replica keeps (``actors/replica/cache/state.py``)
TAPE_DEPTH = 100
#: snapshots whose tape is kept (a replica asks for the newest one's, at most a moment later)
_SNAPSHOTS_KEPT = 4

TapeRow = tuple[int, Any, bytes, int, int]


class TradeTape:
    """The last ``kept`` trades of every market, and a copy of them at each recent snapshot."""

    def __init__(self, kept: int = TAPE_DEPTH) -> None:
        self.kept = kept
        self.markets: dict[int, deque[TapeRow]] = {}
        self._marks: OrderedDict[int, tuple[TapeRow, ...]] = OrderedDict()

    def add(self, seq: int, ts_ms: int, events: Iterable[Any]) -> None:
        """Block ``seq``'s trades, in block order."""
        tx_hash = b""
        for ev in events:
            t = type(ev)
            if t is TxExecuted:
                tx_hash = ev.tx_hash
            elif t is TradeExecuted:
                mi = ev.market_index
                tape = self.markets.get(mi)
                if tape is None:
                    tape = self.markets[mi] = deque(maxlen=self.kept)
                tape.append((mi, ev, tx_hash, seq, ts_ms))

    def mark(self, seq: int) -> None:
        """The snapshot at ``seq`` was taken now: keep the tape as it is."""
        self._marks[seq] = tuple(row for tape in self.markets.values() for row in tape)
        while len(self._marks) > _SNAPSHOTS_KEPT:
            self._marks.popitem(last=False)

    def at(self, seq: int) -> tuple[TapeRow, ...] | None:
        """The tape as of snapshot ``seq``, None when it was not kept."""
        return self._marks.get(seq)

    def clear(self) -> None:
        """The state was rebuilt from elsewhere (a snapshot, a WAL replay): the tape restarts."""
        self.markets.clear()
        self._marks.clear()
