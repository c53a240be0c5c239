"""Mutable engine state: ``__slots__`` objects for orders, levels, book sides, markets, positions,
API keys, accounts and funding clocks.

Invariants kept by the engine (checked by ``validate_internal_state``):

- A ``Level`` holds a doubly linked FIFO of resting orders (``head`` = oldest = first to match);
  ``level.size`` is the sum of their ``remaining``. An empty level is removed from its side at once.
- A ``Side`` keeps ``levels`` (price -> Level), a heap of prices with lazy deletion (asks store
  the price, bids ``-price``; a price is in the heap at most once, tracked by ``in_heap``) and the
  cached ``best`` price (0 when the side is empty). Best-price lookup is O(1); a new level is
  O(log n); removing the best level pops stale heap entries (amortised O(log n)). Past
  ``HEAP_SLACK`` + 4 entries per live level the heap is rebuilt from the levels
  (:meth:`Side.compact`), so n stays within a few times the live levels.
- ``Position.bid_open`` / ``ask_open`` are the lots of the account's resting non-reduce-only
  orders in that market; they feed the initial-margin requirement ("worst case" exposure).
- An account's positions are in its ``positions`` dict and, in the same order, on its
  ``first_pos`` chain (the order path's lookups and walks). Its hot key (``hot_ki`` /
  ``hot_key``, the one it last signed with) is one of its keys, whose last nonce is
  ``hot_nonce`` while it is hot (``ApiKey.nonce`` then lags: ``Account.last_nonce``). Both save
  reads of cold memory: the accounts are read at random, and each object read is a cache miss.
- ``Market.holders`` maps account index -> Position for every position with ``size != 0`` (the
  funding index). An ``Account.unarmed`` account is due an exact check at the next move of a
  market it holds: each of its non-zero positions is ``queued`` in its market's ``unarmed`` list
  (which may also hold stale entries, positions no longer queued, skipped when read).
  ``long_triggers`` / ``short_triggers`` are the liquidation index: per holder a mark price
  beyond which it *may* be under maintenance (see ``_liquidation.arm``), so a mark move checks
  only the accounts whose trigger it crossed.
- Conditional orders (``Cond``, engine ``_triggers``): every live one is in
  ``ExchangeState.conds`` by order index; the waiting ones (a grouped child waiting for its
  entry, an armed stop-loss / take-profit, a running TWAP) also in their account's ``conds``. An
  armed one has exactly one live entry in its market's ``trig_up`` / ``trig_down`` heap, the one
  equal to its ``trig_key`` (lazy deletion: any other entry is stale), counted in
  ``Market.trig_live``. An order on the book may
  carry the ``Cond`` it came from (``Order.cond``: a fired stop-loss-limit, a grouped entry).
- A position in isolated margin (``margin_mode`` 1) holds its own collateral, ``allocated``
  (0 for a cross or a flat position); ``Account.isolated`` counts its account's isolated
  positions, so the checks that look for them cost a cross-only account one read.
- ``dirty`` flags mark objects already queued for this command's events (chained through their
  ``next_dirty``, in the order first touched); ``ExchangeState.flush`` clears both when it emits
  the events at the end of the command.
"""

from __future__ import annotations

import heapq
from heapq import nlargest, nsmallest
from typing import Any, Final

from .rules import notional_multiplier

#: heapq's push and pop as Final names (the engine modules import them from here): compiled, a
#: function imported by ``from heapq import`` is a globals-dict lookup per call, a Final a static.
heappush: Final = heapq.heappush
heappop: Final = heapq.heappop
heapify: Final = heapq.heapify


def put_at(slots: list[Any], i: int, x: object) -> None:
    """``slots[i] = x``, the list grown with None up to ``i`` first (the by-position indexes:
    accounts, their keys, markets)."""
    if i >= len(slots):
        slots.extend([None] * (i + 1 - len(slots)))
    slots[i] = x


#: An account with more resting orders than this keeps a client order index dict
#: (``Account.coi``); one with fewer scans its order list (dropped again at half: hysteresis).
COI_SCAN: Final = 8

#: ``Market.next_expiry`` of a market without resting orders: later than any valid time.
NO_EXPIRY: Final = 1 << 127


