"""The hot order path: gates -> checks -> matching -> fills -> positions, margin; functions over
the ``ExchangeState`` (``_state``).

~95% of commands are CreateOrder / CancelOrder / ModifyOrder; their whole life is in this module:

- gates (:func:`auth`; ``_gate`` also hands the order handlers the account): account, API key,
  nonce, tx deadline; passing them consumes the nonce (``NonceUpdated``);
- ``_place``: field and market checks (the pure ones from ``rules``), reduce-only and the
  pre-trade initial-margin check, then match or rest (:func:`rest`);
- ``_match`` (through :func:`match_and_finish`): price-time matching at the makers' prices,
  self-trade prevention (the taker's mode, ``L2TxAttributes`` 6 and 7), reduce-only clipping,
  fees; :func:`apply_fill` moves positions and realized PnL (an isolated position's money through
  :func:`isolated_fill`, off the cross path: one flag read per fill there); ``_open`` keeps the
  resting-order lots behind the worst case;
  :func:`remove_resting` takes an order off the book, :func:`expire` the expired ones;
- the account risk cache (:func:`refresh`, :func:`equity_imr`, :func:`equity_mmr`): ``c_upnl``,
  ``c_mm``, ``c_im`` per account, updated in O(1) by fills and order changes, recomputed in
  O(markets held) after a mark move (``ExchangeState.epoch``).

The cold parts (``_liquidation``, ``_accounts``, ``_markets``, ``_snapshot``) build on these.

Cost: a resting order is O(1) plus one heap push for a new level (its expiry is a list append,
``Market.expiry_queue``); a fill is O(1); a margin check is O(1) unless the marks moved since the
account's last check. Compiled (mypyc), an ``int`` product takes the fast path only when both
operands are in ``[0, 2**30)``; otherwise it boxes both and calls ``PyNumber_Multiply``, so the
margin and fee products go through ``rules.product`` (an i64 multiply within its bounds). An
``int`` used as a dict key or an event field is boxed anew at each use, so the ids the hot path
passes along are kept boxed once (``Account.ref``, ``Order.ref``, ``Level.key``).
Hot functions keep locals and inline their helpers (Side.append, Side.unlink, _open) on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from raydex.codecs import (
    CancelAllOrders,
    CancelOrder,
    CreateOrder,
    ModifyOrder,
)

from ._deltas import Deltas
from ._model import (
    HEAP_SLACK,
    NO_EXPIRY,
    Account,
    Cond,
    Level,
    Market,
    Order,
    Position,
    Side,
    heapify,
    heappop,
    heappush,
)
from ._pending import (
    end_all,
    find,
    finish,
    has_client_index,
    modify_waiting,
    order_filled,
    order_left,
    position_moved,
    waiting_count,
)
from ._state import (
    BPS,
    DEFAULT_ORDER_LIFETIME_MS,
    EXPIRY_SHIFT,
    FIRST_ORDER_INDEX,
    INDEX_MASK,
    MAX_48,
    MAX_I63,
    MAX_OPEN_ORDERS_PER_ACCOUNT,
    MAX_SHORT,
    ExchangeState,
)
from .codes import (
    ACCOUNT_NOT_FOUND,
    ACTIVE_LIMIT,
    ALL_MARKETS,
    API_KEY_NOT_FOUND,
    CANCELED,
    CANCELED_EXPIRED,
    CANCELED_NOT_ENOUGH_LIQUIDITY,
    CANCELED_POST_ONLY,
    CANCELED_REDUCE_ONLY,
    CANCELED_SELF_TRADE,
    CANCELED_TOO_MUCH_SLIPPAGE,
    CLIENT_ORDER_INDEX_EXISTS,
    FILLED,
    INVALID_CLIENT_ORDER_INDEX,
    INVALID_EXPIRY,
    INVALID_NONCE,
    INVALID_PARAM,
    INVALID_PRICE,
    INVALID_SIZE,
    IOC,
    LIMIT,
    MARKET,
    MARKET_NOT_ACTIVE,
    MARKET_NOT_FOUND,
    NOT_ACTIVE_LIMIT_ORDER,
    NOT_ENOUGH_MARGIN,
    OK,
    POST_ONLY,
    POST_ONLY_WOULD_CROSS,
    REDUCE_ONLY_INCREASES_POSITION,
    ST_CANCEL_BOTH,
    ST_EXPIRE_MAKER,
    ST_EXPIRE_TAKER,
    ST_MASTER_ACCOUNT,
    ST_REDUCE,
    STALE_ORDER_VERSION,
    TOO_MANY_ORDERS,
    TX_EXPIRED,
    UNSUPPORTED_TX_TYPE,
)
from .rules import (
    MAX_PRICE,
    accepted_nonce,
    exposure,
    fee,
    initial_margin,
    initial_margin_ok,
    maintenance_margin,
    order_amount_code,
    order_kind_code,
    product,
    reduce_only_increases,
    unrealized_pnl,
)

#: The expiry key (``Market.expiries``) of an empty queue or heap: after every real one.
NO_EXPIRY_KEY: Final = NO_EXPIRY << EXPIRY_SHIFT

# The order commands' layouts as plain tuples. Unpacked through one of these, a compiled build
# checks the tuple once and reads its items directly (a command is a NamedTuple, so a tuple);
# unpacked as the (interpreted, so untyped) codecs type it iterates item by item, several
# times slower. The signature stays an ``object``: the engine never reads it. So do the fields
# that serve only as dict keys or event fields (``Any``: account, API key, nonce, order index):
# compiled, a native int made into a key or field again allocates a new int object.
CreateOrderT = tuple[
    Any, Any, int, int, int, int, int, int, int, int, int, int, int, Any, object, int, int
]
CancelOrderT = tuple[Any, Any, int, Any, int, Any, object]
ModifyOrderT = tuple[Any, Any, int, Any, int, int, int, int, Any, object, int, int, int]
CancelAllOrdersT = tuple[int, int, int, int, int, int, object, int]

#: :func:`create_order`'s answer for a conditional order type (2-6): not placed here, the engine
#: hands the command to ``_triggers`` (above this module), which gates it itself.
CONDITIONAL: Final = -1


# ---- gates --------------------------------------------------------------------------------------


def auth(
    st: ExchangeState, ai: int, ki: int, nonce: int, expired_at: int, now: int, out: Deltas
) -> int:
    """The four gates of a user tx (see ``_engine``); 0 when passed."""
    return _gate(st, ai, ki, nonce, expired_at, now, out)[0]


def _gate(
    st: ExchangeState, ai: Any, ki: Any, nonce_obj: Any, expired_at: int, now: int, out: Deltas
) -> tuple[int, Account | None]:
    """:func:`auth` that also returns the account when passed (``(0, account)``), so the
    order handlers look it up once (``(code, None)`` when refused). ``ai``, ``ki`` and
    ``nonce_obj`` are int objects: the order commands pass their own (see ``CreateOrderT``)."""
    i: int = ai
    slots = st.account_slots
    acct = slots[i] if 0 <= i < len(slots) else st.accounts.get(ai)
    if acct is None:
        return ACCOUNT_NOT_FOUND, None
    k: int = ki
    if (k != acct.hot_ki or k < 0) and not acct.heat(k):
        return API_KEY_NOT_FOUND, None
    last = acct.hot_nonce  # (the key's, kept on the account: ``Account.heat``)
    nonce: int = nonce_obj
    if nonce != last + 1:
        nonce = accepted_nonce(last, nonce)  # SkipNonce (rules); -1: refused
        if nonce < 0:
            return INVALID_NONCE, None
        nonce_obj = nonce
    if not expired_at >= now:
        return TX_EXPIRED, None
    acct.hot_nonce = nonce
    out.nonce_updated(acct.index, ki, nonce)
    return 0, acct


# ---- orders -------------------------------------------------------------------------------------


def create_order(st: ExchangeState, c: CreateOrder, now: int, out: Deltas) -> int:
    """CreateOrder of a limit or market order; CONDITIONAL (nothing done, no nonce used) for
    the other types, which ``_triggers`` places."""
    t: CreateOrderT = c
    ai, ki, mi, coi, size, price, is_ask, otype, tif, ro, _trig, oexp, exp_at, nonce, _s, b, e = t
    if otype > MARKET:
        return CONDITIONAL
    code, acct = _gate(st, ai, ki, nonce, exp_at, now, out)
    if acct is None:
        return code
    stp = 0  # Lighter's default (ExpireMaker, same account): most orders
    if b or e:
        stp = self_trade_mode(b, e)
        if stp < 0:
            return INVALID_PARAM
    return place(
        st, acct, mi, coi, size, price, is_ask, otype, tif, ro, oexp, stp, now, out, 0, None
    )


def self_trade_mode(behavior: int, equality: int) -> int:
    """The self-trade mode a taker matches with, ``behavior + 4 * equality`` (``_match``), from
    ``L2TxAttributes`` 6 and 7; -1 for a pair lighter-go refuses (out of range, or Reduce with
    MasterAccountIndex): the JSON edge refuses those first, this keeps the engine whole."""
    if not ST_EXPIRE_MAKER <= behavior <= ST_REDUCE or not 0 <= equality <= ST_MASTER_ACCOUNT:
        return -1
    if behavior == ST_REDUCE and equality == ST_MASTER_ACCOUNT:
        return -1
    return behavior + 4 * equality


def gate(
    st: ExchangeState, ai: Any, ki: Any, nonce: Any, expired_at: int, now: int, out: Deltas
) -> tuple[int, Account | None]:
    """The four gates of a user tx with its account when passed (``(0, account)``); see
    :func:`auth`."""
    return _gate(st, ai, ki, nonce, expired_at, now, out)


def place(
    st: ExchangeState,
    acct: Account,
    mi: int,
    coi: int,
    size: int,
    price: int,
    is_ask: int,
    otype: int,
    tif: int,
    ro: int,
    oexp: int,
    stp: int,
    now: int,
    out: Deltas,
    oi: int,
    cond: Cond | None,
) -> int:
    """Validate and execute one order of ``acct`` (a CreateOrder past its gates), matching with
    self-trade mode ``stp`` (:func:`self_trade_mode`). The order it creates, accepted or not, is
    ``last_order_index``: a new index, or ``oi`` when given (a conditional order executing under
    its own index, ``_triggers``); ``cond`` is the condition it carries (``Order.cond``), None for
    a plain order."""
    m = st.market(mi)
    if m is None:
        return MARKET_NOT_FOUND
    if m.next_expiry < now:
        expire(st, m, now, out)
    if m.status != 1:
        return MARKET_NOT_ACTIVE
    if not 1 <= price <= MAX_PRICE:
        return INVALID_PRICE
    if not 1 <= size <= MAX_48:
        return INVALID_SIZE
    if is_ask != 0 and is_ask != 1:
        return INVALID_PARAM
    if ro != 0 and ro != 1:
        return INVALID_PARAM
    code = order_kind_code(otype, tif)
    if code:
        return code
    if coi:
        if not 0 < coi <= MAX_48:
            return INVALID_CLIENT_ORDER_INDEX
        if acct.find_client_order(coi) is not None or (
            acct.conds is not None and has_client_index(acct, coi)
        ):
            return CLIENT_ORDER_INDEX_EXISTS
    if oexp == 0 or oexp == -1:
        expiry = now + DEFAULT_ORDER_LIFETIME_MS
    elif oexp < now or (oexp > MAX_SHORT and oexp > MAX_I63):
        return INVALID_EXPIRY
    else:
        expiry = oexp
    is_ask = 1 if is_ask else 0
    ro = 1 if ro else 0
    code = order_amount_code(
        size, price, is_ask, otype, m.mult, m.min_base, m.min_quote, m.mark, m.max_price_deviation
    )
    if code:
        return code
    if acct.order_count >= MAX_OPEN_ORDERS_PER_ACCOUNT or (
        acct.conds is not None
        and acct.order_count + waiting_count(acct) >= MAX_OPEN_ORDERS_PER_ACCOUNT
    ):
        return TOO_MANY_ORDERS
    pos = acct.position_in(m)
    new_pos = pos is None
    if pos is None:
        # stored only once the order is accepted: a rejected tx leaves no trace in the state
        # (every state change is visible in the events, so followers rebuild it from them)
        pos = Position(acct, m, m.default_imf)
    opp = m.bids if is_ask else m.asks
    best = opp.best
    if ro:
        if reduce_only_increases(pos.size, is_ask):
            return REDUCE_ONLY_INCREASES_POSITION
    else:
        # Does the order raise the worst-case exposure?
        s = pos.size
        bo = pos.bid_open
        ao = pos.ask_open
        before = exposure(s, bo, ao)
        after = exposure(s, bo, ao + size) if is_ask else exposure(s, bo + size, ao)
        if after > before:
            # a market order's price only limits its average: estimated at the best price, or
            # the mark on an empty book (where it cancels unfilled)
            est = price if otype != MARKET else (best if best else m.mark)
            if not _margin_after(st, acct, m, pos, is_ask, size, est, after - before):
                return NOT_ENOUGH_MARGIN
    if new_pos:
        acct.add_position(pos)
    if oi == 0:
        oi = st.next_order_index
        st.next_order_index = oi + 1
    st.last_order_index = oi
    pr = st.next_priority
    st.next_priority = pr + 1
    o = Order(oi, acct, coi, m, is_ask, price, size, expiry, otype, tif, ro, pr)
    if cond is not None:
        o.cond = cond
    if best and (best >= price if is_ask else best <= price):
        if tif == POST_ONLY:
            out.order_updated(o, CANCELED_POST_ONLY)
            return POST_ONLY_WOULD_CROSS
        match_and_finish(st, m, o, acct, pos, now, out, False, stp)
        return OK
    if tif == IOC:
        if otype == MARKET:
            status = CANCELED_TOO_MUCH_SLIPPAGE if best else CANCELED_NOT_ENOUGH_LIQUIDITY
        else:
            status = CANCELED
    else:
        rest(st, m, o, acct, pos)
        status = ACTIVE_LIMIT
    out.order_updated(o, status)
    return OK


def match_and_finish(
    st: ExchangeState,
    m: Market,
    o: Order,
    acct: Account,
    pos: Position,
    now: int,
    out: Deltas,
    liquidation: bool,
    stp: int = 0,
) -> None:
    """Match ``o`` as taker (self-trade mode ``stp``), then rest / cancel its remainder and
    report its final state."""
    is_ask = o.is_ask
    opp = m.bids if is_ask else m.asks
    best = opp.best
    status = 0
    if best and (best >= o.price if is_ask else best <= o.price):
        status = _match(st, m, o, acct, pos, opp, out, liquidation, stp)
        c = o.cond
        if c is not None and o.remaining < o.initial:
            order_filled(st, c, out)
    if status == CANCELED_SELF_TRADE:
        pass  # the taker expired meeting its own order: no remainder rests
    elif o.remaining == 0:
        status = FILLED
    elif status == 0:
        if o.tif == IOC:
            if o.order_type == MARKET:
                status = CANCELED_TOO_MUCH_SLIPPAGE if opp.best else (CANCELED_NOT_ENOUGH_LIQUIDITY)
            else:
                status = CANCELED
        else:
            rest(st, m, o, acct, pos)
            status = ACTIVE_LIMIT
    out.order_updated(o, status)
    if status != ACTIVE_LIMIT:
        c = o.cond
        if c is not None:  # (a modified order re-entering with a condition, gone now)
            order_left(st, o, c, out)


def rest(st: ExchangeState, m: Market, o: Order, acct: Account, pos: Position) -> None:
    """Put ``o`` at the tail of its level and register it (Side.append and _open, inlined)."""
    price = o.price
    is_ask = o.is_ask
    rem = o.remaining
    side = m.asks if is_ask else m.bids
    levels = side.levels
    lvl = levels.get(price)
    if lvl is None:
        # Side.level_for, inlined: most resting orders open a new level here.
        lvl = Level(m.index, is_ask, price)
        key = lvl.key  # (the price boxed once, for the three containers)
        levels[key] = lvl
        in_heap = side.in_heap
        if key not in in_heap:
            in_heap.add(key)
            heap = side.heap
            heappush(heap, key if is_ask else -price)
            if len(heap) > HEAP_SLACK + 4 * len(levels):
                side.compact()
        best = side.best
        if best == 0 or (price < best if is_ask else price > best):
            side.best = price
    tail = lvl.tail
    o.prev = tail
    if tail is None:
        lvl.head = o
    else:
        tail.next = o
    lvl.tail = o
    o.level = lvl
    lvl.size += rem
    if not lvl.dirty:
        st.mark_level(lvl)
    o.position = pos
    st.orders[o.ref] = o
    acct.link_order(o)
    if not o.reduce_only:
        _open(st, pos, is_ask, rem)
    # Market.expiry_queue: appended when it keeps the queue sorted by (expiry, index), as a
    # new order with the default lifetime does; otherwise (an explicit expiry, a snapshot
    # load) pushed on the heap. A modified order re-entering keeps the entry it has.
    if not o.expiry_listed:
        o.expiry_listed = True
        exp = o.expiry
        queue = m.expiry_queue
        head = m.queue_head
        if head == len(queue):
            if head:
                queue.clear()
                m.queue_head = 0
            queue.append(o)
        else:
            last = queue[-1]
            last_exp = last.expiry
            if exp > last_exp or (exp == last_exp and o.index > last.index):
                queue.append(o)
            else:
                heappush(m.expiries, (exp << EXPIRY_SHIFT) + o.index)
        if exp < m.next_expiry:
            m.next_expiry = exp
        if len(queue) - m.queue_head + len(m.expiries) > m.compact_at:
            _compact_expiries(st, m)


def _match(
    st: ExchangeState,
    m: Market,
    t: Order,
    acct: Account,
    pos: Position,
    opp: Side,
    out: Deltas,
    liquidation: bool,
    stp: int,
) -> int:
    """Fill taker ``t`` against ``opp`` up to its limit: a limit order's price bounds each
    fill's, a market order's the average of its fills (Lighter's slippage limit: at a level
    beyond it, only the lots that keep the average within it). Returns 0, or why it stopped
    early: CANCELED_REDUCE_ONLY (a reduce-only taker whose position closed),
    CANCELED_SELF_TRADE (it met its own order under ExpireTaker or CancelBoth, or Reduce took all
    of it), CANCELED_TOO_MUCH_SLIPPAGE (a market taker's average limit reached inside a level).

    Orders trade at makers' prices up to their price. Self-trades follow ``stp``
    (:func:`self_trade_mode`): the taker's own resting orders, or with MasterAccountIndex those of
    every account under its master, are cancelled (ExpireMaker), end the taker (ExpireTaker), both
    (CancelBoth), or are reduced against it by the overlap, neither trading (Reduce), each
    cancelled order with status CANCELED_SELF_TRADE."""
    levels = opp.levels
    is_ask = t.is_ask
    limit = t.price
    mi = m.index
    mult = m.mult
    taker_fee_ppm = m.liquidation_fee if liquidation else m.taker_fee
    maker_fee_ppm = m.maker_fee
    taker_fees = 0
    maker_fees = 0
    taker_ai = acct.index
    taker_ro = t.reduce_only
    behavior = stp & 3
    # the master index a maker's account must not share (-1: only the taker's own account)
    master = acct.master_index if stp >= 4 else -1
    # A market taker's price limits its average fill (not a liquidation's: its bound is a
    # level): ``slack`` is what its fills so far left under that limit, sum((limit - price) *
    # q) for a buy, sum((price - limit) * q) for a sell; a level ``over`` ticks beyond the limit
    # takes at most ``slack // over`` lots.
    average = t.order_type == MARKET and not liquidation
    slack = 0
    if not acct.traded:
        st.note_traded(acct)
    last_price = 0
    stop = 0
    while t.remaining and not stop:
        best = opp.best
        if not best:
            break
        over = 0
        if best < limit if is_ask else best > limit:
            if not average:
                break
            over = limit - best if is_ask else best - limit
            if slack < over:
                break
        lvl = levels[best]
        if not lvl.dirty:
            st.mark_level(lvl)
        o: Order | None = lvl.head
        while o is not None:
            if over and slack < over:
                stop = CANCELED_TOO_MUCH_SLIPPAGE
                break
            nxt = o.next
            macct = o.account
            if macct is acct or macct.master_index == master:
                if behavior == ST_EXPIRE_MAKER:
                    remove_resting(st, o, CANCELED_SELF_TRADE, out)
                    o = nxt
                    continue
                if behavior == ST_EXPIRE_TAKER:
                    stop = CANCELED_SELF_TRADE
                    break
                if behavior == ST_CANCEL_BOTH:
                    remove_resting(st, o, CANCELED_SELF_TRADE, out)
                    stop = CANCELED_SELF_TRADE
                    break
                if _reduce_both(st, t, o, lvl, out):
                    stop = CANCELED_SELF_TRADE
                    break
                o = nxt
                continue
            mpos = o.position
            assert mpos is not None  # (a resting order has its position)
            rem = t.remaining
            q = rem if rem < o.remaining else o.remaining
            if taker_ro:
                s = pos.size
                allowed = (s if s > 0 else 0) if is_ask else (-s if s < 0 else 0)
                if allowed == 0:
                    stop = CANCELED_REDUCE_ONLY
                    break
                if allowed < q:
                    q = allowed
            if o.reduce_only:
                s = mpos.size
                allowed = (s if s > 0 else 0) if o.is_ask else (-s if s < 0 else 0)
                if allowed == 0:
                    remove_resting(st, o, CANCELED_REDUCE_ONLY, out)
                    o = nxt
                    continue
                if allowed < q:
                    q = allowed
            if over and q * over > slack:
                q = slack // over
            pq = best * mult
            notional = pq * q
            tfee = fee(notional, taker_fee_ppm)
            mfee = fee(notional, maker_fee_ppm)
            acct.collateral += apply_fill(st, pos, -q if is_ask else q, pq, tfee)
            macct.collateral += apply_fill(st, mpos, q if is_ask else -q, pq, mfee)
            taker_fees += tfee
            maker_fees += mfee
            t.remaining -= q
            o.remaining -= q
            lvl.size -= q
            if average:
                slack += (best - limit) * q if is_ask else (limit - best) * q
            if not o.reduce_only:
                _open(st, mpos, o.is_ask, -q)
            if not macct.dirty:
                st.mark_account(macct)
            if not macct.traded:
                st.note_traded(macct)
            tid = st.next_trade_id
            st.next_trade_id = tid + 1
            out.trade_executed(
                mi, tid, best, q, taker_ai, macct.index, t.index, o.index, is_ask, tfee, mfee
            )
            if liquidation:
                st.liquidation_quote += best * q
            last_price = best
            c = o.cond
            if c is not None:
                order_filled(st, c, out)
            if o.remaining == 0:
                remove_resting(st, o, FILLED, out)
            elif o.reduce_only and mpos.size == 0:
                remove_resting(st, o, CANCELED_REDUCE_ONLY, out)
            else:
                out.order_updated(o, ACTIVE_LIMIT)
            if not t.remaining:
                break
            o = nxt
    if last_price:
        m.last_trade_price = last_price
        if not m.dirty:
            st.mark_market(m)
        if not acct.dirty:
            st.mark_account(acct)
        if liquidation:
            st.insurance_fund += taker_fees
            st.liquidation_fee = taker_fees
            st.fee_pool += maker_fees
        else:
            st.fee_pool += taker_fees + maker_fees
        st.mark_exchange()
    return stop


def _reduce_both(st: ExchangeState, t: Order, o: Order, lvl: Level, out: Deltas) -> bool:
    """Self-trade Reduce: taker ``t`` and its own resting ``o`` both shrink by their overlap,
    neither trading. An order the overlap uses up ends CANCELED_SELF_TRADE with that remainder
    (as any cancelled order reports what it had left); the other goes on with its size and
    remainder both smaller by it (what filled stays ``initial - remaining``). True when the taker
    is used up (its caller ends it)."""
    q = t.remaining if t.remaining < o.remaining else o.remaining
    if o.remaining == q:
        remove_resting(st, o, CANCELED_SELF_TRADE, out)
    else:
        o.remaining -= q
        o.initial -= q
        lvl.size -= q
        if not o.reduce_only:
            pos = o.position
            assert pos is not None
            _open(st, pos, o.is_ask, -q)
        out.order_updated(o, ACTIVE_LIMIT)
    if t.remaining == q:
        return True
    t.remaining -= q
    t.initial -= q
    return False


def apply_fill(st: ExchangeState, pos: Position, d: int, pq: int, fee: int) -> int:
    """Add ``d`` signed lots at ``pq`` micro-USDC per lot, paying ``fee``; return what the
    account's (cross) collateral gains: the realized PnL minus the fee for a cross position;
    for an isolated one its collateral takes them and the cross pool gains or gives what
    :func:`isolated_fill` moves."""
    s = pos.size
    m = pos.market
    eq = pos.entry_quote
    realized = 0
    if s == 0 or (s > 0) == (d > 0):
        pos.size = ns = s + d
        # (sign kept out of the products: see the module docstring, Cost)
        pos.entry_quote = neq = eq + d * pq if d > 0 else eq - -d * pq
    else:
        a_s = s if s > 0 else -s
        a_d = d if d > 0 else -d
        c = a_d if a_d < a_s else a_s
        removed = product(eq, c) // a_s if eq >= 0 else -(product(-eq, c) // a_s)
        realized = (pq * c if s > 0 else -(pq * c)) - removed
        pos.realized_pnl += realized
        if a_d > c:
            ns = d + s
            neq = ns * pq
        else:
            ns = s + d
            neq = eq - removed
        pos.size = ns
        pos.entry_quote = neq
    m.open_interest += (ns if ns > 0 else 0) - (s if s > 0 else 0)
    acct = pos.account
    if ns == 0:
        m.holders.pop(acct.ref, None)
        pos.queued = False
    elif s == 0:
        m.add_holder(pos)
        if acct.unarmed and not pos.queued:
            pos.queued = True
            m.unarmed.append(pos)
    if acct.conds is not None and (ns == 0 or (ns > 0) != (s > 0)) and s != 0:
        position_moved(st, pos)  # closed or flipped: its position-tied orders are checked
    if pos.margin_mode:
        return isolated_fill(st, pos, s, ns, realized - fee, pq)
    if acct.c_epoch == st.epoch:
        mq = m.mark_q
        acct.c_upnl += product(d, mq) - (neq - eq)
        g = (ns if ns > 0 else -ns) - (s if s > 0 else -s)
        acct.c_mm += product(product(g, mq), m.maintenance_mf)
        bo = pos.bid_open
        ao = pos.ask_open
        g = exposure(ns, bo, ao) - exposure(s, bo, ao)
        acct.c_im += product(product(g, mq), pos.imf)
    if not pos.dirty:
        st.mark_position(pos)
    return realized - fee


def isolated_fill(st: ExchangeState, pos: Position, s: int, ns: int, cash: int, pq: int) -> int:
    """The collateral of isolated position ``pos`` through a fill that took it from ``s`` to
    ``ns`` lots at ``pq`` per lot (``apply_fill``); returns what the cross collateral gains.

    The rule (raydex's, as Hyperliquid documents its isolated margin): the fill's ``cash``
    (realized PnL minus fee) is the position's; lots opened (a new position, a larger one, the
    far side of a flip) take from the cross collateral their initial margin at the mark
    (``imf`` of ``|opened| * mark``, rounded up) plus the loss of the fill price against the
    mark, so the position's equity rises by exactly that initial margin; a reduction gives back
    the same share of its collateral as of its lots (rounded down; nothing while the collateral
    is negative); a close (or the near side of a flip) gives back all of it, a deficit going to
    the insurance fund: an isolated loss never reaches the cross collateral. The cross pool's
    initial-margin sum keeps, for an isolated position, only what its resting orders would add
    (``exposure - |size|``): that is what they take from it when they fill."""
    a_s = s if s > 0 else -s
    a_ns = ns if ns > 0 else -ns
    alloc = pos.allocated + cash
    to_cross = 0
    opened = 0
    if s == 0:
        opened = a_ns
    elif ns != 0 and (ns > 0) == (s > 0):
        if a_ns > a_s:
            opened = a_ns - a_s
        elif alloc > 0:
            to_cross = product(alloc, a_s - a_ns) // a_s
            alloc -= to_cross
    else:
        if alloc < 0:
            st.insurance_fund += alloc
            st.mark_exchange()
        else:
            to_cross = alloc
        alloc = 0
        opened = a_ns
    m = pos.market
    mq = m.mark_q
    if opened:
        need = -(-product(product(opened, mq), pos.imf) // BPS)
        gap = pq - mq if ns > 0 else mq - pq
        if gap > 0:
            need += product(opened, gap)
        alloc += need
        to_cross -= need
    pos.allocated = alloc
    acct = pos.account
    if acct.c_epoch == st.epoch:
        bo = pos.bid_open
        ao = pos.ask_open
        g = (exposure(ns, bo, ao) - a_ns) - (exposure(s, bo, ao) - a_s)
        if g:
            acct.c_im += product(product(g, mq), pos.imf)
    if not pos.dirty:
        st.mark_position(pos)
    return to_cross


def _open(st: ExchangeState, pos: Position, is_ask: int, delta: int) -> None:
    """Change the position's resting-order lots on one side (and the account's cached IMR)."""
    bo = pos.bid_open
    ao = pos.ask_open
    if is_ask:
        pos.ask_open = nao = ao + delta
        nbo = bo
    else:
        pos.bid_open = nbo = bo + delta
        nao = ao
    acct = pos.account
    if acct.c_epoch == st.epoch:
        s = pos.size
        g = exposure(s, nbo, nao) - exposure(s, bo, ao)
        acct.c_im += product(product(g, pos.market.mark_q), pos.imf)


def remove_resting(st: ExchangeState, o: Order, status: int, out: Deltas) -> None:
    """Take a resting order off the book and its account, and report it with ``status``."""
    m = o.market
    is_ask = o.is_ask
    rem = o.remaining
    lvl = (m.asks if is_ask else m.bids).unlink(o)
    if not lvl.dirty:
        st.mark_level(lvl)
    acct = o.account
    del st.orders[o.ref]
    acct.unlink_order(o)
    if rem and not o.reduce_only:
        pos = o.position
        assert pos is not None
        _open(st, pos, is_ask, -rem)
    out.order_updated(o, status)  # (unlinking leaves ``o.remaining`` as it was)
    c = o.cond
    if c is not None:
        order_left(st, o, c, out)


def expire(st: ExchangeState, m: Market, now: int, out: Deltas) -> None:
    """Cancel resting orders of ``m`` whose expiry is before ``now`` (CANCELED_EXPIRED), in
    ``(expiry, index)`` order across ``Market.expiry_queue`` and ``Market.expiries``."""
    heap = m.expiries
    queue = m.expiry_queue
    head = m.queue_head
    orders = st.orders
    while True:
        # Both heads as heap keys, (expiry << EXPIRY_SHIFT) + index: the smaller goes first.
        if head < len(queue):
            o = queue[head]
            q_key = (o.expiry << EXPIRY_SHIFT) + o.index
        else:
            q_key = NO_EXPIRY_KEY
        h_key = heap[0] if heap else NO_EXPIRY_KEY
        if (q_key if q_key < h_key else h_key) >> EXPIRY_SHIFT >= now:
            break
        if h_key < q_key:
            heappop(heap)
            o_h = orders.get(h_key & INDEX_MASK)
            if o_h is not None and o_h.expiry == h_key >> EXPIRY_SHIFT:
                remove_resting(st, o_h, CANCELED_EXPIRED, out)
        else:
            head += 1
            if o.level is not None:  # still resting (a filled or cancelled order is not)
                remove_resting(st, o, CANCELED_EXPIRED, out)
    if head > 1024 and 2 * head > len(queue):
        del queue[:head]
        head = 0
    m.queue_head = head
    m.next_expiry = (q_key if q_key < h_key else h_key) >> EXPIRY_SHIFT


def _compact_expiries(st: ExchangeState, m: Market) -> None:
    """Drop the stale entries (orders no longer resting); amortised O(1) per resting order.
    The queue is filtered, which keeps it sorted, and the heap filtered and heapified: each
    resting order has exactly one entry (``Order.expiry_listed``), so nothing else can go."""
    queue = m.expiry_queue
    live_q: list[Order] = []
    for i in range(m.queue_head, len(queue)):
        o = queue[i]
        if o.level is not None:
            live_q.append(o)
    orders = st.orders
    live_h: list[int] = []
    for key in m.expiries:
        oh = orders.get(key & INDEX_MASK)
        if oh is not None and oh.expiry == key >> EXPIRY_SHIFT:
            live_h.append(key)
    heapify(live_h)
    m.expiry_queue = live_q
    m.queue_head = 0
    m.expiries = live_h
    q_next = live_q[0].expiry if live_q else NO_EXPIRY
    h_next = live_h[0] >> EXPIRY_SHIFT if live_h else NO_EXPIRY
    m.next_expiry = q_next if q_next < h_next else h_next
    m.compact_at = max(1024, 4 * (len(live_q) + len(live_h)))


def _find_order(st: ExchangeState, acct: Account, mi: int, index: Any) -> Order | None:
    """``acct``'s order in market ``mi`` by client or exchange ``index`` (an int object)."""
    i: int = index
    o = acct.find_client_order(i) if i < FIRST_ORDER_INDEX else st.orders.get(index)
    if o is None or o.account is not acct or o.market.index != mi:
        return None
    return o


