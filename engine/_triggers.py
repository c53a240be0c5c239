"""Conditional orders in action: stop-loss / take-profit and TWAP (CreateOrder types 2-6),
grouped orders (CreateGroupedOrders, tx 28), firing on mark moves, TWAP slices, and the work the
order path leaves for the end of a command. Lighter's rules: lighter-go
``types/txtypes/create_order.go`` and ``create_grouped_orders.go``
(``rules.conditional_order_code``, ``rules.grouped_orders_code``); where Lighter's exact
behaviour is not public, raydex's rule is written here and in docs/lighter-compatibility.md
("Conditional orders").

- **Stop-loss / take-profit** (perps): placed, they wait off the book (PENDING, trigger status
  MARK_PRICE) in their market's trigger heaps. They fire when the *mark* reaches the trigger: a
  stop-loss sells at ``mark <= trigger`` and buys at ``mark >= trigger``, a take-profit the other
  way (``rules.fires_when_above``); one armed beyond its trigger fires at the end of the command
  that armed it. Fired (:func:`fire`), it executes under its own order index through the order
  path's checks (``_orders.place``: reduce-only, initial margin, band, minimum size) as a market
  order (types 2, 4: IOC, ``price`` its worst price) or a limit order (types 3, 5: ``price`` with
  its time in force and expiry). Size 0 (reduce-only) is the position's size when it fires. A
  fired order refused by those checks ends CANCELED_MARGIN_NOT_ALLOWED (initial margin),
  CANCELED_REDUCE_ONLY (nothing to reduce) or CANCELED (anything else). No margin is held while
  it waits: the initial-margin check is the one at fire time, as for a new order.
- **Firing order**: a mark move first fires what it crossed in its market, in crossing order
  (those due on a rise by ascending trigger, those due on a fall by descending trigger; ties by
  order index), then the liquidation checks run (``_markets.set_mark_price``).
- **Grouped orders**: OCO, two reduce-only triggers on a position, armed at once, each the
  other's ``sibling``: the one that fires or is cancelled by its owner cancels the other
  (CANCELED_OCO). OTO / OTOCO: an entry (limit or market, placed as a CreateOrder would be) and
  one or two children (size 0, reduce-only, the other side) waiting (PARENT_ORDER) until the
  entry's first fill arms them; an entry that leaves the book before any fill cancels them
  (CANCELED_CHILD); OTOCO's children are each other's siblings. All or nothing: a group refused
  by its rules or its entry's checks places nothing; indexes are given in the group's order.
- **TWAP**: GoodTillTime, no trigger, its expiry is its end (5 min .. 24 h from now). Every
  ``TWAP_SLICE_MS`` of block time from its placement, a slice (a market order, IOC, its own
  order index, never worse than the TWAP's price, reduce-only if the TWAP is) takes what keeps
  the fill on schedule (``rules.twap_slice``). It runs (ACTIVE_LIMIT, trigger status TWAP)
  until filled (FILLED) or its last slice (CANCELED_EXPIRED with size left); a slice refused
  for margin or reduce-only ends it (CANCELED_MARGIN_NOT_ALLOWED / CANCELED_REDUCE_ONLY); one
  below the market's minimum or outside its band is skipped.
- **Time**: waiting orders expire and TWAPs slice at the start of any command whose time is due
  (:func:`run_due`, ``ExchangeState.cond_due``: one comparison per command); the sequencer's
  oracle sends a ``TimeTick`` when the engine says something is due (``Engine.cond_due_ms``),
  so they run without user traffic too.
- **Counts**: waiting orders count toward ``MAX_OPEN_ORDERS_PER_ACCOUNT`` with the resting
  ones; their client order indexes are unique with them; CancelOrder, CancelAllOrders and
  liquidation end them like resting orders; ModifyOrder moves a waiting stop-loss /
  take-profit (``_pending.modify_waiting``).

Cost: placing is O(log n); a mark move is O(crossed triggers) plus their execution, never a
walk over the waiting orders; :func:`run_due` is O(due entries).
"""

from __future__ import annotations

from typing import Any, Final

from raydex.codecs import (
    CreateGroupedOrders,
    CreateOrder,
    OrderInfo,
    TimeTick,
)

