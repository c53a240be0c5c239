"""``validate_internal_state``: a full, slow (O(state)) consistency check of the ``ExchangeState``.

Checked, first failure raises ``InvariantViolation``:

- conservation: ``sum(collateral + allocated - entry_quote) + fee_pool + insurance_fund``
  ``== deposits - withdrawals`` (``allocated``: isolated positions' collateral);
- accounts: each one's master is a master; a sub-account shares its master's L1 address and is
  above the next sub-account index; the masters' sub-account counts;
- isolated positions: counted in ``Account.isolated``; only an open isolated position holds
  collateral; none is left under its own maintenance margin;
- the account slots (``account_slots``) hold exactly the accounts with a dense index, the
  market slots every market;
- per market: positions net to zero, open interest == sum of long sizes, ``holders`` == positions
  with non-zero size, each of them in the account order (``holder_order``, sorted, or
  ``new_holders``), a position is queued (in its market's ``unarmed`` list) exactly when it is
  non-zero and its account unarmed;
- per book side: every level non-empty, its size == sum of its orders' remaining, prev/next links
  consistent, orders on the right side/price/market, ``best`` is the best price, every live price in
  the heap, no crossed book;
- orders: exchange indexes unique and below ``next_order_index``, the order map, the accounts'
  resting-order lists (links and counts) and client-index maps agree with the book, client
  order indexes unique per account, priorities increase within a level;
- per position: ``bid_open``/``ask_open`` == the account's resting non-reduce-only orders there;
  the account's ``first_pos`` chain holds its positions, in their order; its hot key is its key;
- per account: cached risk sums (when current) == a fresh recomputation, and no account is left
  under maintenance margin after a command (liquidation triggers missed nothing);
- conditional orders (``_pending``): ``conds`` holds each live one under its index (below
  ``next_order_index``); the waiting ones are exactly their accounts' ``conds`` (none empty),
  the others are on the book with it as their ``Order.cond``; an armed one has exactly one live
  entry in its market's trigger heaps, ``trig_live`` counts them, and none is beyond its mark
  (it would have fired); a running TWAP has its next slice listed; an armed position-tied one
  can reduce its position; client order indexes are unique over resting and waiting orders,
  whose sum is within ``MAX_OPEN_ORDERS_PER_ACCOUNT``; nothing is left for the end of a command.

Expired orders are removed lazily (when a command touches their market), so expiry is not checked.
"""

from __future__ import annotations

from collections.abc import Callable

from ._model import COI_SCAN, Account, Order, Position, Side
from ._orders import equity_mmr, refresh
from ._pending import is_armed, live_trigger
from ._state import (
    DENSE_ACCOUNTS,
    EXPIRY_SHIFT,
    INDEX_MASK,
    MAX_OPEN_ORDERS_PER_ACCOUNT,
    ExchangeState,
)
from .codes import TRIGGER_NA, TRIGGER_READY, TRIGGER_TWAP
from .rules import fires_when_above, maintenance_margin, reduce_only_increases, unrealized_pnl


def _isolated_above_maintenance(pos: Position) -> bool:
    """Isolated ``pos`` meets its maintenance margin with its own collateral."""
    s = pos.size
    m = pos.market
    mq = m.mark_q
    equity = pos.allocated + unrealized_pnl(s, mq, pos.entry_quote)
    return equity * 10_000 >= maintenance_margin(abs(s), mq, m.maintenance_mf)


class InvariantViolation(Exception):
    """:func:`validate` found the state inconsistent (always a bug)."""


