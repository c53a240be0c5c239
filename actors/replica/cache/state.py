"""The replica's caches: built from a snapshot, advanced by blocks, read by the app and fan-out.

Invariants (``validate()`` checks the structural ones):

- ``seq`` is the last applied block's. ``apply_block`` of ``seq <= self.seq`` is a no-op
  (``Applied.duplicate``); ``seq != self.seq + 1`` raises :class:`GapError` and changes nothing
  (the caller resyncs). Events carry absolute values: applying one assigns, never increments.
- Books: per market and side a ``dict[price, size]`` and its prices sorted (``bisect``), owned by
  the apply loop; readers take ``state.books[m]``, an immutable :class:`BookSnapshot` built on
  the first read after a change and shared by reference (one thread: it is what an eager rebuild
  would have built). A book's ``nonce`` is the seq of the last block that changed it; each
  :class:`BookDelta`'s ``begin_nonce`` is the one before, so the chain per market is unbroken.
- Pending nonces: txs sent (:meth:`note_sent`), not yet seen in a block. ``next_nonce`` =
  ``max(cached last nonce, highest pending) + 1``; an entry clears with its tx's ``TxExecuted``
  (whatever its code) or by :meth:`forget_sent`.
- Read indexes kept in step by the same writes (``level_orders``, ``account_keys``,
  ``AccountCache.order_counts``), so no read walks the whole state.
- Conditional orders (``ConditionalOrderUpdated``, engine ``_triggers``): the waiting ones
  (pending stop-loss / take-profit and grouped children, running TWAPs) in ``conds`` and their
  account's ``AccountCache.conds``; the conditions of orders on the book (a fired
  stop-loss-limit, a grouped entry) in ``attached`` while their order rests (an entry whose
  order has left is stale: :meth:`records` skips it, and stale ones are dropped whenever
  ``attached`` doubles). A condition with a final status leaves both.

Cost: ``apply_block`` is O(events) dict work plus O(log L) per level added or removed (L levels
on the book); a snapshot is O(L) on the first read after a change.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raydex.codecs import (
    BLOCK_DECODE_ACCELERATED,
    BPS,
    ApiKeyChanged,
    ApiKeyRecord,
    BalanceChanged,
    Block,
    ConditionalOrderRecord,
    ConditionalOrderUpdated,
    ExchangeBalancesChanged,
    ExchangeRecord,
    FundingChanged,
    FundingRecord,
    L1AddressRecord,
    L1AddressSet,
    LevelChanged,
    MarketChanged,
    MarketRecord,
    MarketStatsChanged,
    NonceUpdated,
    OrderRecord,
    OrderStatus,
    OrderUpdated,
    PositionChanged,
    PositionRecord,
    SubAccountCreated,
    TradeExecuted,
    TriggerStatus,
    TxExecuted,
    Verifier,
    decode_block,
)
from raydex.codecs import AccountRecord as _AccountRecord
from raydex.engine import state_digest
from raydex.engine.rules import (
    SKIP_NONCE_FLAG,
)
from raydex.observability.gcstats import untrack, untrack_all

from .history import History
from .ledger import Ledger
from .margin import MarginSummary, equity_and_requirement, margin_summary
from .rows import Applied, BookDelta, Levels, TradeRow, TxRecord

_ACTIVE = int(OrderStatus.ACTIVE_LIMIT)
#: a conditional order's statuses while it is live (``engine._pending``)
_LIVE = frozenset({int(OrderStatus.PENDING), _ACTIVE, int(OrderStatus.IN_PROGRESS)})
#: trigger statuses of a condition that rides an order on the book (fired, or a grouped entry)
_ON_BOOK = frozenset({int(TriggerStatus.READY), int(TriggerStatus.NA)})
#: Trades kept per market for ``recentTrades`` / ``trade`` snapshots.
RECENT_TRADES = 100
#: Tx results kept for ``tx?by=hash`` (oldest dropped first).
TX_RESULTS = 100_000
_DAY_MS = 86_400_000
_new = tuple.__new__
#: A tx's nonce proper (without the SkipNonce flag, ``raydex.engine.rules``).
_NONCE_MASK = SKIP_NONCE_FLAG - 1

#: price -> {order index: resting order} for one side of one market
LevelOrders = dict[int, dict[int, OrderRecord]]


class GapError(Exception):
    """A block arrived out of order: the replica must resync from a snapshot."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"expected block seq {expected}, got {got}")
        self.expected = expected
        self.got = got


@dataclass(frozen=True, slots=True)
class BookSnapshot:
    """One market's book at ``seq``: levels best first, ``(price ticks, size lots)``."""

    market_index: int
    bids: Levels
    asks: Levels
    nonce: int
    seq: int