from ._deltas import Deltas
from ._liquidation import check_traded
from ._model import Account, Cond, Market, heappop
from ._orders import CreateOrderT, expire, gate, place
from ._pending import (
    TRIGGER_CEIL,
    arm,
    due_time,
    emit,
    finish,
    has_client_index,
    hold,
    is_armed,
    is_waiting,
    list_expiry,
    live_trigger,
    release,
    schedule_twap,
    start_twap,
    untie,
    wait,
    waiting_count,
)
from ._state import (
    EXPIRY_SHIFT,
    INDEX_MASK,
    MAX_48,
    MAX_OPEN_ORDERS_PER_ACCOUNT,
    ExchangeState,
)
from .codes import (
    ACTIVE_LIMIT,
    CANCELED,
    CANCELED_CHILD,
    CANCELED_EXPIRED,
    CANCELED_MARGIN_NOT_ALLOWED,
    CANCELED_OCO,
    CANCELED_REDUCE_ONLY,
    CLIENT_ORDER_INDEX_EXISTS,
    FEATURE_NOT_SUPPORTED,
    FILLED,
    IN_PROGRESS,
    INVALID_CLIENT_ORDER_INDEX,
    INVALID_PARAM,
    IOC,
    LIMIT,
    MARKET,
    MARKET_NOT_ACTIVE,
    MARKET_NOT_FOUND,
    NOT_ENOUGH_MARGIN,
    OCO,
    OK,
    OTOCO,
    REDUCE_ONLY_INCREASES_POSITION,
    STOP_LOSS,
    TAKE_PROFIT,
    TOO_MANY_ORDERS,
    TRIGGER_NA,
    TRIGGER_PARENT_ORDER,
    TRIGGER_READY,
    TRIGGER_TWAP,
    TWAP,
)
from .rules import (
    MAX_GROUPED_ORDERS,
    TWAP_SLICE_MS,
    conditional_order_code,
    grouped_orders_code,
    reduce_only_increases,
    twap_slice,
)

#: A fired order's or TWAP slice's refusal (``_orders.place``'s code) -> the status it ends with.
_REFUSED: Final = {
    NOT_ENOUGH_MARGIN: CANCELED_MARGIN_NOT_ALLOWED,
    REDUCE_ONLY_INCREASES_POSITION: CANCELED_REDUCE_ONLY,
}


# ---- placing -------------------------------------------------------------------------------------


def create_conditional(st: ExchangeState, c: CreateOrder, now: int, out: Deltas) -> int:
    """CreateOrder of a stop-loss / take-profit (2-5) or TWAP (6): gates, checks, then it waits.
    Its order index is ``last_order_index``."""
    t: CreateOrderT = c
    ai, ki, mi, coi, size, price, is_ask, otype, tif, ro, trig, oexp, exp_at, nonce, _s, b, e = t
    code, acct = gate(st, ai, ki, nonce, exp_at, now, out)
    if acct is None:
        return code
    if b or e:  # a waiting order does not keep self-trade modes (docs/lighter-compatibility.md)
        return FEATURE_NOT_SUPPORTED
    m, code = _market(st, mi, now, out)
    if m is None:
        return code
    if is_ask != 0 and is_ask != 1:
        return INVALID_PARAM
    code = conditional_order_code(otype, tif, size, price, trig, ro, oexp, now)
    if code:
        return code
    code = _room_code(acct, [coi])
    if code:
        return code
    if ro and reduce_only_increases(_position_size(acct, m), is_ask):
        return REDUCE_ONLY_INCREASES_POSITION
    oi = _new_index(st)
    st.last_order_index = oi
    cond = Cond(oi, acct, m, coi, is_ask, price, size, oexp, otype, tif, ro, trig, now)
    if otype == TWAP:
        cond.next_slice = now + TWAP_SLICE_MS
        start_twap(st, cond, out)
    else:
        arm(st, cond, out)
    return OK