class ApiKey:
    __slots__ = ("nonce", "pub_key")

    def __init__(self, pub_key: bytes, nonce: int = -1) -> None:
        self.pub_key = pub_key
        #: Last nonce used; the next valid one is ``nonce + 1`` (a new key: -1, so 0 comes first).
        #: Out of date while the key is its account's hot key (``Account.hot_nonce``): read it
        #: through ``Account.last_nonce``.
        self.nonce = nonce


class Account:
    __slots__ = (
        "c_epoch",
        "c_im",
        "c_mm",
        "c_upnl",
        "coi",
        "collateral",
        "conds",
        "dirty",
        "first_order",
        "first_pos",
        "hot_key",
        "hot_ki",
        "hot_nonce",
        "index",
        "isolated",
        "key_slots",
        "keys",
        "l1_address",
        "master_index",
        "next_dirty",
        "next_traded",
        "order_count",
        "positions",
        "ref",
        "reserve",
        "reserve_version",
        "risk_version",
        "sub_accounts",
        "traded",
        "unarmed",
    )

    def __init__(self, index: int, collateral: int = 0) -> None:
        self.index = index
        #: ``index`` as one Python int object, made once: compiled (mypyc), ``index`` is a native
        #: int and every event field or dict key made of it would allocate a new int object.
        self.ref: Any = index
        self.collateral = collateral
        self.positions: dict[int, Position] = {}
        #: The same positions as a chain through ``Position.next_pos``, in the dict's order, for
        #: the order path's lookups (:meth:`position_in`) and the walks over all of them (the
        #: risk sums, arming): an account holds a few, and each step reads the position itself,
        #: where a dict lookup or a list's items first read the dict's or the list's own
        #: memory (two more cache misses on an account the command has just touched: accounts
        #: are read at random). Changed only with ``positions``
        #: (:meth:`add_position` / :meth:`drop_position`).
        self.first_pos: Position | None = None
        self.keys: dict[int, ApiKey] = {}
        #: The same keys by position (None: no key), for the gate every user tx passes: a list
        #: read, cheaper than a dict lookup. As long as the highest key
        #: index in use (at most 255). Changed only with ``keys`` (:meth:`add_key`).
        self.key_slots: list[ApiKey | None] = []
        #: The key the account's last user tx was signed with (``hot_ki``: its index; -1 for
        #: none yet) and that key's last nonce, kept here while it is hot (``ApiKey.nonce`` is
        #: written back when another key takes its place: :meth:`heat`): an account signs with
        #: one key, as a rule, and the gate reads and bumps its nonce without reading the key
        #: (or the slot list and its items), one cache miss or three less per user tx.
        #: Nonces are read and set through :meth:`last_nonce` / :meth:`set_nonce`.
        self.hot_ki = -1
        self.hot_key: ApiKey | None = None
        self.hot_nonce = -1
        #: The account's L1 (Ethereum) address, 20 bytes; b"" for an account made without one.
        self.l1_address = b""
        #: The index of its master account: its own for a master (an index up to Lighter's
        #: ``MaxMasterAccountIndex``, 2**47 - 1), the master's for a sub-account (an index from
        #: ``MinSubAccountIndex``, 2**47, on). Set when the account is made, never changed. The
        #: self-trade equality mode MasterAccountIndex (``L2TxAttributes`` 7) treats accounts
        #: with the same one as one.
        self.master_index = index
        #: How many sub-accounts this master opened (derived from the accounts on a load).
        self.sub_accounts = 0
        #: Resting orders: a doubly linked list through ``Order.acct_prev`` / ``acct_next`` (most
        #: recently rested first; :meth:`resting_orders` sorts them), not a dict: that would be
        #: an insert and a delete per order, with the resizes small dicts go through under churn.
        self.first_order: Order | None = None
        self.order_count = 0
        #: Resting orders by client order index (non-zero only), kept only while the account
        #: has many (:meth:`find_client_order`): a few are scanned on the list instead.
        self.coi: dict[int, Order] | None = None
        self.dirty = False
        self.next_dirty: Account | None = None
        #: It traded in this command and waits for its maintenance check (``check_traded``),
        #: queued once through ``next_traded``.
        self.traded = False
        self.next_traded: Account | None = None
        #: Version of this account's liquidation triggers; older heap entries are stale.
        self.risk_version = 0
        #: The part of the maintenance buffer (BPS-scaled) its triggers left out (``arm``) and
        #: funding has not spent yet; valid while ``reserve_version == risk_version``.
        self.reserve = 0
        self.reserve_version = -1
        #: Its triggers are out of date: checked exactly at the next move of a market it holds
        #: (its non-zero positions are ``queued`` there; ``_liquidation.unarm``).
        self.unarmed = False
        #: How many of its positions are in isolated margin mode (``Position.margin_mode`` 1):
        #: the checks after a fill and a mark move walk its positions for them only when it
        #: has any, so a cross-only account (the common case) pays one read.
        self.isolated = 0
        #: Cached risk sums (``_orders.refresh``), valid while ``c_epoch == ExchangeState.epoch``.
        self.c_epoch = -1
        self.c_upnl = 0
        self.c_mm = 0
        self.c_im = 0
        #: Its waiting conditional orders by order index (None: none yet), engine ``_triggers``.
        self.conds: dict[int, Cond] | None = None

    def add_key(self, ki: int, key: ApiKey) -> None:
        """Hold API key ``key`` at index ``ki`` (a new one)."""
        self.keys[ki] = key
        put_at(self.key_slots, ki, key)
        if ki == self.hot_ki:
            self.hot_key = key
            self.hot_nonce = key.nonce

    def heat(self, ki: int) -> bool:
        """Make key ``ki`` the hot one (the previous one's nonce written back to it); False,
        changing nothing, if the account has no key ``ki``."""
        slots = self.key_slots
        key = slots[ki] if 0 <= ki < len(slots) else None
        if key is None:
            return False
        old = self.hot_key
        if old is not None:
            old.nonce = self.hot_nonce
        self.hot_ki = ki
        self.hot_key = key
        self.hot_nonce = key.nonce
        return True

    def last_nonce(self, key: ApiKey) -> int:
        """The last nonce used with ``key``, one of this account's keys."""
        return self.hot_nonce if key is self.hot_key else key.nonce

    def set_nonce(self, key: ApiKey, nonce: int) -> None:
        """Record ``nonce`` as the last one used with ``key``, one of this account's keys."""
        if key is self.hot_key:
            self.hot_nonce = nonce
        else:
            key.nonce = nonce

    def add_position(self, pos: Position) -> None:
        """Hold ``pos`` (a market the account had no position in)."""
        self.positions[pos.market.index] = pos
        p = self.first_pos
        if p is None:
            self.first_pos = pos
        else:
            while p.next_pos is not None:
                p = p.next_pos
            p.next_pos = pos

    def drop_position(self, mi: int) -> None:
        """Forget the position in market ``mi`` (one that was never reported: a rejected tx)."""
        pos = self.positions.pop(mi)
        p = self.first_pos
        if p is pos:
            self.first_pos = pos.next_pos
        else:
            while p is not None and p.next_pos is not pos:
                p = p.next_pos
            assert p is not None
            p.next_pos = pos.next_pos
        pos.next_pos = None

    def position_in(self, m: Market) -> Position | None:
        """The account's position in ``m``, if it has one (a walk of ``first_pos``)."""
        p = self.first_pos
        while p is not None:
            if p.market is m:
                return p
            p = p.next_pos
        return None

    def link_order(self, o: Order) -> None:
        """Add resting order ``o`` to the account's list (and client index)."""
        first = self.first_order
        o.acct_next = first
        if first is not None:
            first.acct_prev = o
        self.first_order = o
        n = self.order_count + 1
        self.order_count = n
        coi = self.coi
        if coi is not None:
            if o.client_index:
                coi[o.client_index] = o
        elif n > COI_SCAN:
            by_coi: dict[int, Order] = {}
            q: Order | None = self.first_order
            while q is not None:
                if q.client_index:
                    by_coi[q.client_index] = q
                q = q.acct_next
            self.coi = by_coi

    def unlink_order(self, o: Order) -> None:
        """Take ``o`` out of the account's list."""
        prev = o.acct_prev
        nxt = o.acct_next
        if prev is None:
            self.first_order = nxt
        else:
            prev.acct_next = nxt
        if nxt is not None:
            nxt.acct_prev = prev
        o.acct_prev = None
        o.acct_next = None
        n = self.order_count - 1
        self.order_count = n
        coi = self.coi
        if coi is not None:
            if n <= COI_SCAN // 2:
                self.coi = None
            elif o.client_index:
                del coi[o.client_index]

    def find_client_order(self, client_index: int) -> Order | None:
        """The resting order with this (non-zero) client order index, if any.
        Up to ``COI_SCAN`` orders, a scan of the account's list (a few native compares) beats a
        dict kept per account (an insert, a delete and a lookup, with the resizes small dicts go
        through under churn, and an int object per key); past it, the dict (O(1) for a market
        maker)."""
        coi = self.coi
        if coi is not None:
            return coi.get(client_index)
        if client_index == 0:  # (no order has client index 0: it means none)
            return None
        o = self.first_order
        while o is not None:
            if o.client_index == client_index:
                return o
            o = o.acct_next
        return None

    def resting_orders(self) -> list[Order]:
        """The account's resting orders by order index."""
        out = []
        o = self.first_order
        while o is not None:
            out.append(o)
            o = o.acct_next
        out.sort(key=_order_index)
        return out


