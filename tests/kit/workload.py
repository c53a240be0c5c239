"""A small deterministic command stream for the engine's own replay, snapshot and event tests.

(``raydex bench engine`` uses the richer generator in ``observability/workload.py``; this one
exists so engine tests need nothing outside ``engine/`` and ``codecs/``, and no ``random``.)

``Workload(accounts, markets, seed)`` yields ``(command, now_ms)`` pairs: ``setup()`` creates the
markets, registers key 0 of every account and funds it; ``commands(n)`` yields ``n`` commands:

- market makers (the first ``makers`` accounts, deep pockets) quote GoodTillTime/PostOnly orders a
  few ticks around each market's moving mid, each identified by a client order index;
- ~40% cancels of a maker's oldest quote (by client order index; some were filled meanwhile and
  are answered NOT_ACTIVE_LIMIT_ORDER, as in real traffic), ~8% modifies;
- takers (small accounts, some highly leveraged) cross the spread with IOC limit and market orders;
- ~3% transfers; every ``oracle_every`` commands the mid of one market moves and its mark is set,
  which liquidates the takers that went under maintenance; funding every ``funding_every``;
- with ``conditional`` (percent of commands, 0 by default: the stream is then exactly what it
  was before conditional orders existed), takers also place stop-loss / take-profit orders
  (market and limit, sized or position-tied), grouped orders (OTO, OCO, OTOCO), small TWAPs,
  cancel some of them by client order index and send ``TimeTick``s; the clock advances
  ``ms_per_8`` ms every 8 commands (1 by default), so TWAPs slice and orders expire.

Randomness is a 64-bit LCG seeded by ``seed`` (no ``random``): same arguments, same stream.
:func:`bare_ops` turns a stream into the matching-only operations for :class:`BareBook`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from raydex.codecs import (
    ApplyFunding,
    CancelOrder,
    CreateGroupedOrders,
    CreateOrder,
    Deposit,
    ModifyOrder,
    OrderInfo,
    RegisterApiKey,
    SetMarkPrice,
    TimeTick,
    Transfer,
    grouped_slots,
    public_key_of,
)
from raydex.observability.bench.floors import BareBook

from .engine import market

_SIG = b"\x00" * 80
_MEMO = bytes(32)
_NO_L1_SIG = bytes(65)
_KEY = public_key_of((17).to_bytes(40, "little"))  # valid: the engine checks points
T0 = 1_700_000_000_000


class Workload:
    def __init__(
        self,
        accounts: int = 10_000,
        markets: int = 8,
        seed: int = 1,
        makers: int | None = None,
        oracle_every: int = 400,
        oracle_step: int = 10,
        funding_every: int = 50_000,
        conditional: int = 0,
        ms_per_8: int = 1,
    ) -> None:
        self.accounts = accounts
        self.markets = markets
        self.makers = makers if makers is not None else max(2, min(64, accounts // 20))
        self.oracle_every = oracle_every
        #: Ticks per unit of the mid's random walk (each move is -20..20 units).
        self.oracle_step = oracle_step
        self.funding_every = funding_every
        self.conditional = conditional
        self.ms_per_8 = ms_per_8
        #: the conditional orders placed: (account, market, client order index), oldest first
        self._conds: deque[tuple[int, int, int]] = deque()
        self._state = (seed * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        self._mid = [10_000 + 100 * m for m in range(markets)]
        self._nonce = [0] * accounts
        self._coi = [0] * accounts
        #: Per maker, its quotes' (market, client order index, is_ask), oldest first.
        self._quotes: list[deque[tuple[int, int, int]]] = [deque() for _ in range(self.makers)]
        self.now = T0

    def _rand(self, n: int) -> int:
        self._state = (self._state * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        return (self._state >> 33) % n

    def setup(self) -> Iterator[tuple[Any, int]]:
        for m in range(self.markets):
            yield (
                market(
                    m,
                    symbol=f"MKT{m}",
                    maker_fee=20,
                    taker_fee=50,
                    liquidation_fee=5_000,
                    closeout_margin_fraction=250,
                    max_price_deviation=3_000,
                    mark_price=self._mid[m],
                ),
                self.now,
            )
        for a in range(self.accounts):
            yield RegisterApiKey(a, 0, _KEY), self.now
            if a < self.makers:
                cash = 10_000_000 * 1_000_000
            elif a % 10 == 0:
                cash = 30 * 1_000_000  # leveraged takers: the liquidation candidates
            else:
                cash = 5_000 * 1_000_000
            yield Deposit(a, cash), self.now

    def _next_nonce(self, a: int) -> int:
        n = self._nonce[a]
        self._nonce[a] = n + 1
        return n

    def commands(self, n: int) -> Iterator[tuple[Any, int]]:
        rand = self._rand
        for i in range(n):
            if i % 8 == 0:
                self.now += self.ms_per_8
            now = self.now
            exp = now + 60_000
            if i % self.oracle_every == self.oracle_every - 1:
                m = rand(self.markets)
                step = rand(41) - 20
                mid = max(1_000, self._mid[m] + step * self.oracle_step)
                self._mid[m] = mid
                yield SetMarkPrice(m, mid), now
                continue
            if i % self.funding_every == self.funding_every - 1:
                yield ApplyFunding(rand(self.markets), rand(2_001) - 1_000), now
                continue
            if self.conditional and rand(100) < self.conditional:
                yield self._conditional(now, exp), now
                continue
            r = rand(100)
            if r < 40:
                mk = rand(self.makers)
                q = self._quotes[mk]
                if q:
                    m, coi, _ = q.popleft()
                    yield CancelOrder(mk, 0, m, coi, exp, self._next_nonce(mk), _SIG), now
                    continue
                r = 50
            if r < 48:
                mk = rand(self.makers)
                q = self._quotes[mk]
                if q:
                    m, coi, is_ask = q[rand(len(q))]
                    mid = self._mid[m]
                    off = 1 + rand(12)
                    price = mid + off if is_ask else mid - off
                    yield (
                        ModifyOrder(
                            mk, 0, m, coi, 1 + rand(20), price, 0, exp, self._next_nonce(mk), _SIG
                        ),
                        now,
                    )
                    continue
                r = 50
            if r < 80:
                mk = rand(self.makers)
                m = rand(self.markets)
                is_ask = rand(2)
                off = 1 + rand(12)
                mid = self._mid[m]
                price = mid + off if is_ask else mid - off
                self._coi[mk] += 1
                coi = self._coi[mk]
                q = self._quotes[mk]
                q.append((m, coi, is_ask))
                if len(q) > 40:
                    q.popleft()
                tif = 2 if rand(4) == 0 else 1
                yield (
                    CreateOrder(
                        mk,
                        0,
                        m,
                        coi,
                        1 + rand(20),
                        price,
                        is_ask,
                        0,
                        tif,
                        0,
                        0,
                        0,
                        exp,
                        self._next_nonce(mk),
                        _SIG,
                    ),
                    now,
                )
                continue
            if r < 97:
                a = self.makers + rand(self.accounts - self.makers)
                m = rand(self.markets)
                is_ask = rand(2)
                mid = self._mid[m]
                slip = 5 + rand(20)
                price = mid - slip if is_ask else mid + slip
                size = 1 + rand(10) if a % 10 else 20 + rand(200)
                market_order = rand(3) == 0
                yield (
                    CreateOrder(
                        a,
                        0,
                        m,
                        0,
                        size,
                        price,
                        is_ask,
                        1 if market_order else 0,
                        0,
                        0,
                        0,
                        0,
                        exp,
                        self._next_nonce(a),
                        _SIG,
                    ),
                    now,
                )
                continue
            a = self.makers + rand(self.accounts - self.makers)
            b = self.makers + rand(self.accounts - self.makers)
            if a == b:
                b = 0
            yield (
                Transfer(
                    a,
                    0,
                    b,
                    3,
                    0,
                    0,
                    1 + rand(1_000_000),
                    0,
                    _MEMO,
                    _NO_L1_SIG,
                    exp,
                    self._next_nonce(a),
                    _SIG,
                ),
                now,
            )

    def _conditional(self, now: int, exp: int) -> Any:
        """One conditional-order command of a taker (see the module docstring)."""
        rand = self._rand
        kind = rand(10)
        if kind == 9:
            return TimeTick()
        a = self.makers + rand(self.accounts - self.makers)
        if kind == 8 and self._conds:
            ca, m, coi = self._conds.popleft()
            return CancelOrder(ca, 0, m, coi, exp, self._next_nonce(ca), _SIG)
        m = rand(self.markets)
        mid = self._mid[m]
        is_ask = rand(2)
        away = (3 + rand(30)) * self.oracle_step
        # a stop sells below the mid and buys above it; a take-profit the other way
        stop = mid - away if is_ask else mid + away
        profit = mid + away if is_ask else mid - away
        worst = mid - 6 * away if is_ask else mid + 6 * away
        later = now + 3_600_000 + rand(3_600_000)
        self._coi[a] += 1
        coi = self._coi[a]
        self._conds.append((a, m, coi))
        if len(self._conds) > 200:
            self._conds.popleft()
        size = 1 + rand(10)
        if kind <= 3:  # a stop-loss / take-profit, market or limit, sized or position-tied
            otype = 2 + kind
            ro = 0 if kind == 1 else 1
            tied = ro and rand(2) == 0
            trig = stop if otype in (2, 3) else profit
            price = worst if otype in (2, 4) else trig
            tif = 0 if otype in (2, 4) else 1
            return CreateOrder(
                a, 0, m, coi, 0 if tied else size, max(1, price), is_ask, otype, tif, ro,
                max(1, trig), later, exp, self._next_nonce(a), _SIG,
            )  # fmt: skip
        if kind == 7:  # a TWAP over five to six minutes
            end = now + 300_000 + rand(60_000)
            return CreateOrder(
                a, 0, m, coi, 5 + rand(20), max(1, worst), is_ask, 6, 1, 0, 0, end, exp,
                self._next_nonce(a), _SIG,
            )  # fmt: skip
        sl = OrderInfo(m, 0, 0, max(1, worst), is_ask, 2, 0, 1, max(1, stop), later)
        tp = OrderInfo(m, 0, 0, max(1, profit), is_ask, 5, 1, 1, max(1, profit), later)
        if kind == 4:  # OCO on whatever position the account has
            orders = [tp, sl]
            grouping = 2
        else:  # OTO / OTOCO: an entry on the other side, a market order or a limit near the mid
            entry_ask = 1 - is_ask
            if rand(2):
                entry = OrderInfo(
                    m, coi, size, mid + 20 if not entry_ask else mid - 20, entry_ask, 1, 0, 0, 0, 0
                )
            else:
                near = mid - 3 if not entry_ask else mid + 3
                entry = OrderInfo(m, coi, size, near, entry_ask, 0, 1, 0, 0, later)
            orders = [entry, sl] if kind == 5 else [entry, tp, sl]
            grouping = 1 if kind == 5 else 3
        return CreateGroupedOrders(
            a, 0, grouping, len(orders), *grouped_slots(orders), exp, self._next_nonce(a), _SIG
        )


def bare_ops(stream: Iterable[tuple[Any, int]]) -> list[tuple[int, int, int, int, int, int]]:
    """Matching-only view of a stream: ``(op, market, order_id, is_ask, price, size)`` with op 0 =
    add (GoodTillTime), 1 = add then cancel any remainder (IOC), 2 = cancel, 3 = re-add on the same
    side if the preceding cancel found the order (modify). Client order indexes become ids
    ``account << 48 | coi``. Run them with :func:`run_bare`."""
    ops: list[tuple[int, int, int, int, int, int]] = []
    anon = 1 << 100
    for cmd, _now in stream:
        t = type(cmd)
        if t is CreateOrder:
            if cmd.client_order_index:
                oid = cmd.account_index << 48 | cmd.client_order_index
            else:
                anon += 1
                oid = anon
            op = 1 if cmd.time_in_force == 0 else 0
            ops.append((op, cmd.market_index, oid, cmd.is_ask, cmd.price, cmd.base_amount))
        elif t is CancelOrder:
            ops.append((2, cmd.market_index, cmd.account_index << 48 | cmd.index, 0, 0, 0))
        elif t is ModifyOrder:
            oid = cmd.account_index << 48 | cmd.index
            ops.append((2, cmd.market_index, oid, 0, 0, 0))
            ops.append((3, cmd.market_index, oid, 0, cmd.price, cmd.base_amount))
    return ops


def run_bare(ops: list[tuple[int, int, int, int, int, int]], markets: int) -> int:
    """Feed ``ops`` through one :class:`BareBook` per market; return the total filled lots."""
    books = [BareBook() for _ in range(markets)]
    sides: dict[int, int] = {}
    filled = 0
    found = False
    for op, m, oid, is_ask, price, size in ops:
        book = books[m]
        if op == 0:
            if oid in sides:
                continue
            filled += book.add(oid, bool(is_ask), price, size)
            sides[oid] = is_ask
        elif op == 1:
            filled += book.add(oid, bool(is_ask), price, size)
            book.cancel(oid)
        elif op == 2:
            found = book.cancel(oid)
        elif found:
            filled += book.add(oid, bool(sides[oid]), price, size)
    return filled
