"""Conditional orders' bookkeeping: where a ``Cond`` is registered, how it waits, arms, leaves,
and what its links cancel; plus the order path's hooks. Data and events only: what executes an
order (firing, TWAP slices, grouped entries) is ``_triggers``, above the order path.

States (``Cond.status`` / ``trigger_status``, Lighter's values, emitted as
``ConditionalOrderUpdated`` at every change, so the events alone rebuild them):

- waiting for its entry: PENDING / PARENT_ORDER (:func:`wait`), a grouped child;
- armed: PENDING / MARK_PRICE (:func:`arm`), in its market's trigger heap;
- running: ACTIVE_LIMIT / TWAP, a TWAP (``_triggers``);
- fired: IN_PROGRESS / READY (``_triggers.fire``): it executes as an order with its index; if
  that order rests, the ``Cond`` stays with it (``Order.cond``) until it leaves the book;
- an entry's links while it rests: ACTIVE_LIMIT / NA;
- ended (:func:`finish`): a final status; it leaves ``ExchangeState.conds`` and its account.

Links: an OCO order's ``sibling`` is cancelled (CANCELED_OCO) when it fires or is cancelled by
its owner (:func:`finish` with ``cascade``), not when both lapse together (expiry, cancel-all,
liquidation); an entry's ``kids`` are armed by its first fill (:func:`order_filled`) and
cancelled (CANCELED_CHILD) when it leaves the book before any (:func:`order_left`).

Position-tied orders (size 0): when their position closes or flips (``_orders.apply_fill``
queues it in ``ExchangeState.untie`` if its account has waiting orders), and when one is armed
(a grouped child armed by its entry's fill may face a position the fill did not turn), those
that cannot reduce the position as it stands at the end of the command end CANCELED_REDUCE_ONLY
(:func:`untie`): after a command, every armed position-tied order can reduce its position.

Cost: registering, arming and ending are O(log n) (a heap push; entries are dropped lazily);
a hook on the order path is one attribute test unless the order carries a ``Cond``.
"""

from __future__ import annotations

from typing import Any, Final

from ._deltas import Deltas
from ._model import Account, Cond, Market, Order, Position, heapify, heappush
from ._state import EXPIRY_SHIFT, INDEX_MASK, NO_DUE, ExchangeState
from .codes import (
    ACTIVE_LIMIT,
    ALL_MARKETS,
    CANCELED_CHILD,
    CANCELED_OCO,
    CANCELED_REDUCE_ONLY,
    INVALID_PRICE,
    INVALID_SIZE,
    INVALID_TRIGGER_PRICE,
    NOT_ACTIVE_LIMIT_ORDER,
    OK,
    PENDING,
    TRIGGER_MARK_PRICE,
    TRIGGER_PARENT_ORDER,
    TRIGGER_TWAP,
)
from .rules import MAX_LOTS, MAX_PRICE, fires_when_above, reduce_only_increases

#: ``Market.trig_down`` keys are ``((TRIGGER_CEIL - trigger) << EXPIRY_SHIFT) + index``: the
#: highest trigger pops first.
TRIGGER_CEIL: Final = MAX_PRICE
#: Compact a market's trigger heaps past ``2 * live + TRIGGER_SLACK`` entries.
TRIGGER_SLACK: Final = 64


# ---- events and records --------------------------------------------------------------------------


def cond_fields(c: Cond) -> tuple[Any, ...]:
    """The fields of ``ConditionalOrderUpdated`` (and ``ConditionalOrderRecord``) of ``c``."""
    kid0, kid1 = c.kid_indexes
    return (
        c.market.index,
        c.index,
        c.account.index,
        c.client_index,
        c.is_ask,
        c.price,
        c.size,
        c.remaining,
        c.expiry,
        c.order_type,
        c.tif,
        c.reduce_only,
        c.status,
        c.trigger_status,
        c.trigger_price,
        c.trigger_time,
        c.parent_index,
        kid0,
        kid1,
        c.sibling_index,
        c.created_at,
        c.next_slice,
        c.slice_index,
    )


def emit(out: Deltas, c: Cond) -> None:
    """Report ``c``'s state (``ConditionalOrderUpdated``, written field by field:
    ``Deltas.cond_updated``)."""
    out.cond_updated(c)


# ---- registering ---------------------------------------------------------------------------------


def hold(st: ExchangeState, c: Cond) -> None:
    """``c`` is live and waiting: in ``conds`` and its account's."""
    st.conds[c.ref] = c
    acct = c.account
    mine = acct.conds
    if mine is None:
        mine = acct.conds = {}
    mine[c.ref] = c


def release(st: ExchangeState, c: Cond) -> None:
    """``c`` no longer waits: off its account (its heap entries go stale)."""
    acct = c.account
    mine = acct.conds
    if mine is not None and mine.pop(c.ref, None) is not None and not mine:
        acct.conds = None
    if c.trigger_status == TRIGGER_MARK_PRICE and c.status == PENDING:
        c.market.trig_live -= 1
        c.trig_key = -1