def _order_index(o: Order) -> int:
    return o.index


class Position:
    __slots__ = (
        "account",
        "allocated",
        "ask_open",
        "bid_open",
        "dirty",
        "entry_quote",
        "funding_paid",
        "imf",
        "margin_mode",
        "market",
        "next_dirty",
        "next_pos",
        "queued",
        "realized_pnl",
        "size",
    )

    def __init__(self, account: Account, market: Market, imf: int) -> None:
        self.account = account
        self.market = market
        #: The next of the account's positions (``Account.first_pos``); beside ``market``, what
        #: ``Account.position_in`` reads of each position (one cache line).
        self.next_pos: Position | None = None
        self.size = 0
        self.entry_quote = 0
        self.realized_pnl = 0
        self.funding_paid = 0
        self.imf = imf
        #: 0 cross: backed by its account's collateral with its other cross positions; 1
        #: isolated: backed by ``allocated`` alone (``_isolated``).
        self.margin_mode = 0
        #: An isolated position's own collateral (micro-USDC; may go negative between a loss
        #: and its liquidation); 0 for a cross position and for a flat one.
        self.allocated = 0
        self.bid_open = 0
        self.ask_open = 0
        self.dirty = False
        self.next_dirty: Position | None = None
        #: In its market's ``unarmed`` list, due a check at the market's next move.
        self.queued = False