def validate(st: ExchangeState) -> None:
    """Check every invariant (see the module docstring); raise :class:`InvariantViolation` on
    the first broken one."""

    def fail(msg: str) -> None:
        raise InvariantViolation(msg)

    by_l1 = {
        a.l1_address: a.index
        for a in st.accounts.values()
        if a.l1_address and a.master_index == a.index  # (sub-accounts share their master's)
    }
    if by_l1 != st.by_l1:
        fail("the L1 address index disagrees with the accounts' L1 addresses")
    cash = st.fee_pool + st.insurance_fund
    if {i: m for i, m in enumerate(st.market_slots) if m is not None} != st.markets:
        fail("the market slots disagree with the markets")
    slots = st.account_slots
    if [i for i, a in enumerate(slots) if a is not None] != sorted(
        ai for ai in st.accounts if 0 <= ai < len(slots)
    ) or len(slots) > DENSE_ACCOUNTS:
        fail("the account slots disagree with the accounts")
    sub_counts: dict[int, int] = {}
    for a in st.accounts.values():
        if a.master_index != a.index:
            sub_counts[a.master_index] = sub_counts.get(a.master_index, 0) + 1
    for ai, acct in st.accounts.items():
        if acct.index != ai or acct.ref != ai:
            fail(f"account {ai} stored as {acct.index} (boxed {acct.ref})")
        if 0 <= ai < DENSE_ACCOUNTS and (ai >= len(slots) or slots[ai] is not acct):
            fail(f"account {ai} is not in its slot")
        cash += acct.collateral
        chain: list[int] = []
        p = acct.first_pos
        while p is not None and len(chain) <= len(acct.positions):
            chain.append(id(p))
            p = p.next_pos
        if chain != [id(p) for p in acct.positions.values()]:
            fail(f"account {acct.index}: position chain differs from its positions")
        hot = acct.hot_ki
        if (acct.hot_key is None) != (hot == -1) or (
            hot != -1 and (hot >= len(acct.key_slots) or acct.key_slots[hot] is not acct.hot_key)
        ):
            fail(f"account {acct.index}: hot key {hot} does not match its key slots")
        if {i: k for i, k in enumerate(acct.key_slots) if k is not None} != acct.keys:
            fail(f"account {acct.index}: key slots differ from its keys")
        isolated = 0
        for pos in acct.positions.values():
            cash += pos.allocated - pos.entry_quote
            if pos.account is not acct:
                fail(f"position of account {acct.index} points elsewhere")
            if pos.size == 0 and pos.entry_quote != 0:
                fail(f"flat position {acct.index}/{pos.market.index} keeps basis {pos.entry_quote}")
            if pos.margin_mode:
                isolated += 1
            if pos.allocated and (not pos.margin_mode or not pos.size):
                fail(f"position {acct.index}/{pos.market.index}: {pos.allocated} allocated")
            if pos.margin_mode and pos.size and not _isolated_above_maintenance(pos):
                fail(f"isolated position {acct.index}/{pos.market.index} under maintenance")
        if isolated != acct.isolated:
            fail(f"account {acct.index}: {acct.isolated} isolated positions counted, {isolated}")
        if sub_counts.get(ai, 0) != acct.sub_accounts:
            fail(f"account {ai}: {acct.sub_accounts} sub-accounts counted, {sub_counts.get(ai)}")
        master = st.accounts.get(acct.master_index)
        if master is None or master.master_index != master.index:
            fail(f"account {ai}: its master {acct.master_index} is not a master account")
        elif master is not acct and (
            master.l1_address != acct.l1_address or ai <= st.next_sub_index
        ):
            fail(f"account {ai}: a sub-account without its master's L1 address or below the next")
    if cash != st.total_deposits - st.total_withdrawals:
        fail(f"cash not conserved: {cash} != {st.total_deposits - st.total_withdrawals}")

    seen_orders: dict[int, Order] = {}
    open_lots: dict[tuple[int, int], list[int]] = {}
    for mi, m in st.markets.items():
        net = 0
        longs = 0
        holders = set()
        for acct in st.accounts.values():
            p = acct.positions.get(mi)
            if p is not None and p.size:
                net += p.size
                longs += max(p.size, 0)
                holders.add(acct.index)
        if net != 0:
            fail(f"market {mi}: positions net to {net}")
        if longs != m.open_interest:
            fail(f"market {mi}: open interest {m.open_interest} != longs {longs}")
        if holders != set(m.holders):
            fail(f"market {mi}: holders index out of date")
        order = [p.account.index for p in m.holder_order]
        if order != sorted(order):
            fail(f"market {mi}: holder order not by account")
        known = {id(p) for p in m.holder_order} | {id(p) for p in m.new_holders}
        if any(id(p) not in known for p in m.holders.values()):
            fail(f"market {mi}: a holder is missing from the holder order")
        queued = {id(p) for p in m.unarmed}
        for acct in st.accounts.values():
            p = acct.positions.get(mi)
            if p is None:
                continue
            if p.queued != bool(p.size and acct.unarmed):
                fail(f"position {acct.index}/{mi}: queued {p.queued}, unarmed {acct.unarmed}")
            if p.queued and id(p) not in queued:
                fail(f"market {mi}: queued position of {acct.index} not in its unarmed list")
        for side in (m.bids, m.asks):
            _check_side(st, side, mi, seen_orders, open_lots)
        if m.bids.best and m.asks.best and m.bids.best >= m.asks.best:
            fail(f"market {mi}: crossed book {m.bids.best} >= {m.asks.best}")

    if set(seen_orders) != set(st.orders):
        fail("engine order map differs from the books")
    listed: set[int] = set()
    for acct in st.accounts.values():
        resting = _account_orders(acct, fail)
        for o in resting:
            if seen_orders.get(o.index) is not o or o.account is not acct:
                fail(f"account {acct.index} lists order {o.index} not on its books")
            listed.add(id(o))
        cois = {o.client_index: o for o in resting if o.client_index}
        if len(cois) != sum(1 for o in resting if o.client_index):
            fail(f"account {acct.index}: duplicate client order index")
        if acct.coi is None:
            if acct.order_count > COI_SCAN:
                fail(f"account {acct.index}: {acct.order_count} orders and no client index map")
        elif cois != acct.coi:
            fail(f"account {acct.index}: client order index map out of date")
        for mi, pos in acct.positions.items():
            bo, ao = open_lots.get((acct.index, mi), [0, 0])
            if (pos.bid_open, pos.ask_open) != (bo, ao):
                fail(
                    f"position {acct.index}/{mi}: open lots {pos.bid_open, pos.ask_open}"
                    f" != orders {bo, ao}"
                )
    for acct in st.accounts.values():
        if acct.c_epoch == st.epoch:
            cached = (acct.c_upnl, acct.c_mm, acct.c_im)
            refresh(st, acct)
            if cached != (acct.c_upnl, acct.c_mm, acct.c_im):
                fail(
                    f"account {acct.index}: cached risk {cached} != "
                    f"{(acct.c_upnl, acct.c_mm, acct.c_im)}"
                )
    for acct in st.accounts.values():
        equity, mmr = equity_mmr(st, acct)
        if equity * 10_000 < mmr:
            fail(f"account {acct.index} is under maintenance margin and was not liquidated")
    for o in seen_orders.values():
        if id(o) not in listed:
            fail(f"order {o.index} missing from its account")
    _check_conds(st, fail)