def list_expiry(st: ExchangeState, c: Cond) -> None:
    """List waiting order ``c`` for its expiry: it ends CANCELED_EXPIRED at the first command
    after it (live while ``now <= expiry``, as a resting order)."""
    heappush(st.cond_expiries, (c.expiry << EXPIRY_SHIFT) + c.index)
    if c.expiry + 1 < st.cond_due:
        st.cond_due = c.expiry + 1


def wait(st: ExchangeState, c: Cond, out: Deltas) -> None:
    """Register grouped child ``c`` waiting for its entry's first fill."""
    c.status = PENDING
    c.trigger_status = TRIGGER_PARENT_ORDER
    hold(st, c)
    list_expiry(st, c)
    emit(out, c)


def arm(st: ExchangeState, c: Cond, out: Deltas) -> None:
    """Register ``c`` (a stop-loss / take-profit, maybe a child just released by its entry) as
    waiting for the mark; its market is checked against the mark at the end of the command
    (``_triggers.after_command``: an order armed beyond its trigger fires at once)."""
    listed = c.status == PENDING  # a waiting child is in the expiry heap already
    c.status = PENDING
    c.trigger_status = TRIGGER_MARK_PRICE
    hold(st, c)
    if not listed:
        list_expiry(st, c)
    c.market.trig_live += 1
    _list_trigger(st, c)
    emit(out, c)
    _check_tied(st, c, out)


def _list_trigger(st: ExchangeState, c: Cond) -> None:
    """Push armed ``c``'s live heap entry (its ``trig_key``); its market is checked against
    the mark at the end of the command."""
    m = c.market
    if fires_when_above(c.order_type, c.is_ask):
        key = (c.trigger_price << EXPIRY_SHIFT) + c.index
        heappush(m.trig_up, key)
    else:
        key = ((TRIGGER_CEIL - c.trigger_price) << EXPIRY_SHIFT) + c.index
        heappush(m.trig_down, key)
    c.trig_key = key
    if len(m.trig_up) + len(m.trig_down) > 2 * m.trig_live + TRIGGER_SLACK:
        compact_triggers(st, m)
    st.check_markets.append(m)
    st.cond_after = True


def _check_tied(st: ExchangeState, c: Cond, out: Deltas) -> None:
    """A position-tied armed order must reduce the position as it stands (``untie``)."""
    if c.size == 0:
        pos = c.account.position_in(c.market)
        if pos is not None:
            st.untie.append(pos)
        else:
            finish(st, c, CANCELED_REDUCE_ONLY, out, False)


def modify_waiting(
    st: ExchangeState, c: Cond, size: int, price: int, trigger: int, out: Deltas
) -> int:
    """ModifyOrder of waiting stop-loss / take-profit ``c``: its size (``size`` lots; it is no
    longer position-tied), price and trigger price (0: kept); an armed one is re-keyed in the
    trigger heaps (checked against the mark at the end of the command, as when armed). A TWAP
    is not modified (NOT_ACTIVE_LIMIT_ORDER)."""
    if c.trigger_status == TRIGGER_TWAP:
        return NOT_ACTIVE_LIMIT_ORDER
    if not 1 <= price <= MAX_PRICE:
        return INVALID_PRICE
    if not 1 <= size <= MAX_LOTS:
        return INVALID_SIZE
    trig = trigger if trigger else c.trigger_price
    if not 1 <= trig <= MAX_PRICE:
        return INVALID_TRIGGER_PRICE
    c.size = c.remaining = size
    c.price = price
    c.trigger_price = trig
    if is_armed(c):
        _list_trigger(st, c)  # the old entry is stale now: it is not the ``trig_key``
    emit(out, c)
    return OK


def start_twap(st: ExchangeState, c: Cond, out: Deltas) -> None:
    """Register TWAP ``c``, its first slice ``TWAP_SLICE_MS`` after it was placed
    (``c.next_slice``, set by the caller)."""
    c.status = ACTIVE_LIMIT
    c.trigger_status = TRIGGER_TWAP
    hold(st, c)
    schedule_twap(st, c)
    emit(out, c)


def schedule_twap(st: ExchangeState, c: Cond) -> None:
    """List TWAP ``c``'s next slice (``c.next_slice``)."""
    heappush(st.twaps, (c.next_slice << EXPIRY_SHIFT) + c.index)
    if c.next_slice < st.cond_due:
        st.cond_due = c.next_slice


def is_armed(c: Cond) -> bool:
    return c.status == PENDING and c.trigger_status == TRIGGER_MARK_PRICE


def is_waiting(c: Cond) -> bool:
    """Still waiting for something (its entry, the mark, its TWAP schedule)."""
    return c.ref in c.account.conds if c.account.conds is not None else False


def live_trigger(st: ExchangeState, m: Market, key: int, up: bool) -> Cond | None:
    """The armed order a trigger heap entry of ``m`` names, or None if the entry is stale."""
    c = st.conds.get(key & INDEX_MASK)
    if c is None or c.trig_key != key or c.market is not m:
        return None
    return c if up == fires_when_above(c.order_type, c.is_ask) else None