class Order:
    __slots__ = (
        "account",
        "acct_next",
        "acct_prev",
        "client_index",
        "cond",
        "expiry",
        "expiry_listed",
        "index",
        "initial",
        "is_ask",
        "level",
        "market",
        "next",
        "order_type",
        "position",
        "prev",
        "price",
        "priority",
        "reduce_only",
        "ref",
        "remaining",
        "tif",
        "version",
    )

    def __init__(
        self,
        index: int,
        account: Account,
        client_index: int,
        market: Market,
        is_ask: int,
        price: int,
        size: int,
        expiry: int,
        order_type: int,
        tif: int,
        reduce_only: int,
        priority: int,
    ) -> None:
        self.index = index
        #: ``index`` as one Python int object, made once: compiled (mypyc), ``index`` is a native
        #: int and every event field or dict key made of it would allocate a new int object.
        self.ref: Any = index
        self.account = account
        self.client_index = client_index
        self.market = market
        self.is_ask = is_ask
        self.price = price
        self.initial = size
        self.remaining = size
        self.expiry = expiry
        self.order_type = order_type
        self.tif = tif
        self.reduce_only = reduce_only
        self.priority = priority
        self.prev: Order | None = None
        self.next: Order | None = None
        self.level: Level | None = None
        #: Its account's position in its market, set when it rests (a resting order's position
        #: is never replaced): no lookup ``account.positions[market]`` per fill, cancel and
        #: modify.
        self.position: Position | None = None
        #: the account's resting-order list (``Account.first_order``)
        self.acct_prev: Order | None = None
        self.acct_next: Order | None = None
        #: It has its entry in its market's expiry queue or heap (once: an order modified and
        #: re-entered keeps its expiry and index, so its entry stays good).
        self.expiry_listed = False
        #: The version the last versioned ModifyOrder gave it (``L2TxAttributes`` 8; 0: none):
        #: a versioned modify applies only above it.
        self.version = 0
        #: The conditional order it came from (a fired stop-loss-limit / take-profit-limit, a
        #: grouped entry with its children), else None: see ``_pending.order_filled`` and
        #: ``order_left``.
        self.cond: Cond | None = None