def create_grouped(st: ExchangeState, c: CreateGroupedOrders, now: int, out: Deltas) -> int:
    """CreateGroupedOrders (see the module docstring); ``last_order_index`` is its first
    order's index."""
    t: tuple[Any, ...] = c  # (fields by position: a NamedTuple's attribute is a generic read)
    code, acct = gate(st, t[0], t[1], t[_NONCE], t[_EXPIRED_AT], now, out)
    if acct is None:
        return code
    grouping: int = t[2]
    infos = group_infos(c)
    if infos is None:
        return INVALID_PARAM  # something in the slots past its order count
    if not infos:
        return grouped_orders_code(grouping, [], now)
    m, code = _market(st, infos[0][0], now, out)
    if m is None:
        return code
    code = grouped_orders_code(grouping, infos, now)
    if code:
        return code
    code = _room_code(acct, [o[1] for o in infos])
    if code:
        return code
    if grouping == OCO:
        return _place_oco(st, acct, m, infos, now, out)
    return _place_entry(st, acct, m, infos, grouping == OTOCO, now, out)


#: Where ``CreateGroupedOrders``' slots start, and their width (``OrderInfo``'s fields).
#: (``Final[int]``: native ints, where an inferred type would be an object in the arithmetic.)
_FIRST_SLOT: Final[int] = CreateGroupedOrders._fields.index("market_index_0")
_SLOT_FIELDS: Final[int] = len(OrderInfo._fields)
assert _SLOT_FIELDS == 10, "group_infos reads a slot's 10 fields one by one"
_EXPIRED_AT: Final[int] = CreateGroupedOrders._fields.index("expired_at")
_NONCE: Final[int] = CreateGroupedOrders._fields.index("nonce")


def group_infos(c: CreateGroupedOrders) -> list[tuple[int, ...]] | None:
    """The ``order_count`` orders of ``c`` as ``OrderInfo`` field tuples, in order: what the
    codec's ``grouped_orders`` reads, compiled here (the codec's helpers run interpreted, ~11k
    instructions a call); None when a slot past the count is not all 0 (the codec's
    ``grouped_canonical``). The slots are read by position from the command's own tuple: a
    slice of a NamedTuple is a generic call, a position in a tuple one read."""
    t: tuple[Any, ...] = c
    count: int = t[_FIRST_SLOT - 1]  # order_count
    n = 0 if count < 0 else count if count < MAX_GROUPED_ORDERS else MAX_GROUPED_ORDERS
    for j in range(_FIRST_SLOT + n * _SLOT_FIELDS, _FIRST_SLOT + MAX_GROUPED_ORDERS * _SLOT_FIELDS):
        v: int = t[j]
        if v != 0:
            return None
    infos: list[tuple[int, ...]] = []
    for i in range(n):
        at = _FIRST_SLOT + i * _SLOT_FIELDS
        # The slot's fields one by one: a tuple slice is a generic call (~600 instructions).
        infos.append(
            (t[at], t[at + 1], t[at + 2], t[at + 3], t[at + 4],
             t[at + 5], t[at + 6], t[at + 7], t[at + 8], t[at + 9])
        )  # fmt: skip
    return infos


def time_tick(st: ExchangeState, c: TimeTick, now: int, out: Deltas) -> int:
    """TimeTick: nothing of its own (what is due ran at the start of the command)."""
    return OK


def _market(st: ExchangeState, mi: int, now: int, out: Deltas) -> tuple[Market | None, int]:
    m = st.market(mi)
    if m is None:
        return None, MARKET_NOT_FOUND
    if m.next_expiry < now:
        expire(st, m, now, out)
    if m.status != 1:
        return None, MARKET_NOT_ACTIVE
    return m, OK


def _room_code(acct: Account, cois: list[int]) -> int:
    """0, or why not: client order indexes free (unique among the account's resting and
    waiting orders) and room for these orders under ``MAX_OPEN_ORDERS_PER_ACCOUNT``."""
    for coi in cois:
        if coi:
            if not 0 < coi <= MAX_48:
                return INVALID_CLIENT_ORDER_INDEX
            if acct.find_client_order(coi) is not None or has_client_index(acct, coi):
                return CLIENT_ORDER_INDEX_EXISTS
    if acct.order_count + waiting_count(acct) + len(cois) > MAX_OPEN_ORDERS_PER_ACCOUNT:
        return TOO_MANY_ORDERS
    return 0


def _position_size(acct: Account, m: Market) -> int:
    pos = acct.position_in(m)
    return 0 if pos is None else pos.size


