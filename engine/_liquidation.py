"""Liquidation and deleveraging: who is checked when, and how an account under maintenance closes.

Functions over the ``ExchangeState``; the rules are in ``_engine``'s docstring (Liquidation).

- Triggers (:func:`arm`): after an exact check an account's maintenance buffer is split over its
  positions into one mark price per position beyond which it *may* be liquidatable; a mark move
  (:func:`liquidate_crossed`) checks exactly only the accounts whose trigger it crossed, plus the
  "unarmed" holders of that market (accounts whose risk changed since they were armed).
- After fills (:func:`check_traded`) the traders are checked exactly and left unarmed; transfers
  and withdrawals (:func:`rearm`) unarm the account; market updates check holders, funding the
  payers whose payment does not fit in the reserve their triggers left out (:func:`arm`).
- :func:`liquidate`: cancel all resting orders and waiting conditional orders, close each cross
  position with an internal reduce-only market order inside the fat-finger band (liquidation fee
  to the insurance fund), deleverage (:func:`deleverage`) what the book cannot absorb against the
  most profitable opposite positions at the bankruptcy price, and cover negative collateral from
  the insurance fund.
- Isolated positions (``Position.margin_mode`` 1) stand on their own: the cross checks leave
  them out (``_orders.refresh``); each is checked against its own collateral
  (:func:`check_isolated`, after fills and for every checked account) and has its own trigger
  (:func:`isolated_buffer`, armed with the account's); :func:`liquidate_isolated` closes one
  without touching the cross collateral, beyond giving back what its collateral has left.

Triggers are conservative and checks exact, so when an account is checked never changes the
outcome: it is liquidated at the first command after which it is under maintenance.
Cost: a mark move is O(crossed triggers + unarmed holders of that market) exact checks, each
O(markets the account holds); a liquidation is O(its orders + positions + matched levels).
"""

from __future__ import annotations

from heapq import heapify
from typing import Final

from raydex.codecs import PositionDeleveraged, PositionLiquidated

from ._deltas import Deltas
from ._model import Account, Market, Order, Position, heappop, heappush
from ._orders import apply_fill, equity_mmr, expire, match_and_finish, refresh, remove_resting
from ._pending import end_all
from ._state import BPS, ExchangeState
from .codes import CANCELED_LIQUIDATION, IOC, MARKET
from .rules import MAX_PRICE, maintenance_margin, product, unrealized_pnl

#: A trigger heap entry is ``(price << SLOT_BITS) + slot``: below 2**62 for prices below 2**32,
#: so a native int when compiled, compared in one C call where a (price, account, version)
#: tuple was compared item by item; the slot names the account and version (``Market``).
SLOT_BITS: Final = 30
SLOT_MASK: Final = (1 << SLOT_BITS) - 1

#: ``deleverage`` ranks counterparties by ``(-upnl << ACCOUNT_BITS) + account index``
#: (account indexes are below 2**48).
ACCOUNT_BITS: Final = 48
ACCOUNT_MASK: Final = (1 << ACCOUNT_BITS) - 1

#: ``arm`` keeps back ``1/RESERVE_DIV`` of an account's maintenance buffer from its triggers, for
#: funding payments to spend without an exact check. It trades: a larger reserve spares more of
#: funding's exact checks but tightens every trigger, so mark moves check more accounts.
RESERVE_DIV: Final = 8


def liquidate_holders(st: ExchangeState, m: Market, now: int, out: Deltas) -> None:
    """Exact check of every holder of ``m`` (funding, market updates): liquidate or re-arm."""
    check_accounts(st, sorted(m.holders), now, out)


def liquidate_crossed(st: ExchangeState, m: Market, now: int, out: Deltas) -> None:
    """After a mark move: exact check of the holders whose trigger the new mark crossed and of
    the unarmed holders (their risk changed since they were armed)."""
    mark = m.mark
    cand: list[int] = []
    # An entry's price is its high part (``arm``): longs hold -trigger, due when
    # -trigger <= -mark; shorts hold trigger, due when trigger <= mark.
    _pop_crossed(m, m.long_triggers, (1 - mark) << SLOT_BITS, cand)
    _pop_crossed(m, m.short_triggers, (mark + 1) << SLOT_BITS, cand)
    queue = m.unarmed
    if queue:
        # Unarmed accounts holding this market (their positions queued here) are checked now;
        # the others are unaffected by this mark and stay unarmed until a market they hold
        # moves. Checked here, an account is re-armed for every market: its other queued
        # positions become stale entries of their markets' lists.
        m.unarmed = []
        for p in queue:
            if p.queued:
                a = p.account
                a.unarmed = False
                q = a.first_pos
                while q is not None:
                    q.queued = False
                    q = q.next_pos
                cand.append(a.ref)
    if cand:
        # A list sorted in place, duplicates skipped by ``check_accounts``: a set and
        # ``sorted(set)`` cost ~15M instructions per 200,000 bench commands more (callgrind).
        cand.sort()
        check_accounts(st, cand, now, out)