class Level:
    __slots__ = (
        "dirty",
        "head",
        "is_ask",
        "key",
        "market_index",
        "next_dirty",
        "price",
        "size",
        "tail",
    )

    def __init__(self, market_index: int, is_ask: int, price: int) -> None:
        self.market_index = market_index
        self.is_ask = is_ask
        self.price = price
        #: ``price`` as one Python int object (the side's dict key and the LevelChanged field),
        #: made once: see ``Account.ref``.
        self.key: Any = price
        self.size = 0
        self.head: Order | None = None
        self.tail: Order | None = None
        self.dirty = False
        self.next_dirty: Level | None = None


#: A side's price heap is rebuilt from its levels past ``HEAP_SLACK + 4 * len(levels)`` entries
#: (the prices of levels gone while not best stay in it until they reach its top).
HEAP_SLACK: Final = 64


class Side:
    """One side of one book. See the module docstring for the structure and its costs."""

    __slots__ = ("best", "heap", "in_heap", "is_ask", "levels", "market_index")

    def __init__(self, market_index: int, is_ask: int) -> None:
        self.market_index = market_index
        self.is_ask = is_ask
        self.levels: dict[int, Level] = {}
        self.heap: list[int] = []
        self.in_heap: set[int] = set()
        self.best = 0

    def level_for(self, price: int) -> Level:
        """The level at ``price``, created (and made best if better) when missing."""
        lvl = self.levels.get(price)
        if lvl is None:
            lvl = Level(self.market_index, self.is_ask, price)
            self.levels[price] = lvl
            if price not in self.in_heap:
                self.in_heap.add(price)
                heap = self.heap
                heappush(heap, price if self.is_ask else -price)
                if len(heap) > HEAP_SLACK + 4 * len(self.levels):
                    self.compact()
            best = self.best
            if best == 0 or (price < best if self.is_ask else price > best):
                self.best = price
        return lvl

    def compact(self) -> None:
        """Rebuild the price heap and ``in_heap`` from the live levels (the stale prices go)."""
        keys = list(self.levels)
        heap = keys if self.is_ask else [-p for p in keys]
        heapify(heap)
        self.heap = heap
        self.in_heap = set(self.levels)

    def drop_level(self, lvl: Level) -> None:
        """Remove an empty level; recompute ``best`` from the heap when it was the best."""
        price = lvl.price
        del self.levels[lvl.key]
        if price == self.best:
            heap = self.heap
            levels = self.levels
            is_ask = self.is_ask
            while heap:
                p = heap[0] if is_ask else -heap[0]
                if p in levels:
                    self.best = p
                    return
                heappop(heap)
                self.in_heap.discard(p)
            self.best = 0

    def unlink(self, o: Order) -> Level:
        """Detach ``o`` from its level (its ``remaining`` leaves ``level.size``); drop the level if
        it is now empty. Returns the level so the caller can report it."""
        lvl = o.level
        assert lvl is not None
        p = o.prev
        n = o.next
        if p is None:
            lvl.head = n
        else:
            p.next = n
        if n is None:
            lvl.tail = p
        else:
            n.prev = p
        o.prev = o.next = None
        o.level = None
        lvl.size -= o.remaining
        if lvl.head is None:
            self.drop_level(lvl)
        return lvl

    def sorted_prices(self) -> list[int]:
        """Prices best first (O(n log n); for snapshots and queries, not the hot path)."""
        return sorted(self.levels, reverse=not self.is_ask)

    def best_levels(self, depth: int) -> list[tuple[int, int]]:
        """Up to ``depth`` levels, best first: ``[(price, size), ...]`` (O(n log depth))."""
        levels = self.levels
        pick = nsmallest if self.is_ask else nlargest
        return [(p, levels[p].size) for p in pick(depth, levels)]