def _new_index(st: ExchangeState) -> int:
    oi = st.next_order_index
    st.next_order_index = oi + 1
    return oi


def _cond(acct: Account, m: Market, oi: int, o: tuple[int, ...], now: int) -> Cond:
    """A ``Cond`` of grouped order ``o`` (an ``OrderInfo``) with index ``oi``."""
    _mi, coi, size, price, is_ask, otype, tif, ro, trig, expiry = o
    return Cond(oi, acct, m, coi, is_ask, price, size, expiry, otype, tif, ro, trig, now)


def _pair(a: Cond, b: Cond) -> None:
    a.sibling = b
    b.sibling = a
    a.sibling_index = b.index
    b.sibling_index = a.index


def _place_oco(
    st: ExchangeState, acct: Account, m: Market, infos: list[tuple[int, ...]], now: int, out: Deltas
) -> int:
    """OCO: a stop-loss and a take-profit reducing the position, armed now."""
    if reduce_only_increases(_position_size(acct, m), infos[0][4]):
        return REDUCE_ONLY_INCREASES_POSITION
    a = _cond(acct, m, _new_index(st), infos[0], now)
    b = _cond(acct, m, _new_index(st), infos[1], now)
    _pair(a, b)
    st.last_order_index = a.index
    arm(st, a, out)
    arm(st, b, out)
    return OK


def _place_entry(
    st: ExchangeState,
    acct: Account,
    m: Market,
    infos: list[tuple[int, ...]],
    oco: bool,
    now: int,
    out: Deltas,
) -> int:
    """OTO / OTOCO: the entry's links are reported first (its ``ConditionalOrderUpdated``: the
    ``OrderUpdated`` that ends it, now or later, closes that record, so an entry that never rests
    shows its children too), then the entry goes through the order path carrying its children
    (linked, not yet registered: its first fill, maybe right here, arms them); the children left
    wait for it if it rests, or end CANCELED_CHILD if it neither filled nor rests. Indexes: the
    entry's, then its children's, allocated only if the entry is accepted; an entry refused
    before it was created leaves nothing, its report taken back (nothing is written between)."""
    e = infos[0]
    first = st.next_order_index
    kids = [_cond(acct, m, first + 1 + i, o, now) for i, o in enumerate(infos[1:])]
    entry = _cond(acct, m, first, e, now)
    entry.status = ACTIVE_LIMIT
    entry.trigger_status = TRIGGER_NA
    entry.kids = kids
    entry.kid_indexes = (kids[0].index, kids[1].index if len(kids) > 1 else 0)
    for k in kids:
        k.parent_index = first
        k.trigger_status = TRIGGER_PARENT_ORDER
    if oco:
        _pair(kids[0], kids[1])
    at = out.size()
    count = out.count
    emit(out, entry)
    code, made = _execute(
        st, acct, m, 0, e[1], e[2], e[3], e[4], e[5], e[6], e[7], e[9], now, out, entry
    )
    if made != first:
        out.rewind(at, count)  # refused before it was created: nothing placed, nothing reported
        return code
    st.next_order_index = first + 1 + len(kids)
    rests = st.orders.get(first) is not None
    for k in kids:
        if k.status < 0:  # not armed by a fill
            if rests:
                wait(st, k, out)
            else:
                finish(st, k, CANCELED_CHILD, out, False)
    if rests:
        st.conds[entry.ref] = entry
    st.last_order_index = first
    return code


def _execute(
    st: ExchangeState,
    acct: Account,
    m: Market,
    oi: int,
    coi: int,
    size: int,
    price: int,
    is_ask: int,
    otype: int,
    tif: int,
    ro: int,
    oexp: int,
    now: int,
    out: Deltas,
    cond: Cond | None,
) -> tuple[int, int]:
    """``_orders.place`` for the engine's own placements: ``(code, index of the order it made,
    0 if none)``; ``last_order_index`` (the reply to the command's sender) is left as it was."""
    saved = st.last_order_index
    st.last_order_index = 0
    code = place(
        st, acct, m.index, coi, size, price, is_ask, otype, tif, ro, oexp, 0, now, out, oi, cond
    )
    made = st.last_order_index
    st.last_order_index = saved
    return code, made


