"""The exchange's state, which every part of the engine operates on: ``ExchangeState``.

``ExchangeState`` holds every map and counter of the exchange (markets, accounts, resting orders,
funding clocks, the fee pool and insurance fund, id counters) plus the per-command scratch that
turns state changes into events: objects touched by a command are queued once (their ``dirty``
flag) and :meth:`ExchangeState.flush` emits one event per queued object with its *final* values,
in a fixed order (levels, positions, balances, market stats, exchange balances), then clears the
queues. A queue is a chain through the objects' own ``next_dirty`` (a head and a tail here), not
a list: a list cleared after every command frees its item array and reallocates it on the next
append. Events are written into ``deltas`` as block bytes (``_deltas``), not built as objects.

The ``Engine`` owns one and hands it to its parts, functions over it, each importing only the
ones below it: ``_orders`` (the order path, the margin cache), ``_liquidation``, ``_accounts``
and ``_markets`` (the cold commands), ``_funding``, ``_snapshot``, ``_validate``. Its attributes
are public for them; everything else reads it only (``Engine.state``). Compiled (mypyc), it is
a native class: each attribute read is a struct read, each method call a direct C call.

Also here: the limits every module shares (``Final``: a mypyc build binds them once).
"""

from __future__ import annotations

from typing import Final

from raydex import codecs as _codecs

from ._deltas import Deltas
from ._model import Account, Cond, FundingClock, Level, Market, Order, Position, put_at

# Final: a compiled (mypyc) build binds these once instead of looking them up per use.
#: ``new_tuple(NamedTupleType, fields)``: a record or event built from a tuple of its fields.
new_tuple: Final = tuple.__new__
FIRST_ORDER_INDEX: Final[int] = _codecs.FIRST_ORDER_INDEX
MAX_48: Final[int] = _codecs.MAX_48
MAX_API_KEY_INDEX: Final[int] = _codecs.MAX_API_KEY_INDEX
MAX_MARKET_INDEX: Final[int] = _codecs.MAX_MARKET_INDEX
BPS: Final[int] = _codecs.BPS
PPM: Final[int] = _codecs.PPM
FUNDING_SCALE: Final[int] = _codecs.FUNDING_RATE_SCALE
MAX_MASTER_ACCOUNT_INDEX: Final[int] = _codecs.MAX_MASTER_ACCOUNT_INDEX
MIN_SUB_ACCOUNT_INDEX: Final[int] = _codecs.MIN_SUB_ACCOUNT_INDEX
MAX_ACCOUNT_INDEX: Final[int] = _codecs.MAX_ACCOUNT_INDEX
USDC_ASSET_INDEX: Final[int] = _codecs.USDC_ASSET_INDEX
PERPS_ROUTE: Final[int] = _codecs.PERPS_ROUTE
MAX_SUB_ACCOUNTS: Final[int] = _codecs.MAX_SUB_ACCOUNTS
MAX_I63: Final = 2**63 - 1
#: The largest int a compiled (mypyc) build keeps unboxed ("short"). Comparing an int with a
#: larger constant (``MAX_I63``) boxes both and calls ``PyObject_RichCompare``, so hot checks
#: test against this first.
MAX_SHORT: Final = 2**62 - 1
#: Default lifetime of a resting order whose ``order_expiry`` is 0 or -1.
DEFAULT_ORDER_LIFETIME_MS: Final = 28 * 86_400_000
#: Open orders per account; bounds per-account work (cancel-all, liquidation).
MAX_OPEN_ORDERS_PER_ACCOUNT: Final = 10_000
#: Accounts with an index below this are also in ``ExchangeState.account_slots`` (by position).
DENSE_ACCOUNTS: Final = 1 << 20
#: ``Market.expiries`` holds ``(expiry << EXPIRY_SHIFT) + order_index``: one int orders exactly
#: like the pair ``(expiry, order_index)`` (order indexes are below 2**64) and compares faster.
EXPIRY_SHIFT: Final = 64
INDEX_MASK: Final = (1 << 64) - 1
#: ``ExchangeState.cond_due`` when no conditional order has anything due: after any time (ms)
#: and a short int, so the comparison every command makes stays one machine compare (compiled,
#: a larger constant boxes both sides: see ``MAX_SHORT``).
NO_DUE: Final = MAX_SHORT