class Market:
    __slots__ = (
        "asks",
        "bids",
        "closeout_mf",
        "compact_at",
        "default_imf",
        "dirty",
        "expiries",
        "expiry_queue",
        "free_slots",
        "holder_order",
        "holders",
        "index",
        "last_trade_price",
        "liquidation_fee",
        "long_triggers",
        "maintenance_mf",
        "maker_fee",
        "mark",
        "mark_q",
        "max_price_deviation",
        "min_base",
        "min_imf",
        "min_quote",
        "mult",
        "new_holders",
        "next_dirty",
        "next_expiry",
        "open_interest",
        "price_decimals",
        "queue_head",
        "short_triggers",
        "size_decimals",
        "status",
        "symbol",
        "taker_fee",
        "trig_down",
        "trig_live",
        "trig_up",
        "trigger_account",
        "trigger_version",
        "unarmed",
    )

    def __init__(self, index: int, symbol: str, price_decimals: int, size_decimals: int) -> None:
        self.index = index
        self.symbol = symbol
        self.price_decimals = price_decimals
        self.size_decimals = size_decimals
        #: micro-USDC per (tick * lot).
        self.mult: int = notional_multiplier(price_decimals, size_decimals)
        self.min_base = 1
        self.min_quote = 0
        self.maker_fee = 0
        self.taker_fee = 0
        self.liquidation_fee = 0
        self.default_imf = 0
        self.min_imf = 0
        self.maintenance_mf = 0
        self.closeout_mf = 0
        self.max_price_deviation = 0
        self.mark = 1
        #: mark * mult: micro-USDC value of one lot at the mark.
        self.mark_q = self.mult
        self.status = 0
        self.last_trade_price = 0
        self.open_interest = 0
        self.bids = Side(index, 0)
        self.asks = Side(index, 1)
        self.holders: dict[int, Position] = {}
        #: The holders in account order (funding's order), kept without sorting them all each
        #: time (``holders_by_account``): ``holder_order`` is sorted by account index as of its
        #: last rebuild and may hold positions since gone flat; ``new_holders`` are the
        #: positions that went non-zero since (unsorted, possibly repeated).
        self.holder_order: list[Position] = []
        self.new_holders: list[Position] = []
        #: Positions of unarmed accounts (``Position.queued``) to check exactly and re-arm at this
        #: market's next mark move; entries no longer queued are stale and skipped. Flags and a
        #: list, not a dict per market and one for the engine (two dict inserts per unarmed
        #: trader).
        self.unarmed: list[Position] = []
        #: Liquidation index: heaps of ``(price << SLOT_BITS) + slot`` (``_liquidation.arm``),
        #: price -trigger for longs (check when mark <= trigger) and trigger for shorts (check
        #: when mark >= trigger); ``trigger_account[slot]`` / ``trigger_version[slot]`` say
        #: whose trigger an entry is and at which ``risk_version`` (stale once the account's
        #: moved on); ``free_slots`` are reusable.
        self.long_triggers: list[int] = []
        self.short_triggers: list[int] = []
        self.trigger_account: list[Account] = []
        self.trigger_version: list[int] = []
        self.free_slots: list[int] = []
        #: Resting orders by expiry, in two parts: ``expiry_queue[queue_head:]``, orders sorted by
        #: ``(expiry, index)`` (an order whose pair is not above the tail's goes to the heap
        #: instead: with the default lifetime, ``now + 28 days``, and rising order indexes almost
        #: every order is appended in order, one list append and no heap push), and
        #: ``expiries``, a heap of ``(expiry_ms << 64) + order_index`` (one int orders like the
        #: pair) for the rest. A resting order has exactly one entry (``Order.expiry_listed``);
        #: stale entries (orders no longer resting) are skipped, and dropped by compaction.
        #: ``next_expiry``: the earlier of the two heads (NO_EXPIRY when both are empty), so
        #: "anything expired?" is one comparison.
        self.expiry_queue: list[Order] = []
        self.queue_head = 0
        self.expiries: list[int] = []
        self.next_expiry = NO_EXPIRY
        #: Drop their stale entries (``_orders._compact_expiries``) past this many entries.
        self.compact_at = 1024
        #: Armed stop-loss / take-profit orders (``_pending.arm``): heaps of
        #: ``(trigger_price << 64) + order_index`` of those due when the mark rises to their
        #: trigger (``trig_up``) and ``((TRIGGER_CEIL - trigger_price) << 64) + order_index`` of
        #: those due when it falls to it (``trig_down``), so each pops in firing order; stale
        #: entries are skipped and dropped by compaction. ``trig_live``: the armed ones.
        self.trig_up: list[int] = []
        self.trig_down: list[int] = []
        self.trig_live = 0
        self.dirty = False
        self.next_dirty: Market | None = None

    def set_mark(self, mark: int) -> None:
        self.mark = mark
        self.mark_q = mark * self.mult

    def add_holder(self, pos: Position) -> None:
        """``pos`` went non-zero: into ``holders``, and remembered for the account order."""
        self.holders[pos.account.ref] = pos
        new = self.new_holders
        new.append(pos)
        if len(new) > 2 * len(self.holders) + 1024:
            self.holders_by_account()  # (folds them in: amortised O(1) per call)

    def holders_by_account(self) -> list[Position]:
        """The holders (non-zero positions) by account index: the last order merged with the
        positions that went non-zero since, sorted: O(holders + k log k) for k new ones, where
        sorting every holder each time would be O(holders log holders)."""
        old = self.holder_order
        new = self.new_holders
        if new:
            new.sort(key=_account_index)
        out: list[Position] = []
        i = j = 0
        n_old = len(old)
        n_new = len(new)
        last: Position | None = None
        while i < n_old or j < n_new:
            if j == n_new or (i < n_old and old[i].account.index <= new[j].account.index):
                p = old[i]
                i += 1
            else:
                p = new[j]
                j += 1
            # flat now, or the same position again (in both lists, or repeated in ``new``):
            # one account has one position here, so its entries are adjacent
            if p.size and p is not last:
                out.append(p)
                last = p
        self.holder_order = out
        self.new_holders = []
        return out