# ---- firing --------------------------------------------------------------------------------------


def fire_crossed(st: ExchangeState, m: Market, now: int, out: Deltas) -> None:
    """Fire ``m``'s armed orders its mark has reached, in crossing order (module docstring)."""
    mark = m.mark
    due: list[Cond] = []
    up = m.trig_up
    bound = (mark + 1) << EXPIRY_SHIFT  # entries with trigger <= mark
    while up and up[0] < bound:
        c = live_trigger(st, m, heappop(up), True)
        if c is not None:
            due.append(c)
    down = m.trig_down
    bound = (TRIGGER_CEIL - mark + 1) << EXPIRY_SHIFT  # entries with trigger >= mark
    while down and down[0] < bound:
        c = live_trigger(st, m, heappop(down), False)
        if c is not None:
            due.append(c)
    for c in due:
        if is_armed(c):  # (an earlier one's OCO may have cancelled it)
            fire(st, c, now, out)


def fire(st: ExchangeState, c: Cond, now: int, out: Deltas) -> None:
    """``c`` fires: its OCO sibling ends CANCELED_OCO, and it executes under its own index."""
    release(st, c)
    c.status = IN_PROGRESS
    c.trigger_status = TRIGGER_READY
    c.trigger_time = now
    sib = c.sibling
    if sib is not None and is_waiting(sib):
        finish(st, sib, CANCELED_OCO, out, False)
    acct = c.account
    m = c.market
    size = c.size if c.size else abs(_position_size(acct, m))
    emit(out, c)
    if size == 0:
        finish(st, c, CANCELED_REDUCE_ONLY, out, False)
        return
    market_kind = c.order_type == STOP_LOSS or c.order_type == TAKE_PROFIT
    otype = MARKET if market_kind else LIMIT
    tif = IOC if market_kind else c.tif
    oexp = 0 if tif == IOC else c.expiry
    code, made = _execute(
        st, acct, m, c.index, c.client_index, size, c.price, c.is_ask, otype, tif,
        c.reduce_only, oexp, now, out, c,
    )  # fmt: skip
    if made == 0:
        finish(st, c, _REFUSED.get(code, CANCELED), out, False)
    elif st.orders.get(c.ref) is None:
        st.conds.pop(c.ref, None)  # executed and gone: its OrderUpdated closed it


# ---- time ----------------------------------------------------------------------------------------


def run_due(st: ExchangeState, now: int, out: Deltas) -> None:
    """Expire the waiting orders whose expiry passed (CANCELED_EXPIRED, by expiry then index) and
    run the TWAP slices due at ``now`` (by time then index); ``cond_due`` moves on."""
    exp = st.cond_expiries
    while exp and exp[0] >> EXPIRY_SHIFT < now:
        key = heappop(exp)
        c = st.conds.get(key & INDEX_MASK)
        if (
            c is not None
            and c.expiry == key >> EXPIRY_SHIFT
            and c.trigger_status != TRIGGER_TWAP
            and is_waiting(c)
        ):
            finish(st, c, CANCELED_EXPIRED, out, False)
    twaps = st.twaps
    while twaps and twaps[0] >> EXPIRY_SHIFT <= now:
        key = heappop(twaps)
        c = st.conds.get(key & INDEX_MASK)
        if (
            c is not None
            and c.next_slice == key >> EXPIRY_SHIFT
            and c.trigger_status == TRIGGER_TWAP
            and is_waiting(c)
        ):
            _slice(st, c, now, out)
    st.cond_due = due_time(st)


