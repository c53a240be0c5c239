"""What the replica remembers of the block stream beyond its caches: txs per block, the tx bodies
it submitted, funding settlements, candles and volumes. Fed once per applied block.

::

    apply_block ─► Applied ─► History.add ─► blocks: seq -> (TxRecord, ...)   (txs, blockTxs)
                                          ├► candles (candles.py)             (candles, candle WS)
                                          └► volumes (volumes.py)             (account WS channels)
    TxSubmission.send_txs ─► History.note_sent(hash, tx): the tx body for ``tx``'s ``info``

- A tx's ``sequence_index`` is ``seq << 20 | position`` (:func:`sequence_index`): unique,
  increasing in execution order, the same on every replica. A block holds at most ``2**20`` txs.
- ``txs`` paging walks blocks, not txs: :meth:`since` and :meth:`latest` are O(limit + blocks).
- Tx bodies: the block stream carries outcomes, not bodies, so a replica knows the bodies of the
  txs submitted through it (up to ``keep_txs``); others answer ``info: ""``.
- Bounded: blocks are dropped oldest first past ``keep_txs`` txs.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any, NamedTuple

from raydex.codecs import FundingChanged, FundingRecord, MarketRecord

from .candles import Candles
from .rows import Applied, TxRecord
from .volumes import AccountVolumes

__all__ = ["FUNDINGS_KEPT", "POSITION_BITS", "Funding", "History", "Settlement", "sequence_index"]

#: Settlements kept per market for ``fundings`` (a month of hours).
FUNDINGS_KEPT = 24 * 31


class Funding(NamedTuple):
    """A market's funding clock as the engine last reported it (``FundingChanged``)."""

    samples: int
    premium_sum: int
    #: the last settled hourly rate (1e-8, > 0: longs paid) and its hour mark (ms)
    last_rate: int
    last_funding_ms: int


class Settlement(NamedTuple):
    """One hour's funding of a market: its hour mark (ms), rate (1e-8) and the mark it was
    charged at (ticks)."""

    time_ms: int
    rate: int
    mark: int


#: Bits of ``sequence_index`` that hold the tx's position inside its block.
POSITION_BITS = 20


def sequence_index(r: TxRecord) -> int:
    """A tx's place in the whole history: ``seq << POSITION_BITS | position``."""
    return r.seq << POSITION_BITS | r.position


class History:
    """Txs by block, tx bodies sent through this replica, candles; see the module docstring."""

    def __init__(self, keep_txs: int = 100_000) -> None:
        self.keep_txs = keep_txs
        self.blocks: OrderedDict[int, tuple[TxRecord, ...]] = OrderedDict()
        self._txs = 0
        self._bodies: OrderedDict[bytes, Any] = OrderedDict()
        self.candles = Candles()
        #: account -> trade counts and volumes per window (volumes.py; account WS channels)
        self.volumes = AccountVolumes()
        #: market -> its funding clock (``market_stats``, ``funding-rates``)
        self.funding: dict[int, Funding] = {}
        #: market -> its settlements, oldest first (``fundings``)
        self.settlements: dict[int, deque[Settlement]] = {}

    def add(self, applied: Applied, markets: dict[int, MarketRecord]) -> None:
        """One applied block (not a duplicate): its txs and trades."""
        if applied.txs:
            self.blocks[applied.seq] = applied.txs
            self._txs += len(applied.txs)
            while self._txs > self.keep_txs and len(self.blocks) > 1:
                _, dropped = self.blocks.popitem(last=False)
                self._txs -= len(dropped)
        if applied.trades:
            self.candles.queue(applied.trades)  # folded after the block's fan-out
            self.volumes.queue(applied.trades, markets)

    # ---- funding --------------------------------------------------------------------------------

    def funding_changed(self, ev: FundingChanged, mark: int) -> None:
        """The engine ran a market's funding clock; a new ``last_funding_ms`` is a settlement,
        charged at ``mark`` (the market's mark when the block was applied)."""
        old = self.funding.get(ev.market_index)
        new = Funding(ev.samples, ev.premium_sum, ev.last_rate, ev.last_funding_ms)
        self.funding[ev.market_index] = new
        if ev.last_funding_ms and (old is None or old.last_funding_ms != ev.last_funding_ms):
            kept = self.settlements.get(ev.market_index)
            if kept is None:
                kept = self.settlements[ev.market_index] = deque(maxlen=FUNDINGS_KEPT)
            kept.append(Settlement(ev.last_funding_ms, ev.last_rate, mark))

    def restore_funding(self, r: FundingRecord) -> None:
        """The clock from a snapshot (its settlements before the snapshot are not in it)."""
        self.funding[r.market_index] = Funding(
            r.samples, r.premium_sum, r.last_rate, r.last_funding_ms
        )

    # ---- tx bodies ------------------------------------------------------------------------------

    def note_sent(self, tx_hash: bytes, tx: Any) -> None:
        """``tx`` was executed under ``tx_hash`` after being submitted through this replica."""
        bodies = self._bodies
        bodies[tx_hash] = tx
        if len(bodies) > self.keep_txs:
            bodies.popitem(last=False)

    def body(self, tx_hash: bytes) -> Any | None:
        """The tx submitted through this replica under ``tx_hash``, else None."""
        return self._bodies.get(tx_hash)

    # ---- reads ----------------------------------------------------------------------------------

    def block(self, seq: int) -> tuple[TxRecord, ...] | None:
        return self.blocks.get(seq)

    def latest(self, limit: int, max_type: int = 255) -> list[TxRecord]:
        """The newest ``limit`` txs of a type up to ``max_type``, oldest first."""
        out: list[TxRecord] = []
        for txs in reversed(self.blocks.values()):
            out.extend(r for r in reversed(txs) if r.tx_type <= max_type)
            if len(out) >= limit:
                break
        out = out[:limit]
        out.reverse()
        return out

    def since(self, index: int, limit: int, last_seq: int, max_type: int = 255) -> list[TxRecord]:
        """Up to ``limit`` txs of a type up to ``max_type`` with ``sequence_index >= index``,
        oldest first; ``last_seq``: the newest applied block (where the walk stops)."""
        blocks = self.blocks
        if not blocks:
            return []
        seq = max(index >> POSITION_BITS, next(iter(blocks)))
        out: list[TxRecord] = []
        while seq <= last_seq and len(out) < limit:
            for r in blocks.get(seq, ()):
                if r.tx_type <= max_type and sequence_index(r) >= index:
                    out.append(r)
            seq += 1
        return out[:limit]