def _account_index(p: Position) -> int:
    return p.account.index


class FundingClock:
    """One market's funding clock (``_funding``): the hour being sampled (-1: none yet), the last
    minute sampled, the samples and their premium sum, and the last settlement's rate and time."""

    __slots__ = ("hour", "last_funding_ms", "last_minute", "last_rate", "premium_sum", "samples")

    def __init__(self) -> None:
        self.hour = -1
        self.last_minute = -1
        self.samples = 0
        self.premium_sum = 0
        self.last_rate = 0
        self.last_funding_ms = 0


class Cond:
    """A conditional order (engine ``_triggers``; the fields of ``ConditionalOrderUpdated``):
    a stop-loss / take-profit (market or limit) waiting for the mark, a grouped child waiting for
    its entry, a running TWAP, a grouped entry's links, or one of these fired onto the book.

    ``status`` / ``trigger_status`` are Lighter's (``OrderStatus`` / ``TriggerStatus``);
    ``size`` 0 is position-tied (the position's size when it fires); ``remaining`` is what a
    TWAP still has to fill (``size`` for the others). Links are order indexes (``parent_index``,
    ``kid_indexes``, ``sibling_index``; 0: none), reported as they are whatever became of the
    order they name, and, for the links that act, objects (``kids``, ``sibling``: None for
    none), so a group is linked before its orders are registered."""

    __slots__ = (
        "account",
        "client_index",
        "created_at",
        "expiry",
        "index",
        "is_ask",
        "kid_indexes",
        "kids",
        "market",
        "next_slice",
        "order_type",
        "parent_index",
        "price",
        "reduce_only",
        "ref",
        "remaining",
        "sibling",
        "sibling_index",
        "size",
        "slice_index",
        "status",
        "tif",
        "trig_key",
        "trigger_price",
        "trigger_status",
        "trigger_time",
    )

    def __init__(
        self,
        index: int,
        account: Account,
        market: Market,
        client_index: int,
        is_ask: int,
        price: int,
        size: int,
        expiry: int,
        order_type: int,
        tif: int,
        reduce_only: int,
        trigger_price: int,
        created_at: int,
    ) -> None:
        self.index = index
        self.ref: Any = index
        self.account = account
        self.market = market
        self.client_index = client_index
        self.is_ask = is_ask
        self.price = price
        self.size = size
        self.remaining = size
        self.expiry = expiry
        self.order_type = order_type
        self.tif = tif
        self.reduce_only = reduce_only
        self.trigger_price = trigger_price
        self.created_at = created_at
        #: -1 until it is placed (a grouped order is linked before it is registered)
        self.status = -1
        self.trigger_status = 0
        self.trigger_time = 0
        self.parent_index = 0
        self.kid_indexes = (0, 0)
        self.sibling_index = 0
        self.kids: list[Cond] | None = None
        self.sibling: Cond | None = None
        #: a TWAP's next slice time (ms) and its latest slice's order index (0: none)
        self.next_slice = 0
        self.slice_index = 0
        #: while armed, its live entry in its market's trigger heaps (any other entry naming
        #: it is stale: it moved, fired or ended); -1 otherwise
        self.trig_key = -1