class Books(Mapping[int, BookSnapshot]):
    """market -> :class:`BookSnapshot`, each built on the first read after its market changed.

    Shares the apply loop's mutable books (``bids``/``asks``: market -> price -> size; their
    ascending price lists; ``nonces``: market -> seq of the last block that changed it), so a
    replica that takes over another's caches (``ReplicaState.reload``) keeps working."""

    __slots__ = ("_asks", "_bids", "_nonces", "_prices", "_snaps", "_stale")

    def __init__(
        self,
        bids: dict[int, dict[int, int]],
        asks: dict[int, dict[int, int]],
        prices: tuple[dict[int, list[int]], dict[int, list[int]]],
        nonces: dict[int, int],
    ) -> None:
        self._bids, self._asks, self._prices, self._nonces = bids, asks, prices, nonces
        self._snaps: dict[int, BookSnapshot] = {}
        self._stale: set[int] = set()

    def changed(self, mi: int) -> None:
        """Market ``mi``'s book changed: its snapshot is rebuilt on the next read."""
        self._stale.add(mi)

    def changed_all(self, mis: Iterable[int]) -> None:
        """:meth:`changed` for each market in ``mis`` (one call per block)."""
        self._stale.update(mis)

    def __getitem__(self, mi: int) -> BookSnapshot:
        if mi in self._stale:
            self._stale.discard(mi)
            bid_prices = self._prices[0][mi][::-1]
            ask_prices = self._prices[1][mi]
            nonce = self._nonces[mi]
            self._snaps[mi] = BookSnapshot(
                mi,
                tuple(zip(bid_prices, map(self._bids[mi].__getitem__, bid_prices), strict=True)),
                tuple(zip(ask_prices, map(self._asks[mi].__getitem__, ask_prices), strict=True)),
                nonce,
                nonce,
            )
        return self._snaps[mi]

    def __iter__(self) -> Iterator[int]:
        return iter(self._snaps)

    def __len__(self) -> int:
        return len(self._snaps)

    def add(self, mi: int) -> None:
        """A new market: an empty snapshot at its nonce."""
        self._snaps[mi] = BookSnapshot(mi, (), (), self._nonces[mi], self._nonces[mi])
        self._stale.discard(mi)


@dataclass(slots=True)
class MarketStats:
    """Rolling per-UTC-day figures from the trades this replica saw (reset at the day boundary)."""

    day: int = -1
    trades: int = 0
    base_volume: int = 0
    quote_volume: int = 0
    first_price: int = 0
    high: int = 0
    low: int = 0


@dataclass(slots=True)
class AccountCache:
    collateral: int
    positions: dict[int, PositionRecord] = field(default_factory=dict)
    #: resting orders by exchange order index
    orders: dict[int, OrderRecord] = field(default_factory=dict)
    #: market -> [bid lots, ask lots] of the resting non-reduce-only orders, kept in step with
    #: ``orders`` so the dry-run's margin check is O(markets), not O(open orders)
    open_lots: dict[int, list[int]] = field(default_factory=dict)
    #: client order index -> resting orders carrying it (uniqueness check in O(1))
    cois: dict[int, int] = field(default_factory=dict)
    #: market -> resting orders there (``open_order_count`` of a position without a walk)
    order_counts: dict[int, int] = field(default_factory=dict)
    #: its waiting conditional orders by order index (``ReplicaState.conds``)
    conds: dict[int, ConditionalOrderRecord] = field(default_factory=dict)

    def index(self, r: OrderRecord, sign: int) -> None:
        """Add (``sign=1``) or remove (``-1``) one resting order from the aggregates. Fields by
        position (a NamedTuple's attribute is a descriptor call, its index is not): this runs
        once or twice per order update."""
        if not r[11]:  # reduce_only
            open_lots = self.open_lots
            mi = r[0]
            lots = open_lots.get(mi)
            if lots is None:
                lots = open_lots[mi] = [0, 0]
            lots[r[4]] += sign * r[7]  # is_ask, remaining_base_amount
            if not lots[0] and not lots[1]:
                del open_lots[mi]
        coi = r[3]
        if coi:
            cois = self.cois
            n = cois.get(coi, 0) + sign
            if n:
                cois[coi] = n
            else:
                del cois[coi]

    def reindex(self, old: OrderRecord, r: OrderRecord) -> None:
        """``index(old, -1)`` then ``index(r, 1)``: the same aggregates (as mappings), with one
        open-lots update and none of the client order ids where both rest in the same market and
        side with the same reduce-only flag and client order id (a modify or a partial fill,
        most order updates)."""
        if old[0] == r[0] and old[4] == r[4] and old[11] == r[11] and old[3] == r[3]:
            if r[11]:  # reduce-only: outside the open lots; the client order id's count holds
                return
            open_lots = self.open_lots
            lots = open_lots.get(r[0])
            if lots is not None:
                lots[r[4]] += r[7] - old[7]
                if not lots[0] and not lots[1]:
                    del open_lots[r[0]]
                return
        self.index(old, -1)
        self.index(r, 1)