def _slice(st: ExchangeState, c: Cond, now: int, out: Deltas) -> None:
    """One TWAP slice of ``c`` at ``now`` (see the module docstring)."""
    m = c.market
    acct = c.account
    start = c.created_at
    n = max(1, (c.expiry - start) // TWAP_SLICE_MS)
    k = min(n, (now - start) // TWAP_SLICE_MS)
    q = twap_slice(c.size, c.size - c.remaining, start, c.expiry, now, m.min_base)
    if q > 0:
        before = _position_size(acct, m)
        code, made = _execute(
            st, acct, m, 0, 0, q, c.price, c.is_ask, MARKET, IOC, c.reduce_only, 0, now, out, None
        )
        if made:
            c.remaining -= abs(_position_size(acct, m) - before)
            c.slice_index = made
        else:
            status = _REFUSED.get(code, 0)
            if status:
                finish(st, c, status, out, False)
                return
    if c.remaining == 0:
        finish(st, c, FILLED, out, False)
    elif k >= n:
        finish(st, c, CANCELED_EXPIRED, out, False)
    else:
        c.next_slice = start + (k + 1) * TWAP_SLICE_MS
        schedule_twap(st, c)
        emit(out, c)


# ---- the end of a command ------------------------------------------------------------------------


def settle(st: ExchangeState, now: int, out: Deltas) -> None:
    """The end of a command with conditional work left (``ExchangeState.cond_after``): armed
    orders already beyond their trigger fire, position-tied orders of positions that closed or
    flipped end, and the traders are checked for maintenance (``check_traded``), until nothing is
    left (each round fires or ends orders, liquidates accounts: it ends)."""
    while st.cond_after or st.traded_head is not None:
        while st.cond_after:
            st.cond_after = False
            if st.untie:
                untie(st, out)
            markets = st.check_markets
            if markets:
                st.check_markets = []
                for i, m in enumerate(markets):
                    if i == 0 or not _listed(markets, i, m):
                        fire_crossed(st, m, now, out)
        if st.traded_head is not None:
            check_traded(st, now, out)


def _listed(markets: list[Market], i: int, m: Market) -> bool:
    """``m`` is among ``markets[:i]`` (a command arms orders in one market or a few: a scan,
    not a set built per command)."""
    return any(markets[j] is m for j in range(i))


# ---- snapshot ------------------------------------------------------------------------------------


def load_cond(st: ExchangeState, r: Any) -> None:
    """Rebuild one ``ConditionalOrderRecord`` (after the books and positions; links resolved by
    :func:`link_loaded` once every record is in)."""
    acct = st.accounts[r.account_index]
    m = st.markets[r.market_index]
    c = Cond(
        r.order_index, acct, m, r.client_order_index, r.is_ask, r.price, r.base_amount,
        r.order_expiry, r.order_type, r.time_in_force, r.reduce_only, r.trigger_price,
        r.created_at,
    )  # fmt: skip
    c.remaining = r.remaining_base_amount
    c.trigger_time = r.trigger_time
    c.parent_index = r.parent_order_index
    c.kid_indexes = (r.to_trigger_order_index_0, r.to_trigger_order_index_1)
    c.sibling_index = r.to_cancel_order_index_0
    c.next_slice = r.next_slice_at
    c.slice_index = r.slice_order_index
    status = r.status
    ts = r.trigger_status
    if ts == TRIGGER_TWAP:
        start_twap_loaded(st, c)
    elif status == IN_PROGRESS or ts == TRIGGER_NA:  # on the book
        c.status = status
        c.trigger_status = ts
        st.conds[c.ref] = c
        o = st.orders[c.ref]
        o.cond = c
    elif ts == TRIGGER_PARENT_ORDER:
        c.status = status
        c.trigger_status = ts
        hold(st, c)
        list_expiry(st, c)
    else:
        arm_loaded(st, c)


def start_twap_loaded(st: ExchangeState, c: Cond) -> None:
    """Register a loaded TWAP without reporting it."""
    c.status = ACTIVE_LIMIT
    c.trigger_status = TRIGGER_TWAP
    hold(st, c)
    schedule_twap(st, c)


def arm_loaded(st: ExchangeState, c: Cond) -> None:
    """Arm a loaded trigger order without reporting it (a snapshot load emits nothing)."""
    scratch = Deltas()
    arm(st, c, scratch)
    st.check_markets.clear()
    st.untie.clear()
    st.cond_after = False


def link_loaded(st: ExchangeState) -> None:
    """Resolve the loaded orders' acting links (``kids``, ``sibling``) to the live ones."""
    conds = st.conds
    for c in conds.values():
        if c.sibling_index:
            c.sibling = conds.get(c.sibling_index)
        k0, k1 = c.kid_indexes
        if k0:
            c.kids = [k for k in (conds.get(k0), conds.get(k1) if k1 else None) if k is not None]
    st.cond_due = due_time(st)