def _pop_crossed(m: Market, heap: list[int], bound: int, cand: list[int]) -> None:
    """Pop ``heap``'s entries below ``bound`` (freeing their slots); the accounts of the live
    ones (current ``risk_version``) go into ``cand`` (an account may come more than once)."""
    owners = m.trigger_account
    versions = m.trigger_version
    free = m.free_slots
    while heap and heap[0] < bound:
        slot = heappop(heap) & SLOT_MASK
        a = owners[slot]
        if a.risk_version == versions[slot]:
            cand.append(a.ref)
        free.append(slot)


def check_accounts(st: ExchangeState, indexes: list[int], now: int, out: Deltas) -> None:
    """Exact maintenance check of each account (in the given order): liquidate or re-arm. An
    index repeated right after itself (a sorted list with duplicates) is checked once."""
    accounts = st.accounts
    slots = st.account_slots
    prev = -1
    for ai in indexes:
        i: int = ai
        if i == prev:
            continue
        prev = i
        acct = slots[i] if i < len(slots) else accounts[ai]
        assert acct is not None
        if acct.isolated:
            check_isolated(st, acct, now, out)
        if acct.c_epoch != st.epoch:
            refresh(st, acct)
        room = product(acct.collateral + acct.c_upnl, BPS) - acct.c_mm
        if room < 0:
            liquidate(st, acct, now, out)
            if not acct.isolated:
                continue
            refresh(st, acct)  # its cross positions are closed: what is left arms
            room = max(0, product(acct.collateral + acct.c_upnl, BPS) - acct.c_mm)
        arm(st, acct, room)


def arm(st: ExchangeState, acct: Account, buffer: int) -> None:
    """Record, per market the account holds, the mark beyond which it may be liquidatable.

    ``buffer = equity*BPS - maintenance numerator >= 0`` (the cross account's): a
    ``1/RESERVE_DIV`` part is kept back as the account's ``reserve`` and the rest is split
    evenly across its ``k`` cross positions; an isolated position's trigger spends its own
    buffer (:func:`isolated_buffer`), nothing kept back (funding checks its payers exactly). While
    every mark stays strictly inside its trigger the marks' total loss is below the split part,
    so the buffer stays above the reserve: funding payments that fit in what is left of the
    reserve cannot put the account under maintenance (``apply_funding`` spends it instead of
    an exact check), and no liquidation is missed (triggers are conservative, checks exact).
    A mark move of one tick costs ``|size| * mult * (BPS -/+ mmf)`` of buffer (long/short)."""
    v = acct.risk_version + 1
    acct.risk_version = v
    k = 0
    p = acct.first_pos
    while p is not None:
        if p.size and not p.margin_mode:
            k += 1
        p = p.next_pos
    if k == 0 and not acct.isolated:
        return
    reserve = buffer // RESERVE_DIV
    acct.reserve = reserve
    acct.reserve_version = v
    share = (buffer - reserve) // k if k else 0
    p = acct.first_pos
    while p is not None:
        s = p.size
        m = p.market
        b = isolated_buffer(p) if s and p.margin_mode else share
        if s > 0:
            den = s * m.mult * (BPS - m.maintenance_mf)
            trigger = m.mark - b // den if den > 0 else 0
            if trigger >= 1:
                heap = m.long_triggers
                heappush(heap, (-trigger << SLOT_BITS) + _slot(m, acct, v))
                if len(heap) > 4 * len(m.holders) + 256:
                    m.long_triggers = live_triggers(m, heap)
        elif s < 0:
            trigger = m.mark + b // (-s * m.mult * (BPS + m.maintenance_mf))
            if trigger <= MAX_PRICE:
                heap = m.short_triggers
                heappush(heap, (trigger << SLOT_BITS) + _slot(m, acct, v))
                if len(heap) > 4 * len(m.holders) + 256:
                    m.short_triggers = live_triggers(m, heap)
        p = p.next_pos


def isolated_buffer(p: Position) -> int:
    """``(collateral + upnl) * BPS - maintenance`` of isolated position ``p`` (0 if negative):
    what its own marks may spend before it is under maintenance (its trigger, as ``arm`` sets
    a cross position's from its share)."""
    s = p.size
    m = p.market
    mq = m.mark_q
    equity = p.allocated + unrealized_pnl(s, mq, p.entry_quote)
    b = product(equity, BPS) - maintenance_margin(s if s > 0 else -s, mq, m.maintenance_mf)
    return b if b > 0 else 0