def _check_conds(st: ExchangeState, fail: Callable[[str], None]) -> None:
    """The conditional orders' invariants (see the module docstring)."""
    if st.cond_after or st.check_markets or st.untie:
        fail("conditional work left for after the command")
    waiting: dict[int, int] = {}
    for acct in st.accounts.values():
        mine = acct.conds
        if mine is None:
            continue
        if not mine:
            fail(f"account {acct.index}: an empty waiting-order map")
        resting_cois = {o.client_index for o in acct.resting_orders() if o.client_index}
        cois = [c.client_index for c in mine.values() if c.client_index]
        if len(set(cois)) != len(cois) or resting_cois & set(cois):
            fail(f"account {acct.index}: a client order index used twice")
        if acct.order_count + len(mine) > MAX_OPEN_ORDERS_PER_ACCOUNT:
            fail(f"account {acct.index}: too many open orders")
        for i, c in mine.items():
            if c.account is not acct or c.ref != i or st.conds.get(i) is not c:
                fail(f"account {acct.index}: waiting order {i} misfiled")
            waiting[i] = acct.index
    armed: dict[int, int] = {}
    twaps = {k & INDEX_MASK: k >> EXPIRY_SHIFT for k in st.twaps}
    for i, c in st.conds.items():
        if c.index != i or i >= st.next_order_index:
            fail(f"conditional order {i} stored as {c.index}")
        if i in waiting:
            if is_armed(c):
                armed[i] = c.market.index
                m = c.market
                if fires_when_above(c.order_type, c.is_ask):
                    if m.mark >= c.trigger_price:
                        fail(f"conditional order {i}: armed beyond its trigger")
                elif m.mark <= c.trigger_price:
                    fail(f"conditional order {i}: armed beyond its trigger")
                if c.size == 0:
                    pos = c.account.position_in(m)
                    if reduce_only_increases(pos.size if pos is not None else 0, c.is_ask):
                        fail(f"position-tied order {i} cannot reduce its position")
            elif c.trigger_status == TRIGGER_TWAP and twaps.get(i) != c.next_slice:
                fail(f"TWAP {i}: next slice {c.next_slice} not listed")
        else:
            o = st.orders.get(i)
            if (
                o is None
                or o.cond is not c
                or (c.trigger_status not in (TRIGGER_NA, TRIGGER_READY))
            ):
                fail(f"conditional order {i}: neither waiting nor on the book with its order")
    for o in st.orders.values():
        if o.cond is not None and st.conds.get(o.index) is not o.cond:
            fail(f"order {o.index} carries a condition that is not live")
    for m in st.markets.values():
        live: dict[int, int] = {}
        for up, heap in ((True, m.trig_up), (False, m.trig_down)):
            for key in heap:
                if live_trigger(st, m, key, up) is not None:
                    live[key & INDEX_MASK] = live.get(key & INDEX_MASK, 0) + 1
        mine_armed = {i for i, mi in armed.items() if mi == m.index}
        if set(live) != mine_armed or any(n != 1 for n in live.values()):
            fail(f"market {m.index}: trigger heaps disagree with the armed orders")
        if m.trig_live != len(mine_armed):
            fail(f"market {m.index}: trig_live {m.trig_live} != {len(mine_armed)} armed")