def cancel_order(st: ExchangeState, c: CancelOrder, now: int, out: Deltas) -> int:
    t: CancelOrderT = c
    ai, ki, mi, index, exp_at, nonce, _s = t
    code, acct = _gate(st, ai, ki, nonce, exp_at, now, out)
    if acct is None:
        return code
    m = st.market(mi)
    if m is None:
        return MARKET_NOT_FOUND
    if m.next_expiry < now:
        expire(st, m, now, out)
    o = _find_order(st, acct, mi, index)
    if o is None:
        w = find(acct, mi, index, FIRST_ORDER_INDEX) if acct.conds is not None else None
        if w is None:
            return NOT_ACTIVE_LIMIT_ORDER
        finish(st, w, CANCELED, out, True)  # a waiting conditional order (its OCO sibling too)
        return OK
    remove_resting(st, o, CANCELED, out)
    return OK


def modify_order(st: ExchangeState, c: ModifyOrder, now: int, out: Deltas) -> int:
    """ModifyOrder: a new total size and price (see ``_engine``); with an order version
    (``L2TxAttributes`` 8) only above the order's current one, which it then becomes
    (STALE_ORDER_VERSION otherwise, the order untouched); re-entered, it matches with the tx's
    self-trade modes."""
    t: ModifyOrderT = c
    ai, ki, mi, index, size, price, trig, exp_at, nonce, _s, b, e, version = t
    code, acct = _gate(st, ai, ki, nonce, exp_at, now, out)
    if acct is None:
        return code
    m = st.market(mi)
    if m is None:
        return MARKET_NOT_FOUND
    if m.next_expiry < now:
        expire(st, m, now, out)
    o = _find_order(st, acct, mi, index)
    if o is None:
        w = find(acct, mi, index, FIRST_ORDER_INDEX) if acct.conds is not None else None
        if w is None or m.status != 1:
            return NOT_ACTIVE_LIMIT_ORDER if w is None else MARKET_NOT_ACTIVE
        return modify_waiting(st, w, size, price, trig, out)  # a waiting stop-loss / take-profit
    if m.status != 1:
        return MARKET_NOT_ACTIVE
    if not 1 <= price <= MAX_PRICE:
        return INVALID_PRICE
    if not 1 <= size <= MAX_48:
        return INVALID_SIZE
    stp = 0
    if b or e or version:
        stp = self_trade_mode(b, e)
        if stp < 0 or not 0 <= version <= MAX_48:
            return INVALID_PARAM
        if version and version <= o.version:
            return STALE_ORDER_VERSION
    code = order_amount_code(
        size, price, o.is_ask, LIMIT, m.mult, m.min_base, m.min_quote, m.mark, m.max_price_deviation
    )
    if code:
        return code
    filled = o.initial - o.remaining
    if size <= filled:
        if version:
            o.version = version
        remove_resting(st, o, CANCELED, out)
        return OK
    new_rem = size - filled
    pos = o.position
    assert pos is not None
    grow = new_rem - o.remaining
    if price == o.price and grow <= 0:
        if grow:
            side = m.asks if o.is_ask else m.bids
            lvl = side.levels[price]
            lvl.size += grow
            if not lvl.dirty:
                st.mark_level(lvl)
            if not o.reduce_only:
                _open(st, pos, o.is_ask, grow)
            o.remaining = new_rem
        o.initial = size
        if version:
            o.version = version
        out.order_updated(o, ACTIVE_LIMIT)
        return OK
    is_ask = o.is_ask
    opp = m.bids if is_ask else m.asks
    best = opp.best
    if (
        grow > 0
        and not o.reduce_only
        and not _order_margin_ok(st, acct, m, pos, is_ask, grow, price)
    ):
        return NOT_ENOUGH_MARGIN
    crosses = best and (best >= price if is_ask else best <= price)
    # Take the order out (without reporting it) and re-enter it with its new terms.
    side = m.asks if is_ask else m.bids
    rem = o.remaining
    lvl = side.unlink(o)
    if not lvl.dirty:
        st.mark_level(lvl)
    del st.orders[o.ref]
    acct.unlink_order(o)
    if not o.reduce_only:
        _open(st, pos, is_ask, -rem)
    o.price = price
    o.initial = size
    o.remaining = new_rem
    o.priority = st.next_priority
    st.next_priority += 1
    if version:
        o.version = version
    if crosses and o.tif == POST_ONLY:
        out.order_updated(o, CANCELED_POST_ONLY)
        c = o.cond
        if c is not None:
            order_left(st, o, c, out)
        return POST_ONLY_WOULD_CROSS
    match_and_finish(st, m, o, acct, pos, now, out, False, stp)
    return OK