def check_isolated(st: ExchangeState, acct: Account, now: int, out: Deltas) -> None:
    """Exact maintenance check of each of ``acct``'s isolated positions, each against its own
    collateral (``(allocated + upnl) * BPS < |size| * mark * mmf``): liquidate those under it."""
    p = acct.first_pos
    while p is not None:
        s = p.size
        if s and p.margin_mode:
            m = p.market
            mq = m.mark_q
            equity = p.allocated + unrealized_pnl(s, mq, p.entry_quote)
            mm = maintenance_margin(s if s > 0 else -s, mq, m.maintenance_mf)
            if product(equity, BPS) < mm:
                liquidate_isolated(st, acct, p, now, out)
        p = p.next_pos


def liquidate_isolated(
    st: ExchangeState, acct: Account, pos: Position, now: int, out: Deltas
) -> None:
    """Close isolated ``pos`` against its own collateral only: the account's resting orders in
    its market are cancelled (CANCELED_LIQUIDATION) and the position closed as ``liquidate``
    closes one (:func:`close_position`); what is left of its collateral goes back to the cross
    collateral, a deficit to the insurance fund (``_orders.isolated_fill``). The account's
    cross positions and its other isolated ones are not touched."""
    acct.risk_version += 1
    m = pos.market
    for o in acct.resting_orders():
        if o.market is m:
            remove_resting(st, o, CANCELED_LIQUIDATION, out)
    close_position(st, acct, pos, now, out)


def _slot(m: Market, acct: Account, version: int) -> int:
    """A slot of ``m``'s trigger table holding (``acct``, ``version``), a freed one first."""
    free = m.free_slots
    if free:
        slot = free.pop()
        m.trigger_account[slot] = acct
        m.trigger_version[slot] = version
        return slot
    slot = len(m.trigger_account)
    m.trigger_account.append(acct)
    m.trigger_version.append(version)
    return slot


def live_triggers(m: Market, heap: list[int]) -> list[int]:
    """``heap`` without its stale entries (their slots freed), as a heap."""
    owners = m.trigger_account
    versions = m.trigger_version
    free = m.free_slots
    live: list[int] = []
    for key in heap:
        slot = key & SLOT_MASK
        if owners[slot].risk_version == versions[slot]:
            live.append(key)
        else:
            free.append(slot)
    heapify(live)
    return live


def rearm(st: ExchangeState, acct: Account) -> None:
    """The account's buffer shrank without a trade (transfer, withdraw): arm it again at the
    next move of a market it holds (until then, the marks it was checked at are current)."""
    if acct.positions:
        acct.risk_version += 1
        unarm(st, acct)


def unarm(st: ExchangeState, acct: Account) -> None:
    """Queue ``acct`` for an exact check and re-arming at the next move of a market it holds
    (each non-zero position in its market's ``unarmed`` list)."""
    acct.unarmed = True
    p = acct.first_pos
    while p is not None:
        if p.size and not p.queued:
            p.queued = True
            m = p.market
            queue = m.unarmed
            queue.append(p)
            if len(queue) > 2 * len(m.holders) + 256:
                m.unarmed = _live_queue(queue)
        p = p.next_pos


def _live_queue(queue: list[Position]) -> list[Position]:
    """``queue`` without stale entries or repeats (a position queued again after going stale)."""
    live = []
    for p in queue:
        if p.queued:
            p.queued = False  # (so a repeat is skipped)
            live.append(p)
    for p in live:
        p.queued = True
    return live


def check_traded(st: ExchangeState, now: int, out: Deltas) -> None:
    """Accounts that traded in this command, each once in first-traded order: liquidate if
    under maintenance (exact check at the current marks; its isolated positions each against
    its own collateral, :func:`check_isolated`). Survivors are left unarmed: their
    triggers are rebuilt once, at the next mark move, instead of after every fill. A
    liquidation's counterparties join the queue (again, if already checked: a queued one is
    checked after the liquidation anyway); it ends because every liquidation leaves its
    account without positions. The queue is a chain through the accounts
    (``ExchangeState.note_traded``), not a list built, deduplicated and dropped per command."""
    epoch = st.epoch
    acct = st.pop_traded()
    while acct is not None:
        if acct.isolated:
            check_isolated(st, acct, now, out)
        if acct.c_epoch != epoch:
            refresh(st, acct)
        if product(acct.collateral + acct.c_upnl, BPS) < acct.c_mm:
            liquidate(st, acct, now, out)
            if acct.isolated:  # its isolated positions stay: armed at the next move
                acct.risk_version += 1
                unarm(st, acct)
        elif not acct.unarmed:
            # Its old triggers no longer bound its risk.
            acct.risk_version += 1
            unarm(st, acct)
        acct = st.pop_traded()