try:  # optional C extension (actors/replica/cache/_cacheloop.c), built where a compiler is
    from . import _cacheloop  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised where no C compiler exists
    _cacheloop = None
if _cacheloop is not None:
    _cacheloop.configure(
        (
            OrderUpdated,
            LevelChanged,
            TxExecuted,
            NonceUpdated,
            BalanceChanged,
            PositionChanged,
            TradeExecuted,
            MarketStatsChanged,
            OrderRecord,
            TxRecord,
            ApiKeyRecord,
            PositionRecord,
            TradeRow,
            MarketRecord,
            BookDelta,
        ),
        _ACTIVE,
        untrack,
        AccountCache,
    )
#: whether ``apply_block`` runs the C loop (``_cacheloop.c``) or ``_apply_events``
CACHE_LOOP_ACCELERATED = _cacheloop is not None
#: the apply's C loops, each True where it runs and False where its Python twin does (status,
#: ``raydex_replica_native_info``, the loadtest report)
NATIVE_LOOPS: Mapping[str, bool] = {
    "block_decode": BLOCK_DECODE_ACCELERATED,
    "cache_loop": CACHE_LOOP_ACCELERATED,
}


class ReplicaState:
    """Every cache the API serves from; see the module docstring for the invariants."""

    def __init__(self, verifier: Verifier | None = None) -> None:
        self.verifier = verifier if verifier is not None else Verifier()
        self.seq = 0
        self.height = 0
        self.timestamp_ns = 0
        self.markets: dict[int, MarketRecord] = {}
        self.stats: dict[int, MarketStats] = {}
        self._bids: dict[int, dict[int, int]] = {}
        self._asks: dict[int, dict[int, int]] = {}
        #: per side (bids, asks): market -> the book's prices, ascending
        self._prices: tuple[dict[int, list[int]], dict[int, list[int]]] = ({}, {})
        #: market -> seq of the last block that changed its book (its ``nonce``)
        self._book_nonces: dict[int, int] = {}
        self.books = Books(self._bids, self._asks, self._prices, self._book_nonces)
        self.orders: dict[int, OrderRecord] = {}
        #: waiting conditional orders, and the conditions of orders on the book (see the
        #: module docstring), by order index; ``attached`` is pruned past ``_attached_cap``
        self.conds: dict[int, ConditionalOrderRecord] = {}
        self.attached: dict[int, ConditionalOrderRecord] = {}
        self._attached_cap = 64
        #: market -> (bids, asks), each price -> {order index: resting order}: the orders of a
        #: level without a walk over the market (``orderBookOrders`` reads them best level first)
        self.level_orders: dict[int, tuple[LevelOrders, LevelOrders]] = {}
        self.accounts: dict[int, AccountCache] = {}
        #: (account, api key) -> [last nonce, public key]
        self.api_keys: dict[tuple[int, int], ApiKeyRecord] = {}
        #: account -> its API key indexes (``apikeys`` reads one account's keys without a walk)
        self.account_keys: dict[int, set[int]] = {}
        #: account -> its L1 address (20 bytes), and back (``accountsByL1Address``)
        self.l1_addresses: dict[int, bytes] = {}
        self.by_l1: dict[bytes, int] = {}
        #: sub-account -> its master (a master, its own, has no entry), and each master's
        #: sub-accounts in creation order (``accountsByL1Address``, ``account``)
        self.masters: dict[int, int] = {}
        self.sub_accounts: dict[int, list[int]] = {}
        self.trades: dict[int, deque[TradeRow]] = {}
        self.txs: dict[bytes, TxRecord] = {}
        #: ``txs``' keys, oldest first: the oldest result is dropped past ``tx_results``
        self._tx_order: deque[bytes] = deque()
        #: tx results ``txs`` keeps (the oldest dropped first)
        self.tx_results = TX_RESULTS
        self.fee_pool = 0
        self.insurance_fund = 0
        self._pending: dict[tuple[int, int], dict[int, int]] = {}
        #: txs per block, tx bodies sent through here, candles (history.py)
        self.history = History(TX_RESULTS)
        #: per-account history for the authenticated reads (ledger.py), folded after the block
        self.ledger = Ledger()

    # ---- boot -----------------------------------------------------------------------------------

    @classmethod
    def from_records(
        cls, records: Iterable[Any], seq: int, height: int, verifier: Verifier | None = None
    ) -> ReplicaState:
        """Caches from snapshot records (``Engine.records()`` order) taken at block ``seq``."""
        st = cls(verifier)
        st.seq = seq
        st.height = height
        st.ledger = ledger = Ledger(from_seq=seq + 1)
        for r in records:
            t = type(r)
            if t is MarketRecord:
                st._add_market(r)
            elif t is _AccountRecord:
                st.accounts[r.account_index] = AccountCache(r.collateral)
                if r.master_index != r.account_index:
                    st._add_sub_account(r.account_index, r.master_index)
                ledger.seed_account(r.account_index, r.collateral)
            elif t is PositionRecord:
                st._account(r.account_index).positions[r.market_index] = r
                ledger.seed_position(
                    r.account_index, r.market_index, r.realized_pnl, r.funding_paid, r.size
                )
            elif t is ApiKeyRecord:
                st._put_key(r)
            elif t is OrderRecord:
                st._put_order(r)
                side = st._asks if r.is_ask else st._bids
                book = side[r.market_index]
                book[r.price] = book.get(r.price, 0) + r.remaining_base_amount
            elif t is ExchangeRecord:
                st.fee_pool, st.insurance_fund = r.fee_pool, r.insurance_fund
            elif t is FundingRecord:
                st.history.restore_funding(r)
                ledger.seed_rate(r.market_index, r.last_rate)
            elif t is L1AddressRecord:
                st.l1_addresses[r.account_index] = r.l1_address
                if r.account_index not in st.masters:  # (a sub-account shares its master's)
                    st.by_l1[r.l1_address] = r.account_index
            elif t is ConditionalOrderRecord:
                st._put_cond(r)
            else:
                raise TypeError(f"not a snapshot record: {t.__name__}")
        for mi in st.markets:
            st._prices[0][mi][:] = sorted(st._bids[mi])
            st._prices[1][mi][:] = sorted(st._asks[mi])
            st._book_nonces[mi] = seq
            st.books.changed(mi)
        return st

    def reload(self, other: ReplicaState) -> None:
        """Take over ``other``'s caches in place (after a resync from a snapshot), so every holder
        of a reference to this state (the app, the fan-out) sees the new caches. The ledger is
        kept (what it holds stays true), the blocks the resync skipped recorded as a gap."""
        ledger = self.ledger
        ledger.skipped(self.seq + 1, other.seq)
        ledger.rebase(other.ledger, other.orders)
        self.__dict__.update(other.__dict__)
        self.ledger = ledger

    def seed_trades(self, rows: Iterable[tuple[int, Any, bytes, int, int]]) -> None:
        """The market tape as of this state's seq (the holder's, ``actors/snapshot/tape.py``):
        ``(market, TradeExecuted, tx hash, seq, ms)`` rows, oldest first, as this replica would
        hold them had it applied those blocks itself (a replica booted later serves the same
        ``recentTrades`` as its elders). Rows of unknown markets or newer seqs are ignored."""
        for mi, trade, tx_hash, seq, ts_ms in rows:
            tape = self.trades.get(mi)
            if tape is not None and seq <= self.seq:
                tape.append(_new(TradeRow, (trade, tx_hash, seq, ts_ms)))

    def _add_market(self, r: MarketRecord) -> None:
        mi = r.market_index
        self.markets[mi] = r
        if mi not in self._bids:
            self._bids[mi] = {}
            self._asks[mi] = {}
            self._prices[0][mi] = []
            self._prices[1][mi] = []
            self._book_nonces[mi] = self.seq
            self.level_orders[mi] = ({}, {})
            self.trades[mi] = deque(maxlen=RECENT_TRADES)
            self.stats[mi] = MarketStats()
            self.books.add(mi)

    def _add_sub_account(self, ai: int, master: int) -> None:
        """``ai`` is a sub-account of ``master``: in ``masters``, and in the master's list, kept in
        creation order (highest index first: the engine hands them out counting down)."""
        self.masters[ai] = master
        subs = self.sub_accounts.get(master)
        if subs is None:
            self.sub_accounts[master] = [ai]
        elif ai not in subs:
            subs.append(ai)
            subs.sort(reverse=True)

    def master_of(self, ai: int) -> int:
        """``ai``'s master account (its own index for a master)."""
        return self.masters.get(ai, ai)

    def _account(self, ai: int) -> AccountCache:
        acct = self.accounts.get(ai)
        if acct is None:
            acct = self.accounts[ai] = AccountCache(0)
        return acct

    # Order records are read by position here (market 0, order 1, account 2, is_ask 4, price 5):
    # an update runs these once per OrderUpdated, ~10 times a block.

    def _put_order(self, r: OrderRecord) -> None:
        mi, oi, price = r[0], r[1], r[5]
        acct = self.accounts.get(r[2])
        if acct is None:
            acct = self._account(r[2])
        orders = self.orders
        old = orders.get(oi)
        if old is None:
            counts = acct.order_counts
            counts[mi] = counts.get(mi, 0) + 1
        elif old[5] != price or old[4] != r[4]:
            self._unlevel(old)
        orders[oi] = r
        side = self.level_orders[mi][r[4]]
        level = side.get(price)
        if level is None:
            side[price] = {oi: r}
        else:
            level[oi] = r
        acct.orders[oi] = r
        if old is None:
            acct.index(r, 1)
        else:
            acct.reindex(old, r)

    def _drop_order(self, oi: int) -> None:
        r = self.orders.pop(oi, None)
        if r is not None:
            mi, price = r[0], r[5]
            side = self.level_orders[mi][r[4]]
            level = side[price]
            del level[oi]
            if not level:
                del side[price]
            acct = self.accounts[r[2]]
            del acct.orders[oi]
            acct.index(r, -1)
            counts = acct.order_counts
            n = counts[mi] - 1
            if n:
                counts[mi] = n
            else:
                del counts[mi]

    def _unlevel(self, r: OrderRecord) -> None:
        side = self.level_orders[r[0]][r[4]]
        price = r[5]
        level = side[price]
        del level[r[1]]
        if not level:
            del side[price]

    def _put_cond(self, r: ConditionalOrderRecord) -> None:
        """A conditional order's state (the fields of its last ``ConditionalOrderUpdated``)."""
        oi = r[1]
        acct = self._account(r[2])
        if r[12] in _LIVE and r[13] not in _ON_BOOK:  # status, trigger_status
            self.conds[oi] = acct.conds[oi] = r
            return
        if self.conds.pop(oi, None) is not None:
            del acct.conds[oi]
        if r[12] in _LIVE:
            attached = self.attached
            attached[oi] = r
            if len(attached) > self._attached_cap:
                orders = self.orders
                self.attached = {i: c for i, c in attached.items() if i in orders or i == oi}
                self._attached_cap = max(64, 2 * len(self.attached))
        else:
            self.attached.pop(oi, None)

    def _put_key(self, r: ApiKeyRecord) -> None:
        self.api_keys[(r.account_index, r.api_key_index)] = r
        keys = self.account_keys.get(r.account_index)
        if keys is None:
            keys = self.account_keys[r.account_index] = set()
        keys.add(r.api_key_index)

    # ---- blocks ---------------------------------------------------------------------------------

    def apply_block(self, block: bytes | Block) -> Applied:
        """Apply one block (encoded frame or decoded); see the module docstring for seq rules."""
        blk = decode_block(block) if isinstance(block, bytes | bytearray | memoryview) else block
        seq = blk.seq
        if seq <= self.seq:
            return Applied(seq, blk.height, blk.timestamp_ns, {}, {}, frozenset(), (), True)
        if seq != self.seq + 1:
            raise GapError(self.seq + 1, seq)
        ts_ms = blk.timestamp_ns // 1_000_000
        changed: dict[int, Any] = {}  # market -> its changed (bid, ask) levels
        trades: dict[int, list[TradeRow]] = {}
        touched: set[int] = set()
        txs: list[TxRecord] = []
        if _cacheloop is not None:
            _cacheloop.apply_events(
                self,
                blk.events,
                seq,
                ts_ms,
                changed,
                trades,
                touched,
                txs,
                self._apply_rare,
                self._book_nonces,
            )
        else:
            self._apply_events(blk.events, seq, ts_ms, changed, trades, touched, txs)
        for mi, rows in trades.items():
            self._count_trades(mi, rows, ts_ms)
        self.seq = seq
        self.height = blk.height
        self.timestamp_ns = blk.timestamp_ns
        deltas: dict[int, BookDelta] = changed  # market -> its BookDelta, made by the loop
        self.books.changed_all(deltas)
        # Every record the block made is an immutable tuple of atoms: out of the collector's lists
        # (observability/_untrack.c), so no collection walks the history the replica keeps, nor
        # the current orders, positions, key nonces and market stats (untracked as made, by the
        # loop; the C loop also untracks the events, tx results and trades as it goes).
        if _cacheloop is None:
            untrack_all(blk.events)
            untrack_all(txs)
            for rows in trades.values():
                untrack_all(rows)
        applied = _new(
            Applied,
            (
                seq,
                blk.height,
                blk.timestamp_ns,
                deltas,
                trades,
                frozenset(touched),
                tuple(txs),
                False,
                blk.events,
            ),
        )
        self.history.add(applied, self.markets)
        self.ledger.add_block(blk.events, applied.txs, seq, ts_ms)
        return applied

    def _apply_events(
        self,
        events: Sequence[Any],
        seq: int,
        ts_ms: int,
        changed: dict[int, Any],
        trades: dict[int, list[TradeRow]],
        touched: set[int],
        txs: list[TxRecord],
    ) -> None:
        """A block's events into the caches: the Python loop, where ``_cacheloop.c`` is not
        built, and the reference it is tested against. Writes what the block changed into
        ``changed`` (market -> its BookDelta: bid levels descending, ask levels ascending, each
        level a (price, absolute size) pair; the market's book nonce moves to ``seq``),
        ``trades``, ``touched`` and ``txs``."""
        touch = touched.add
        tx_hash = b""
        bids, asks = self._bids, self._asks
        bid_prices, ask_prices = self._prices
        accounts = self.accounts
        api_keys = self.api_keys
        pending = self._pending
        remember, keep, tx_order = self.txs, self.tx_results, self._tx_order
        put_order, drop_order = self._put_order, self._drop_order
        rare = self._apply_rare
        # Branches in order of frequency (per tx: a TxExecuted, a NonceUpdated, one or two order
        # updates and levels; per fill: a trade, two balances, two positions, stats, fees).
        for ev in events:
            t = type(ev)
            if t is OrderUpdated:
                if ev[12] == _ACTIVE and ev[7] > 0:  # status, remaining_base_amount
                    order = _new(OrderRecord, (*ev[:12], ev[13], ev[14]))
                    untrack(order)  # the records the caches keep: see apply_block's end
                    put_order(order)
                else:
                    drop_order(ev[1])
                touch(ev[2])
            elif t is LevelChanged:
                mi, is_ask, price, size = ev
                if is_ask:
                    book, prices = asks[mi], ask_prices[mi]
                else:
                    book, prices = bids[mi], bid_prices[mi]
                if size:
                    if price not in book:
                        insort(prices, price)
                    book[price] = size
                elif price in book:
                    del book[price]
                    del prices[bisect_left(prices, price)]
                d = changed.get(mi)
                if d is None:
                    d = changed[mi] = ({}, {})
                d[is_ask][price] = size
            elif t is TxExecuted:
                tx_hash, ttype, ai, ki, nonce, code = ev
                rec = _new(
                    TxRecord, (tx_hash, ttype, ai, ki, nonce, code, seq, seq, ts_ms, len(txs))
                )
                txs.append(rec)
                if tx_hash not in remember:
                    tx_order.append(tx_hash)
                remember[tx_hash] = rec
                if len(remember) > keep:
                    del remember[tx_order.popleft()]
                if pending and (ai, ki) in pending:
                    self._clear_pending(ai, ki, nonce)
            elif t is NonceUpdated:
                ai, ki, nonce = ev
                k = (ai, ki)
                key = api_keys.get(k)
                if key is not None:  # built directly: NamedTuple._replace costs ~3x as much
                    api_keys[k] = key = _new(ApiKeyRecord, (ai, ki, nonce, key[3]))
                    untrack(key)
            elif t is BalanceChanged:
                ai = ev[0]
                acct = accounts.get(ai)
                if acct is None:
                    acct = self._account(ai)
                acct.collateral = ev[1]
                touch(ai)
            elif t is PositionChanged:
                ai = ev[0]
                acct = accounts.get(ai)
                if acct is None:
                    acct = self._account(ai)
                acct.positions[ev[1]] = pos = _new(PositionRecord, ev)
                untrack(pos)
                touch(ai)
            else:
                rare(ev, tx_hash, seq, ts_ms, trades, touched)
        nonces = self._book_nonces
        for mi, (bid_d, ask_d) in changed.items():
            bid_levels = tuple(sorted(bid_d.items(), reverse=True))
            ask_levels = tuple(sorted(ask_d.items()))
            changed[mi] = _new(BookDelta, (mi, bid_levels, ask_levels, seq, nonces[mi]))
            nonces[mi] = seq

    def _apply_rare(
        self,
        ev: Any,
        tx_hash: bytes,
        seq: int,
        ts_ms: int,
        trades: dict[int, list[TradeRow]],
        touched: set[int],
    ) -> None:
        """The events of a block other than the six per-tx kinds (both loops call this):
        trades, market stats and parameters, exchange balances, keys, funding, L1 addresses,
        sub-accounts.
        The C loop applies trades and market stats itself, as these two branches do (the
        day's trade stats are counted after either loop: ``_count_trades``).
        ``tx_hash``: the block's last ``TxExecuted`` before ``ev`` (its trade's tx)."""
        t = type(ev)
        if t is TradeExecuted:
            row = _new(TradeRow, (ev, tx_hash, seq, ts_ms))
            mi = ev[0]
            self.trades[mi].append(row)
            rows = trades.get(mi)
            if rows is None:
                trades[mi] = [row]
            else:
                rows.append(row)
            touched.add(ev.taker_account_index)
            touched.add(ev.maker_account_index)
        elif t is MarketStatsChanged:
            # mark_price (14), last_trade_price (16), open_interest (17): built directly,
            # NamedTuple._replace costs ~5x as much
            mi, mark, last, oi = ev
            m = self.markets[mi]
            self.markets[mi] = m = _new(MarketRecord, (*m[:14], mark, m[15], last, oi))
            untrack(m)
        elif t is ExchangeBalancesChanged:
            self.fee_pool, self.insurance_fund = ev.fee_pool, ev.insurance_fund
        elif t is ApiKeyChanged:
            old = self.api_keys.get((ev.account_index, ev.api_key_index))
            nonce = old.nonce if old is not None else -1
            self._put_key(ApiKeyRecord(ev.account_index, ev.api_key_index, nonce, ev.pub_key))
            self._account(ev.account_index)
        elif t is MarketChanged:
            old_m = self.markets.get(ev.market_index)
            ltp, oi = (old_m.last_trade_price, old_m.open_interest) if old_m else (0, 0)
            self._add_market(MarketRecord(*ev, ltp, oi))
        elif t is FundingChanged:
            self.history.funding_changed(ev, self.markets[ev.market_index].mark_price)
        elif t is L1AddressSet:
            self.l1_addresses[ev.account_index] = ev.l1_address
            self.by_l1[ev.l1_address] = ev.account_index
        elif t is ConditionalOrderUpdated:
            r = _new(ConditionalOrderRecord, ev)
            untrack(r)
            self._put_cond(r)
            touched.add(ev[2])
        elif t is SubAccountCreated:
            ai = ev.account_index
            self._add_sub_account(ai, ev.master_index)
            if any(ev.l1_address):  # its master's, which keeps the address's ``by_l1`` entry
                self.l1_addresses[ai] = ev.l1_address
            self._account(ai)
            touched.add(ai)
        # PositionLiquidated / PositionDeleveraged are informational: their effects arrive as
        # PositionChanged / BalanceChanged / LevelChanged events.

    def _count_trades(self, mi: int, rows: list[TradeRow], ts_ms: int) -> None:
        """Market ``mi``'s trades of one block (in block order) into its day's stats: once per
        market per block, after the apply loop (every trade of a block has its ``ts_ms``)."""
        s = self.stats[mi]
        day = ts_ms // _DAY_MS
        if day != s.day:
            first = rows[0][0][2]  # TradeRow.trade.price
            s.day, s.trades, s.base_volume, s.quote_volume = day, 0, 0, 0
            s.first_price = s.high = s.low = first
        base, quote, high, low = s.base_volume, s.quote_volume, s.high, s.low
        for row in rows:
            trade = row[0]
            price, size = trade[2], trade[3]
            base += size
            quote += size * price
            if price > high:
                high = price
            if price < low:
                low = price
        s.trades += len(rows)
        s.base_volume, s.quote_volume, s.high, s.low = base, quote, high, low

    # ---- pending nonces -------------------------------------------------------------------------

    def next_nonce(self, account: int, api_key: int) -> int | None:
        """The nonce the next tx of (account, api key) must carry, counting pending txs."""
        key = self.api_keys.get((account, api_key))
        if key is None:
            return None
        pending = self._pending.get((account, api_key))
        last = max(key.nonce, max(pending)) if pending else key.nonce
        return int(last) + 1

    def note_sent(self, tx: Any) -> None:
        """``tx`` (dry-run OK) was handed to the sequencer: its nonce is now pending (the nonce
        proper: a SkipNonce tx's flag is dropped, as in its ``TxExecuted``)."""
        key = (tx.account_index, tx.api_key_index)
        pending = self._pending.setdefault(key, {})
        n = tx.nonce & _NONCE_MASK
        pending[n] = pending.get(n, 0) + 1

    def forget_sent(self, tx: Any) -> None:
        """Submission of ``tx`` failed before the sequencer saw it: release its nonce."""
        self._clear_pending(tx.account_index, tx.api_key_index, tx.nonce & _NONCE_MASK)

    def _clear_pending(self, ai: int, ki: int, nonce: int) -> None:
        pending = self._pending.get((ai, ki))
        if pending is None or nonce not in pending:
            return
        if pending[nonce] > 1:
            pending[nonce] -= 1
        else:
            del pending[nonce]
            if not pending:
                del self._pending[(ai, ki)]

    def pending_count(self) -> int:
        return sum(sum(p.values()) for p in self._pending.values())

    def pending_nonces(self, account: int, api_key: int) -> int:
        """How many distinct nonces of (account, api key) are pending (sent, not yet in a block)."""
        pending = self._pending.get((account, api_key))
        return len(pending) if pending is not None else 0

    # ---- reads ----------------------------------------------------------------------------------

    def best_price(self, market: int, is_ask: int) -> int | None:
        """The best price on one side of ``market``'s book (the highest bid, the lowest ask),
        from the sorted price lists (no snapshot); None when that side is empty."""
        prices = self._prices[1 if is_ask else 0][market]
        if not prices:
            return None
        return prices[0] if is_ask else prices[-1]

    def available_balance(self, account: int) -> int:
        """Equity minus the initial-margin requirement (micro-USDC), as ``Engine`` defines it."""
        acct = self.accounts.get(account)
        if acct is None:
            return 0
        equity, num = equity_and_requirement(
            self.markets, acct.collateral, acct.positions, acct.open_lots
        )
        return int(equity - -(-num // BPS))

    def margin_summary(self, account: int) -> MarginSummary:
        """The account's cross and isolated margin (``margin.margin_summary``); zeros for an
        unknown account."""
        acct = self.accounts.get(account)
        if acct is None:
            return MarginSummary(0, 0, 0, 0, 0)
        return margin_summary(self.markets, acct.collateral, acct.positions, acct.open_lots)

    def equity_and_margin(self, account: int) -> tuple[int, int]:
        """(equity, initial-margin requirement), micro-USDC, as :meth:`available_balance` counts
        them (the requirement rounded up); (0, 0) for an unknown account."""
        acct = self.accounts.get(account)
        if acct is None:
            return 0, 0
        equity, num = equity_and_requirement(
            self.markets, acct.collateral, acct.positions, acct.open_lots
        )
        return int(equity), int(-(-num // BPS))

    # ---- hash and self-check --------------------------------------------------------------------

    def records(self) -> Iterator[Any]:
        """The caches as snapshot records, for :func:`raydex.engine.state_digest`. What the block
        stream does not carry is filled with zeros (the exchange's counters, order priority);
        the digest leaves exactly those out."""
        yield ExchangeRecord(self.fee_pool, self.insurance_fund, 0, 0, 0, 0, 0)
        yield from self.markets.values()
        masters = self.masters
        for ai, acct in self.accounts.items():
            yield _new(_AccountRecord, (ai, acct.collateral, masters.get(ai, ai)))
            yield from acct.positions.values()
        yield from self.api_keys.values()
        yield from self.orders.values()
        for ai, addr in self.l1_addresses.items():
            yield _new(L1AddressRecord, (ai, addr))
        yield from self.conds.values()
        orders = self.orders
        for oi, c in self.attached.items():
            if oi in orders:
                yield c

    def state_hash(self) -> bytes:
        """The state hash every role reports (:func:`raydex.engine.state_digest` of
        :meth:`records`): equal to the sequencer's and the holder's at the same seq. O(state):
        callers cache it per seq."""
        digest: bytes = state_digest(self.records())
        return digest

    def validate(self) -> None:
        """Raise AssertionError if a book disagrees with the cached orders or its snapshot, an
        account's order aggregates disagree with its orders, or its waiting conditional orders
        with ``conds``."""
        for mi in self.markets:
            sums: tuple[dict[int, int], dict[int, int]] = ({}, {})
            for is_ask, side_orders in enumerate(self.level_orders[mi]):
                for price, level in side_orders.items():
                    for oi, o in level.items():
                        where = (o.market_index, o.is_ask, o.price)
                        if where != (mi, is_ask, price) or self.orders.get(oi) != o:
                            raise AssertionError(f"order {oi}: indexed under the wrong level")
                        side = sums[o.is_ask]
                        side[o.price] = side.get(o.price, 0) + o.remaining_base_amount
            if sums[0] != self._bids[mi] or sums[1] != self._asks[mi]:
                raise AssertionError(f"market {mi}: book levels differ from the cached orders")
        indexed = sum(len(lv) for bids, asks in self.level_orders.values()
                      for lv in (*bids.values(), *asks.values()))  # fmt: skip
        if indexed != len(self.orders):
            raise AssertionError("the level index and the orders differ in size")
        keys = {(a, k) for a, ks in self.account_keys.items() for k in ks}
        if keys != self.api_keys.keys():
            raise AssertionError("the per-account key index differs from the keys")
        for mi in self.markets:
            b = self.books[mi]
            if dict(b.bids) != self._bids[mi] or dict(b.asks) != self._asks[mi]:
                raise AssertionError(f"market {mi}: snapshot differs from the book")
            if self._prices[0][mi] != sorted(self._bids[mi]) or self._prices[1][mi] != sorted(
                self._asks[mi]
            ):
                raise AssertionError(f"market {mi}: sorted prices differ from the book")
        for ai, acct in self.accounts.items():
            fresh = AccountCache(acct.collateral)
            for o in acct.orders.values():
                fresh.index(o, 1)
                fresh.order_counts[o.market_index] = fresh.order_counts.get(o.market_index, 0) + 1
            if (fresh.open_lots, fresh.cois, fresh.order_counts) != (
                acct.open_lots,
                acct.cois,
                acct.order_counts,
            ):
                raise AssertionError(f"account {ai}: order aggregates differ from its orders")
            for oi, cond in acct.conds.items():
                if cond.account_index != ai or self.conds.get(oi) is not cond:
                    raise AssertionError(f"account {ai}: waiting order {oi} misfiled")
        if sum(len(a.conds) for a in self.accounts.values()) != len(self.conds):
            raise AssertionError("the waiting orders differ from their accounts'")