# ---- margin -------------------------------------------------------------------------------------


def refresh(st: ExchangeState, acct: Account) -> None:
    """Recompute the account's cached risk sums (O(markets it holds)) if the marks moved since.

    ``c_upnl = sum(size*mark*mult - entry_quote)``, ``c_mm = sum(|size|*mark*mult*mmf)``,
    ``c_im = sum(worst*mark*mult*imf)`` with ``worst = max(|size+bids|, |size-asks|)``, over the
    cross positions; an isolated one adds to ``c_im`` only ``(worst - |size|)*mark*mult*imf``
    (its resting orders' part, :func:`isolated_fill`). Between mark moves fills and order
    changes update them in O(1)."""
    upnl = mm = im = 0
    p = acct.first_pos
    while p is not None:
        s = p.size
        bo = p.bid_open
        ao = p.ask_open
        if s or bo or ao:
            m = p.market
            mq = m.mark_q
            if p.margin_mode:  # isolated: only what its resting orders would add
                im += initial_margin(exposure(s, bo, ao) - (s if s > 0 else -s), mq, p.imf)
            else:
                if s:
                    upnl += unrealized_pnl(s, mq, p.entry_quote)
                    mm += maintenance_margin(s if s > 0 else -s, mq, m.maintenance_mf)
                im += initial_margin(exposure(s, bo, ao), mq, p.imf)
        p = p.next_pos
    acct.c_upnl = upnl
    acct.c_mm = mm
    acct.c_im = im
    acct.c_epoch = st.epoch