def liquidate(st: ExchangeState, acct: Account, now: int, out: Deltas) -> None:
    """Close ``acct``'s cross positions and cancel all its orders (see the module docstring);
    its counterparties are checked next. Its isolated positions are not touched."""
    acct.risk_version += 1
    end_all(st, acct, CANCELED_LIQUIDATION, out)
    for o in acct.resting_orders():
        remove_resting(st, o, CANCELED_LIQUIDATION, out)
    for mi in sorted(acct.positions):
        pos = acct.positions[mi]
        if pos.size == 0 or pos.margin_mode:  # (isolated positions stand on their own)
            continue
        close_position(st, acct, pos, now, out)
    if acct.collateral < 0:
        st.insurance_fund += acct.collateral
        acct.collateral = 0
        st.mark_exchange()
        st.mark_account(acct)


def close_position(st: ExchangeState, acct: Account, pos: Position, now: int, out: Deltas) -> None:
    """Close ``pos`` (non-zero) with an internal reduce-only market order inside the fat-finger
    band (the liquidation fee to the insurance fund), then deleverage what the book left."""
    m = pos.market
    if m.next_expiry < now:
        expire(st, m, now, out)
    start = pos.size
    is_ask = 1 if start > 0 else 0
    band = m.mark * m.max_price_deviation // BPS
    bound = max(1, m.mark - band) if is_ask else min(MAX_PRICE, m.mark + band)
    oi = st.next_order_index
    st.next_order_index = oi + 1
    pr = st.next_priority
    st.next_priority = pr + 1
    o = Order(oi, acct, 0, m, is_ask, bound, abs(start), now, MARKET, IOC, 1, pr)
    st.liquidation_quote = 0  # price * size of its fills (``_match``)
    st.liquidation_fee = 0  # and their fees (to the insurance fund)
    match_and_finish(st, m, o, acct, pos, now, out, True)
    closed = start - pos.size
    if closed:
        quote = st.liquidation_quote
        fee = st.liquidation_fee
        out.event(PositionLiquidated(acct.index, m.index, closed, quote // abs(closed), fee))
    if pos.size:
        deleverage(st, acct, pos, out)


def deleverage(st: ExchangeState, acct: Account, pos: Position, out: Deltas) -> None:
    """Offset what is left of ``pos`` against the most profitable opposite positions at the
    account's bankruptcy price (no fees): the cross account's, or for an isolated position its
    own (its collateral and unrealized PnL)."""
    m = pos.market
    s = pos.size
    mult = m.mult
    if pos.margin_mode:
        equity = pos.allocated + unrealized_pnl(s, m.mark_q, pos.entry_quote)
    else:
        equity = equity_mmr(st, acct)[0]
    # Price at which closing s lots at that price leaves equity at zero (rounded so the
    # account, not the insurance fund, keeps the rounding residue).
    num = s * m.mark_q - equity
    den = s * mult
    bp = -(-num // den) if s > 0 else num // den
    bp = min(MAX_PRICE, max(1, bp))
    mq = m.mark_q
    # The opposite positions, most profitable first (ties: the lower account index), as a heap
    # of one int each, ``(-upnl << ACCOUNT_BITS) + account``, popped only as far as needed (not
    # every opposite holder sorted with a key function and a tuple each).
    holders = m.holders
    ranked: list[int] = []
    is_long = s > 0
    for p in holders.values():
        if (p.size > 0) != is_long:
            upnl = unrealized_pnl(p.size, mq, p.entry_quote)
            ranked.append((-upnl << ACCOUNT_BITS) + p.account.index)
    heapify(ranked)
    pq = bp * mult
    while ranked and pos.size != 0:
        cp = holders[heappop(ranked) & ACCOUNT_MASK]
        q = min(abs(pos.size), abs(cp.size))
        d = q if s < 0 else -q
        acct.collateral += apply_fill(st, pos, d, pq, 0)
        cp.account.collateral += apply_fill(st, cp, -d, pq, 0)
        st.mark_account(acct)
        st.mark_account(cp.account)
        out.event(PositionDeleveraged(acct.index, cp.account.index, m.index, -d, bp))
        st.note_traded(cp.account)
    st.mark_market(m)
