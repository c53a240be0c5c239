"""Per-account history for the authenticated reads, fed from the blocks the replica applies.

::

    ReplicaState.apply_block ─► Ledger.add_block(events, txs, seq, ...)   O(1): queued
    (after the block's fan-out and its waiters) Ledger.catch_up ─► fold ─► AccountLog per account
    http/private.py (auth.py checked the token) ─► Ledger.log(account) (catches up first) ─► JSON

Kept per account, newest last, each list capped (:class:`LedgerCaps`, oldest dropped):
``orders`` that left the book (with their filled quote, and the condition they came from: a
fired stop-loss / take-profit, a grouped entry, or for a TWAP's slice its TWAP), and the
conditional orders that ended without firing (their last ``ConditionalOrderUpdated``; a TWAP
with the quote its slices filled), ``trades`` (its fills), ``flows``
(deposits, withdrawals, transfers), ``fundings`` (from a position's ``funding_paid``),
``liquidations``, ``txs`` (its own) and ``pnl`` (hourly: realized pnl, inflow, outflow, volume).

- Amounts are the collateral change the tx caused (the block stream carries outcomes, not tx
  bodies); events are attributed to the last ``TxExecuted`` before them (the sequencer writes a
  tx's ``TxExecuted`` first). Mirrors seeded from the snapshot turn absolute events into changes.
- Off the latency path: ``add_block`` only queues; the fold runs after the block's fan-out and
  waiters (the service schedules :meth:`Ledger.catch_up`), on the next read, or inline past
  ``MAX_PENDING`` queued blocks.
- The log holds the blocks applied since the snapshot (``from_seq``); a resync keeps it and
  records the skipped blocks in ``gaps``.
- Memory is bounded by ``max_accounts`` logs and ``max_entries`` entries over all logs: past
  either, the least recently active account's whole log is dropped (its reads start empty).

Cost: O(1) per block on the apply loop; the fold is O(events) after it; a read walks at most one
account's capped lists.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from raydex.codecs import (
    BalanceChanged,
    ConditionalOrderUpdated,
    FundingChanged,
    LevelChanged,
    NonceUpdated,
    OrderStatus,
    OrderUpdated,
    PositionChanged,
    PositionLiquidated,
    TradeExecuted,
    TxExecuted,
    TxType,
)
from raydex.observability.gcstats import untrack

from .rows import TradeRow, TxRecord

__all__ = [
    "FLOW_TYPES",
    "MAX_PENDING",
    "AccountLog",
    "DoneOrder",
    "Flow",
    "FundingPayment",
    "Ledger",
    "LedgerCaps",
    "Liquidation",
    "PnlBucket",
]

#: Tx types whose collateral changes are flows (deposit/withdraw/transfer history).
FLOW_TYPES = frozenset({int(TxType.DEPOSIT), int(TxType.TRANSFER), int(TxType.WITHDRAW)})
_HOUR_MS = 3_600_000
_ACTIVE = int(OrderStatus.ACTIVE_LIMIT)
#: a conditional order's statuses while it is live (``engine._pending``)
_LIVE = frozenset({int(OrderStatus.PENDING), _ACTIVE, int(OrderStatus.IN_PROGRESS)})
_TRANSFER = int(TxType.TRANSFER)
_FLAT = (0, 0, 0)
#: Blocks queued before :meth:`Ledger.add_block` folds them itself.
MAX_PENDING = 256


@dataclass(frozen=True, slots=True)
class LedgerCaps:
    """Bounds of the per-account history. Larger: longer history served, more memory per active
    account (a few hundred bytes per entry)."""

    #: accounts with a log; the least recently active beyond are forgotten
    max_accounts: int = 100_000
    #: entries over all logs (~100-250 bytes each): beyond, the least recently active accounts'
    #: logs are forgotten, so the ledger's memory stays flat however many accounts trade
    max_entries: int = 500_000
    orders: int = 1_000
    trades: int = 1_000
    flows: int = 500
    fundings: int = 1_000
    liquidations: int = 100
    txs: int = 1_000
    #: hourly pnl buckets (31 days)
    pnl_hours: int = 24 * 31

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) < 1:
                raise ValueError(f"ledger cap {name} must be >= 1")


class DoneOrder(NamedTuple):
    """An order's last update (not active any more), its filled quote (ticks x lots) and when;
    ``cond``: the condition it came from (or the TWAP it is a slice of), None for a plain
    order. ``order`` is a ``ConditionalOrderUpdated`` for a conditional order that ended
    without firing."""

    order: OrderUpdated | ConditionalOrderUpdated
    filled_quote: int
    block_height: int
    timestamp_ms: int
    cond: ConditionalOrderUpdated | None = None


class Flow(NamedTuple):
    """Collateral moved by a deposit, withdrawal or transfer (micro-USDC, > 0)."""

    tx_type: int
    tx_hash: bytes
    from_account: int
    to_account: int
    amount: int
    block_height: int
    timestamp_ms: int


class FundingPayment(NamedTuple):
    """Funding settled on one position: ``change`` to the account (micro-USDC, < 0 = paid)."""

    market_index: int
    change: int
    position_size: int
    #: the market's last settled hourly rate (1e-8) when it was charged
    rate: int
    block_height: int
    timestamp_ms: int


class Liquidation(NamedTuple):
    event: PositionLiquidated
    tx_hash: bytes
    block_height: int
    timestamp_ms: int


class PnlBucket:
    """One hour of an account: realized pnl, inflow, outflow (micro-USDC), volume (quote)."""

    __slots__ = ("inflow", "outflow", "start_ms", "trade_pnl", "volume")

    def __init__(self, start_ms: int) -> None:
        self.start_ms = start_ms
        self.trade_pnl = 0
        self.inflow = 0
        self.outflow = 0
        self.volume = 0


class AccountLog:
    """One account's capped lists (see the module docstring), oldest first. A list is an empty
    tuple until its first entry (an empty ``deque`` costs ~600 bytes; most accounts fill a few
    of the seven), then a ``deque`` bounded by its cap."""

    __slots__ = ("caps", "entries", "flows", "fundings", "liquidations", "orders", "owner", "pnl",
                 "trades", "txs")  # fmt: skip

    def __init__(self, caps: LedgerCaps, owner: Ledger | None = None) -> None:
        self.caps = caps
        #: entries held (each list's length summed); ``owner`` counts them over all logs
        self.entries = 0
        self.owner = owner
        self.orders: deque[DoneOrder] | tuple[()] = ()
        self.trades: deque[TradeRow] | tuple[()] = ()
        self.flows: deque[Flow] | tuple[()] = ()
        self.fundings: deque[FundingPayment] | tuple[()] = ()
        self.liquidations: deque[Liquidation] | tuple[()] = ()
        self.txs: deque[TxRecord] | tuple[()] = ()
        self.pnl: deque[PnlBucket] | tuple[()] = ()

    def add_order(self, x: DoneOrder) -> None:
        d = self.orders
        if isinstance(d, tuple):
            d = self.orders = deque(maxlen=self.caps.orders)
        if len(d) != d.maxlen:
            self._grew()
        d.append(x)
        untrack(x)

    def add_trade(self, x: TradeRow) -> None:
        d = self.trades
        if isinstance(d, tuple):
            d = self.trades = deque(maxlen=self.caps.trades)
        if len(d) != d.maxlen:
            self._grew()
        d.append(x)
        untrack(x)

    def add_flow(self, x: Flow) -> None:
        d = self.flows
        if isinstance(d, tuple):
            d = self.flows = deque(maxlen=self.caps.flows)
        if len(d) != d.maxlen:
            self._grew()
        d.append(x)
        untrack(x)

    def add_funding(self, x: FundingPayment) -> None:
        d = self.fundings
        if isinstance(d, tuple):
            d = self.fundings = deque(maxlen=self.caps.fundings)
        if len(d) != d.maxlen:
            self._grew()
        d.append(x)
        untrack(x)

    def add_liquidation(self, x: Liquidation) -> None:
        d = self.liquidations
        if isinstance(d, tuple):
            d = self.liquidations = deque(maxlen=self.caps.liquidations)
        if len(d) != d.maxlen:
            self._grew()
        d.append(x)
        untrack(x)

    def add_tx(self, x: TxRecord) -> None:
        d = self.txs
        if isinstance(d, tuple):
            d = self.txs = deque(maxlen=self.caps.txs)
        if len(d) != d.maxlen:
            self._grew()
        d.append(x)
        untrack(x)

    def bucket(self, ts_ms: int) -> PnlBucket:
        """The hourly pnl bucket holding ``ts_ms`` (created when the hour is new)."""
        start = ts_ms - ts_ms % _HOUR_MS
        pnl = self.pnl
        if isinstance(pnl, tuple):
            pnl = self.pnl = deque(maxlen=self.caps.pnl_hours)
        if not pnl or pnl[-1].start_ms != start:
            if len(pnl) != pnl.maxlen:
                self._grew()
            pnl.append(PnlBucket(start))
        return pnl[-1]

    def _grew(self) -> None:
        self.entries += 1
        if self.owner is not None:
            self.owner.entries += 1


class Ledger:
    """Every account's :class:`AccountLog`; fed by ``ReplicaState.apply_block`` only."""

    def __init__(self, caps: LedgerCaps | None = None, from_seq: int = 1) -> None:
        self.caps = caps if caps is not None else LedgerCaps()
        #: the first block whose events are in the logs
        self.from_seq = from_seq
        #: the last block queued (a block at or below is not logged again)
        self.last_seq = from_seq - 1
        #: ``(first, last)`` seq ranges skipped by resyncs: their events are missing
        self.gaps: list[tuple[int, int]] = []
        self._logs: OrderedDict[int, AccountLog] = OrderedDict()
        #: entries over all logs (``LedgerCaps.max_entries``); ``dropped``: logs forgotten
        self.entries = 0
        self.dropped = 0
        self._pending: deque[tuple[Sequence[object], Sequence[TxRecord], int, int]] = deque()
        #: mirrors: account -> collateral; (account, market) -> [realized pnl, funding, size]
        self._collateral: dict[int, int] = {}
        self._positions: dict[tuple[int, int], tuple[int, int, int]] = {}
        #: market -> its last settled funding rate (1e-8)
        self._rates: dict[int, int] = {}
        #: resting orders' filled quote so far (ticks x lots), until they leave the book (a
        #: running TWAP's: its slices')
        self._quote: dict[int, int] = {}
        #: the last ``ConditionalOrderUpdated`` of each live conditional order, until it ends
        #: or its order leaves the book
        self._conds: dict[int, ConditionalOrderUpdated] = {}
        #: per running TWAP, the slice its events last named (each slice linked once)
        self._last_slice: dict[int, int] = {}

    def __len__(self) -> int:
        self.catch_up()
        return len(self._logs)

    # ---- seeded from the snapshot --------------------------------------------------------------

    def seed_account(self, account: int, collateral: int) -> None:
        self._collateral[account] = collateral

    def seed_position(
        self, account: int, market: int, realized_pnl: int, funding_paid: int, size: int
    ) -> None:
        self._positions[(account, market)] = (realized_pnl, funding_paid, size)

    def seed_rate(self, market: int, rate: int) -> None:
        self._rates[market] = rate

    def log(self, account: int) -> AccountLog | None:
        """``account``'s log, None if nothing of it was seen (reads do not create logs)."""
        self.catch_up()
        return self._logs.get(account)

    def filled_quote(self, order_index: int) -> int:
        """What a resting order filled so far (ticks x lots) since the ledger began."""
        self.catch_up()
        return self._quote.get(order_index, 0)

    def skipped(self, first: int, last: int) -> None:
        """A resync jumped from block ``first - 1`` to the snapshot at ``last``."""
        self.catch_up()
        if last >= first:
            self.gaps.append((first, last))

    def rebase(self, other: Ledger, resting: Collection[int]) -> None:
        """After a resync: keep the logs, take the mirrors of the fresh state's ledger; the
        filled quotes of the orders still resting (``resting``) are kept."""
        self.catch_up()
        self._collateral, self._positions = other._collateral, other._positions
        self._rates = other._rates
        self._quote = {oi: q for oi, q in self._quote.items() if oi in resting}
        self.last_seq = max(self.last_seq, other.last_seq)

    # ---- fed by apply_block ---------------------------------------------------------------------

    def add_block(
        self, events: Sequence[object], txs: Sequence[TxRecord], seq: int, ts_ms: int
    ) -> None:
        """Queue one applied block (O(1)). A block at or below ``last_seq`` (replayed after a
        resync to an older snapshot) is not logged again; it only moves the mirrors."""
        if seq <= self.last_seq:
            self.catch_up()
            self._mirror(events)
            return
        self.last_seq = seq
        self._pending.append((events, txs, seq, ts_ms))
        if len(self._pending) > MAX_PENDING:
            self.catch_up()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def catch_up(self) -> None:
        """Fold every queued block into the logs."""
        pending = self._pending
        while pending:
            self._fold(*pending.popleft())

    def _log(self, account: int) -> AccountLog:
        logs = self._logs
        log = logs.get(account)
        if log is None:
            log = logs[account] = AccountLog(self.caps, self)
            if len(logs) > self.caps.max_accounts:
                self._forget()
        else:
            logs.move_to_end(account)
        while self.entries > self.caps.max_entries and len(logs) > 1:
            self._forget()
        return log

    def _forget(self) -> None:
        """Drop the least recently active account's log."""
        _, old = self._logs.popitem(last=False)
        self.entries -= old.entries
        old.owner = None
        self.dropped += 1

    def _fold(
        self, events: Sequence[object], txs: Sequence[TxRecord], height: int, ts_ms: int
    ) -> None:
        """One block's events into the logs. Branches by frequency; fields by position (a
        NamedTuple's attribute is a property call, its index is not): per tx a TxExecuted, a
        NonceUpdated, order updates and levels; per fill a trade, two balances, two positions."""
        tx_type = tx_account = 0
        tx_hash = b""
        position = -1
        collateral = self._collateral
        positions = self._positions
        log_of = self._log
        for ev in events:
            t = type(ev)
            if t is LevelChanged or t is NonceUpdated:
                continue
            if t is OrderUpdated:
                o: OrderUpdated = ev  # type: ignore[assignment]
                if o[12] != _ACTIVE or not o[7]:  # status, remaining_base_amount
                    quote = self._quote.pop(o[1], 0)
                    cond = self._conds.pop(o[1], None) if self._conds else None
                    log_of(o[2]).add_order(DoneOrder(o, quote, height, ts_ms, cond))
            elif t is ConditionalOrderUpdated:
                self._cond(ev, height, ts_ms)  # type: ignore[arg-type]
            elif t is TxExecuted:
                position += 1
                rec = txs[position]
                tx_hash, tx_type, tx_account = rec[0], rec[1], rec[2]
                log_of(tx_account).add_tx(rec)
            elif t is BalanceChanged:
                b: BalanceChanged = ev  # type: ignore[assignment]
                ai, new = b[0], b[1]
                old = collateral.get(ai, 0)
                collateral[ai] = new
                if tx_type in FLOW_TYPES:
                    self._flow(tx_type, tx_hash, tx_account, ai, new - old, height, ts_ms)
            elif t is PositionChanged:
                p: PositionChanged = ev  # type: ignore[assignment]
                key = (p[0], p[1])
                was = positions.get(key, _FLAT)
                positions[key] = (p[4], p[5], p[2])  # realized pnl, funding paid, size
                if was[0] != p[4] or was[1] != p[5]:
                    self._position(p, was, height, ts_ms)
            elif t is TradeExecuted:
                self._fill(ev, tx_hash, height, ts_ms)  # type: ignore[arg-type]
            elif t is PositionLiquidated:
                liq: PositionLiquidated = ev  # type: ignore[assignment]
                log_of(liq.account_index).add_liquidation(Liquidation(liq, tx_hash, height, ts_ms))
            elif t is FundingChanged:
                f: FundingChanged = ev  # type: ignore[assignment]
                self._rates[f.market_index] = f.last_rate

    def _cond(self, c: ConditionalOrderUpdated, height: int, ts_ms: int) -> None:
        """A conditional order's state: kept while live; one that ends without firing joins
        its account's orders. A TWAP's event after a slice names the slice, which ended just
        before it in the block (an IOC market order): that slice's entry, its account's last
        order, is linked to the TWAP and its filled quote counted as the TWAP's."""
        oi = c[1]
        s = c.slice_order_index
        if s and s != self._last_slice.get(oi):
            self._last_slice[oi] = s
            log = self._logs.get(c[2])
            done = log.orders if log is not None else ()
            if isinstance(done, deque) and done and done[-1].order[1] == s:
                d = done[-1]
                done[-1] = d._replace(cond=c)
                if d.filled_quote:
                    self._quote[oi] = self._quote.get(oi, 0) + d.filled_quote
        if c[12] in _LIVE:  # status
            self._conds[oi] = c
            return
        self._conds.pop(oi, None)
        self._last_slice.pop(oi, None)
        quote = self._quote.pop(oi, 0)
        self._log(c[2]).add_order(DoneOrder(c, quote, height, ts_ms))

    def _mirror(self, events: Sequence[object]) -> None:
        for ev in events:
            t = type(ev)
            if t is BalanceChanged:
                b: BalanceChanged = ev  # type: ignore[assignment]
                self._collateral[b[0]] = b[1]
            elif t is PositionChanged:
                p: PositionChanged = ev  # type: ignore[assignment]
                self._positions[(p[0], p[1])] = (p[4], p[5], p[2])
            elif t is FundingChanged:
                f: FundingChanged = ev  # type: ignore[assignment]
                self._rates[f.market_index] = f.last_rate

    def _fill(self, t: TradeExecuted, tx_hash: bytes, height: int, ts_ms: int) -> None:
        row = TradeRow(t, tx_hash, height, ts_ms)
        quote = t.price * t.size
        q = self._quote
        for ai, oi in (
            (t.taker_account_index, t.taker_order_index),
            (t.maker_account_index, t.maker_order_index),
        ):
            log = self._log(ai)
            log.add_trade(row)
            log.bucket(ts_ms).volume += quote
            q[oi] = q.get(oi, 0) + quote

    def _flow(
        self, tx_type: int, tx_hash: bytes, tx_account: int, account: int, delta: int,
        height: int, ts_ms: int,
    ) -> None:  # fmt: skip
        """The collateral of ``account`` changed by ``delta`` in a flow tx of ``tx_account``."""
        if not delta:
            return
        if tx_type == _TRANSFER:
            if account == tx_account:
                return  # the sender's side: recorded with the receiver's, which names both
            sender = self._log(tx_account)
            sender.bucket(ts_ms).outflow += delta
            sender.add_flow(Flow(tx_type, tx_hash, tx_account, account, delta, height, ts_ms))
            src = tx_account
        else:
            src = account
        log = self._log(account)
        if delta > 0:
            log.bucket(ts_ms).inflow += delta
        else:
            log.bucket(ts_ms).outflow -= delta
        log.add_flow(Flow(tx_type, tx_hash, src, account, abs(delta), height, ts_ms))

    def _position(
        self, p: PositionChanged, was: tuple[int, int, int], height: int, ts_ms: int
    ) -> None:
        """A position's realized pnl or funding paid changed (``was``: the mirror before)."""
        pnl, paid = p.realized_pnl - was[0], p.funding_paid - was[1]
        log = self._log(p.account_index)
        if pnl:
            log.bucket(ts_ms).trade_pnl += pnl
        if paid:  # charged on the size held before this change
            rate = self._rates.get(p.market_index, 0)
            log.add_funding(FundingPayment(p.market_index, -paid, was[2], rate, height, ts_ms))