def equity_imr(st: ExchangeState, acct: Account) -> tuple[int, int]:
    """(equity, IMR numerator in micro-USDC * bps) including resting-order exposure."""
    if acct.c_epoch != st.epoch:
        refresh(st, acct)
    return acct.collateral + acct.c_upnl, acct.c_im


def equity_mmr(st: ExchangeState, acct: Account) -> tuple[int, int]:
    """(equity, maintenance numerator in micro-USDC * bps); positions only."""
    if acct.c_epoch != st.epoch:
        refresh(st, acct)
    return acct.collateral + acct.c_upnl, acct.c_mm


def _order_margin_ok(
    st: ExchangeState, acct: Account, m: Market, pos: Position, is_ask: int, q: int, est: int
) -> bool:
    """Pre-trade check for ``q`` more lots on one side (``rules.initial_margin_ok``)."""
    s = pos.size
    bo = pos.bid_open
    ao = pos.ask_open
    before = exposure(s, bo, ao)
    after = exposure(s, bo, ao + q) if is_ask else exposure(s, bo + q, ao)
    if after <= before:
        return True
    return _margin_after(st, acct, m, pos, is_ask, q, est, after - before)


def _margin_after(
    st: ExchangeState,
    acct: Account,
    m: Market,
    pos: Position,
    is_ask: int,
    q: int,
    est: int,
    grow: int,
) -> bool:
    """``equity - adverse - fee >= IMR + grow lots`` (``grow``: rise of the worst case)."""
    if acct.c_epoch != st.epoch:
        refresh(st, acct)
    return initial_margin_ok(
        acct.collateral + acct.c_upnl,
        acct.c_im,
        m.mark,
        m.mult,
        pos.imf,
        m.taker_fee,
        is_ask,
        q,
        est,
        grow,
    )