def is_int(x: object) -> bool:
    """An operator command's field is an int (commands built in Python may carry anything)."""
    return type(x) is int or isinstance(x, int)


class ExchangeState:
    """The exchange's data and the per-command event queues. Not thread-safe."""

    def __init__(self) -> None:
        self.markets: dict[int, Market] = {}
        #: The same markets by position (None: no market; indexes are at most
        #: ``MAX_MARKET_INDEX``), for the order commands: a list read where the dict lookup makes
        #: an int object for the key each time (:meth:`market`).
        self.market_slots: list[Market | None] = []
        self.accounts: dict[int, Account] = {}
        #: The accounts with an index below ``DENSE_ACCOUNTS`` by position (None: no account),
        #: for the gate every user tx passes: a list read where the dict lookup, keyed by the
        #: tx's own int object (equal to the stored key, not the same object), compares the two.
        #: At most 8 MB of slots, as high as the highest such index in use.
        self.account_slots: list[Account | None] = []
        #: L1 address (20 bytes) -> account index (accounts made by ``L1Deposit``)
        self.by_l1: dict[bytes, int] = {}
        #: Resting orders by order index.
        self.orders: dict[int, Order] = {}
        #: Every market's funding clock that has ticked (``_funding``), by market index.
        self.funding: dict[int, FundingClock] = {}
        self.fee_pool = 0
        self.insurance_fund = 0
        self.total_deposits = 0
        self.total_withdrawals = 0
        #: The index CreateSubAccount gives next (counting down; derived from the accounts,
        #: ``_snapshot.load``: one below the lowest sub-account index).
        self.next_sub_index = MAX_ACCOUNT_INDEX
        self.next_order_index = FIRST_ORDER_INDEX
        self.next_trade_id = 1
        self.next_priority = 1
        #: Bumped whenever marks or margin fractions change: accounts' cached risk sums are valid
        #: only when their ``c_epoch`` equals it.
        self.epoch = 0
        #: The events of the commands run, as block bytes (``_deltas``), until taken.
        self.deltas = Deltas()
        #: The index of the last order a CreateOrder made (its reply to the client).
        self.last_order_index = 0
        #: Price * size of the fills of the liquidation order being matched (``liquidate``),
        #: and their liquidation fees.
        self.liquidation_quote = 0
        self.liquidation_fee = 0
        #: The first account queued by :meth:`note_traded` (None: none), for a quick test.
        self.traded_head: Account | None = None
        # Conditional orders (``_pending``, ``_triggers``; ``_model.Cond``):
        #: every live one by order index
        self.conds: dict[int, Cond] = {}
        #: heap of ``(expiry << EXPIRY_SHIFT) + order_index`` of the waiting ones (stale entries
        #: skipped), and of ``(next slice << EXPIRY_SHIFT) + order_index`` of the running TWAPs
        self.cond_expiries: list[int] = []
        self.twaps: list[int] = []
        #: the earliest time either heap has something due (NO_DUE: nothing), so "anything
        #: due?" is one comparison per command
        self.cond_due = NO_DUE
        #: work the order path left for the end of the command (``_triggers.after_command``):
        #: markets with newly armed triggers to check against their mark, positions that
        #: closed or flipped while position-tied orders were armed on them
        self.cond_after = False
        self.check_markets: list[Market] = []
        self.untie: list[Position] = []
        # Per-command scratch: objects whose events are emitted at the end of the command, a
        # chain per kind (head, tail) through their ``next_dirty``, in the order first touched;
        # and the tail of the traders' chain (through ``Account.next_traded``).
        self._levels_head: Level | None = None
        self._levels_tail: Level | None = None
        self._positions_head: Position | None = None
        self._positions_tail: Position | None = None
        self._accounts_head: Account | None = None
        self._accounts_tail: Account | None = None
        self._markets_head: Market | None = None
        self._markets_tail: Market | None = None
        self._exchange_dirty = False
        self._traded_tail: Account | None = None

    # ---- registering and finding ----------------------------------------------------------------

    def add_market(self, m: Market) -> None:
        """Register a new market (in ``markets`` and ``market_slots``)."""
        self.markets[m.index] = m
        put_at(self.market_slots, m.index, m)

    def market(self, mi: int) -> Market | None:
        """The market with index ``mi``, or None."""
        slots = self.market_slots
        return slots[mi] if 0 <= mi < len(slots) else None

    def add_account(self, acct: Account) -> None:
        """Register a new account (in ``accounts`` and, if dense, ``account_slots``)."""
        self.accounts[acct.ref] = acct
        if 0 <= acct.index < DENSE_ACCOUNTS:
            put_at(self.account_slots, acct.index, acct)

    # ---- queueing touched objects ---------------------------------------------------------------
    # Each queues its object once per command (the hot paths test ``dirty`` before calling).

    def mark_level(self, lvl: Level) -> None:
        if not lvl.dirty:
            lvl.dirty = True
            tail = self._levels_tail
            if tail is None:
                self._levels_head = lvl
            else:
                tail.next_dirty = lvl
            self._levels_tail = lvl

    def mark_position(self, pos: Position) -> None:
        if not pos.dirty:
            pos.dirty = True
            tail = self._positions_tail
            if tail is None:
                self._positions_head = pos
            else:
                tail.next_dirty = pos
            self._positions_tail = pos

    def mark_account(self, acct: Account) -> None:
        if not acct.dirty:
            acct.dirty = True
            tail = self._accounts_tail
            if tail is None:
                self._accounts_head = acct
            else:
                tail.next_dirty = acct
            self._accounts_tail = acct

    def mark_market(self, m: Market) -> None:
        if not m.dirty:
            m.dirty = True
            tail = self._markets_tail
            if tail is None:
                self._markets_head = m
            else:
                tail.next_dirty = m
            self._markets_tail = m

    def mark_exchange(self) -> None:
        """The fee pool, the insurance fund or the deposit/withdrawal totals moved."""
        self._exchange_dirty = True

    def note_traded(self, acct: Account) -> None:
        """Queue ``acct`` for the maintenance check after the command (once)."""
        if not acct.traded:
            acct.traded = True
            tail = self._traded_tail
            if tail is None:
                self.traded_head = acct
            else:
                tail.next_traded = acct
            self._traded_tail = acct

    def pop_traded(self) -> Account | None:
        """The first account :meth:`note_traded` queued, taken off the queue (None: empty); it
        can be queued again."""
        acct = self.traded_head
        if acct is not None:
            nxt = acct.next_traded
            self.traded_head = nxt
            if nxt is None:
                self._traded_tail = None
            acct.next_traded = None
            acct.traded = False
        return acct

    def forget_levels(self) -> None:
        """Unqueue the queued levels without reporting them (a snapshot load)."""
        lvl = self._levels_head
        while lvl is not None:
            nxt = lvl.next_dirty
            lvl.dirty = False
            lvl.next_dirty = None
            lvl = nxt
        self._levels_head = self._levels_tail = None

    # ---- end of command -------------------------------------------------------------------------

    def flush(self, out: Deltas) -> None:
        """Emit one event per object the command touched, with its final values (written into
        ``out`` field by field: ``_deltas``), and empty the queues."""
        lvl = self._levels_head
        if lvl is not None:
            self._levels_head = self._levels_tail = None
            while lvl is not None:
                lvl.dirty = False
                out.level_changed(lvl)
                nxt_l = lvl.next_dirty
                lvl.next_dirty = None
                lvl = nxt_l
        p = self._positions_head
        if p is not None:
            self._positions_head = self._positions_tail = None
            while p is not None:
                p.dirty = False
                out.position_changed(p)
                nxt_p = p.next_dirty
                p.next_dirty = None
                p = nxt_p
        a = self._accounts_head
        if a is not None:
            self._accounts_head = self._accounts_tail = None
            while a is not None:
                a.dirty = False
                out.balance_changed(a.index, a.collateral)
                nxt_a = a.next_dirty
                a.next_dirty = None
                a = nxt_a
        m = self._markets_head
        if m is not None:
            self._markets_head = self._markets_tail = None
            while m is not None:
                m.dirty = False
                out.market_stats_changed(m.index, m.mark, m.last_trade_price, m.open_interest)
                nxt_m = m.next_dirty
                m.next_dirty = None
                m = nxt_m
        if self._exchange_dirty:
            self._exchange_dirty = False
            out.exchange_balances_changed(
                self.fee_pool, self.insurance_fund, self.total_deposits, self.total_withdrawals
            )