def compact_triggers(st: ExchangeState, m: Market) -> None:
    """Drop the stale entries of ``m``'s trigger heaps (O(entries))."""
    up = [k for k in m.trig_up if live_trigger(st, m, k, True) is not None]
    down = [k for k in m.trig_down if live_trigger(st, m, k, False) is not None]
    heapify(up)
    heapify(down)
    m.trig_up = up
    m.trig_down = down


def due_time(st: ExchangeState) -> int:
    """The earliest time a waiting order expires (the ms after its expiry) or a TWAP slices
    (NO_DUE: none), from the heads of the two heaps (their stale heads included: a stale head
    costs one early look)."""
    e = st.cond_expiries
    t = st.twaps
    a = (e[0] >> EXPIRY_SHIFT) + 1 if e else NO_DUE
    b = t[0] >> EXPIRY_SHIFT if t else NO_DUE
    return a if a < b else b


# ---- ending --------------------------------------------------------------------------------------


def finish(st: ExchangeState, c: Cond, status: int, out: Deltas, cascade: bool) -> None:
    """End waiting (or fired, not resting) order ``c`` with final ``status``; with ``cascade``
    (it fired or its owner cancelled it), its waiting OCO sibling ends CANCELED_OCO."""
    release(st, c)
    st.conds.pop(c.ref, None)
    c.status = status
    emit(out, c)
    sib = c.sibling
    if cascade and sib is not None and is_waiting(sib):
        finish(st, sib, CANCELED_OCO, out, False)


def end_all(
    st: ExchangeState, acct: Account, status: int, out: Deltas, market: int = ALL_MARKETS
) -> None:
    """End every waiting order of ``acct`` with ``status`` (cancel-all, liquidation), by order
    index, or only those in ``market`` (a cancel-all in one market); their links lapse with
    them."""
    mine = acct.conds
    if mine is None:
        return
    for i in sorted(mine):
        c = mine.get(i)
        if c is not None and (market == ALL_MARKETS or c.market.index == market):
            finish(st, c, status, out, False)


def find(acct: Account, mi: int, index: int, first_order_index: int) -> Cond | None:
    """``acct``'s waiting order in market ``mi`` by client (below ``first_order_index``) or
    exchange order index."""
    mine = acct.conds
    if mine is None:
        return None
    if index >= first_order_index:
        c = mine.get(index)
    else:
        c = None
        for x in mine.values():
            if x.client_index == index:
                c = x
                break
    return c if c is not None and c.market.index == mi else None


def has_client_index(acct: Account, coi: int) -> bool:
    """A waiting order of ``acct`` carries client order index ``coi`` (non-zero)."""
    mine = acct.conds
    return mine is not None and any(c.client_index == coi for c in mine.values())


def waiting_count(acct: Account) -> int:
    mine = acct.conds
    return 0 if mine is None else len(mine)


# ---- the order path's hooks ----------------------------------------------------------------------


def order_filled(st: ExchangeState, c: Cond, out: Deltas) -> None:
    """The order ``c`` is attached to filled (some of) its size: an entry's children still
    waiting for it are armed."""
    kids = c.kids
    if kids is not None:
        for k in kids:
            if k.trigger_status == TRIGGER_PARENT_ORDER and (k.status == PENDING or k.status < 0):
                arm(st, k, out)


def order_left(st: ExchangeState, o: Order, c: Cond, out: Deltas) -> None:
    """Order ``o`` left the book (``c``, its condition, goes with it: the ``OrderUpdated``
    that reported it removes the record); an entry's children still waiting for a first fill
    end CANCELED_CHILD."""
    o.cond = None
    st.conds.pop(c.ref, None)
    kids = c.kids
    if kids is not None:
        for k in kids:
            if k.status == PENDING and k.trigger_status == TRIGGER_PARENT_ORDER:
                finish(st, k, CANCELED_CHILD, out, False)


def position_moved(st: ExchangeState, pos: Position) -> None:
    """``pos`` closed or flipped while its account has waiting orders: check its position-tied
    ones at the end of the command (:func:`untie`)."""
    st.untie.append(pos)
    st.cond_after = True


def untie(st: ExchangeState, out: Deltas) -> None:
    """End the armed position-tied orders (size 0) that can no longer reduce their position as
    it stands now (closed, or flipped to their side): CANCELED_REDUCE_ONLY."""
    queue = st.untie
    st.untie = []
    for pos in queue:
        mine = pos.account.conds
        if mine is None:
            continue
        m = pos.market
        size = pos.size
        for i in sorted(mine):
            c = mine.get(i)
            if (
                c is not None
                and c.market is m
                and c.size == 0
                and is_armed(c)
                and reduce_only_increases(size, c.is_ask)
            ):
                finish(st, c, CANCELED_REDUCE_ONLY, out, False)