def imr_ok(st: ExchangeState, acct: Account, extra_debit: int = 0) -> bool:
    equity, num = equity_imr(st, acct)
    return (equity - extra_debit) * BPS >= num


def cancel_all(st: ExchangeState, c: CancelAllOrders, now: int, out: Deltas) -> int:
    """CancelAllOrders (time_in_force 0): every resting order of the account by order index, then
    its waiting conditional orders by order index; with a market (``L2TxAttributes`` 5) those in
    that market only (MARKET_NOT_FOUND for one that does not exist)."""
    t: CancelAllOrdersT = c
    ai, ki, tif, _time, exp_at, nonce, _s, mi = t
    code = auth(st, ai, ki, nonce, exp_at, now, out)
    if code:
        return code
    if tif != 0:
        return UNSUPPORTED_TX_TYPE
    if mi != ALL_MARKETS and st.market(mi) is None:
        return MARKET_NOT_FOUND
    acct = st.accounts[ai]
    for o in acct.resting_orders():
        if mi == ALL_MARKETS or o.market.index == mi:
            remove_resting(st, o, CANCELED, out)
    end_all(st, acct, CANCELED, out, mi)
    return OK


def position_for(acct: Account, m: Market) -> Position:
    """The account's position in ``m``, created (flat, default leverage) when missing."""
    pos = acct.positions.get(m.index)
    if pos is None:
        pos = Position(acct, m, m.default_imf)
        acct.add_position(pos)
    return pos


def iter_market_orders(m: Market) -> Iterator[Order]:
    """Resting orders of ``m``: bids then asks, best price first, time priority within a level."""
    for side in (m.bids, m.asks):
        for price in side.sorted_prices():
            o = side.levels[price].head
            while o is not None:
                yield o
                o = o.next