def _check_side(
    st: ExchangeState,
    side: Side,
    mi: int,
    seen: dict[int, Order],
    open_lots: dict[tuple[int, int], list[int]],
) -> None:
    def bad(msg: str) -> None:
        raise InvariantViolation(f"market {mi} {'ask' if side.is_ask else 'bid'}: {msg}")

    levels = side.levels
    if levels:
        best = min(levels) if side.is_ask else max(levels)
        if side.best != best:
            bad(f"cached best {side.best} != {best}")
    elif side.best != 0:
        bad(f"empty side with best {side.best}")
    for price, lvl in levels.items():
        if price not in side.in_heap:
            bad(f"price {price} missing from the heap")
        if lvl.price != price or lvl.key != price or lvl.is_ask != side.is_ask:
            bad(f"level {price} mislabelled")
        total = 0
        prev: Order | None = None
        o = lvl.head
        if o is None:
            bad(f"empty level {price}")
        while o is not None:
            if o.position is None or o.position is not o.account.positions.get(mi):
                bad(f"order {o.index} does not point at its account's position")
            if o.prev is not prev or o.level is not lvl:
                bad(f"broken links at order {o.index}")
            if o.price != price or o.is_ask != side.is_ask or o.market.index != mi:
                bad(f"order {o.index} on the wrong level")
            if o.ref != o.index:
                bad(f"order {o.index} boxed index {o.ref}")
            if o.remaining <= 0 or o.remaining > o.initial:
                bad(f"order {o.index} remaining {o.remaining} of {o.initial}")
            if prev is not None and prev.priority >= o.priority:
                bad(f"order {o.index} out of time priority")
            if o.index in seen or o.index >= st.next_order_index:
                bad(f"order index {o.index} duplicated or unallocated")
            seen[o.index] = o
            if not o.reduce_only:
                lots = open_lots.setdefault((o.account.index, mi), [0, 0])
                lots[1 if o.is_ask else 0] += o.remaining
            total += o.remaining
            prev = o
            o = o.next
        if lvl.tail is not prev:
            bad(f"level {price} tail out of date")
        if total != lvl.size:
            bad(f"level {price} size {lvl.size} != orders {total}")


def _account_orders(acct: Account, fail: Callable[[str], None]) -> list[Order]:
    """The account's resting-order list, its links and count checked."""
    out: list[Order] = []
    prev = None
    o = acct.first_order
    while o is not None:
        if o.acct_prev is not prev:
            fail(f"account {acct.index}: order {o.index} has a broken back link")
        if len(out) > acct.order_count:
            fail(f"account {acct.index}: more orders listed than its count {acct.order_count}")
        out.append(o)
        prev = o
        o = o.acct_next
    if len(out) != acct.order_count:
        fail(f"account {acct.index}: {len(out)} orders listed, count {acct.order_count}")
    return out
