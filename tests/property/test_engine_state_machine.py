"""Hypothesis drives the engine with random orders, cancels, modifies and mark moves against a tiny
list-based price-time reference book; after every step the books, the fills, the positions and the
resting orders' versions must agree and ``validate_internal_state()`` must pass. Accounts switch
between cross and isolated margin and move isolated collateral (UpdateMargin); a plain per-fill
ledger of each position (its basis and, in isolated mode, its collateral by raydex's rule) must
agree with the engine's. Masters open sub-accounts (tx 9: the next index down from 2^48 - 2, at
most ``MAX_SUB_ACCOUNTS`` each) and move USDC among all accounts with a fee; a plain ledger of each
sub-account's cash, the fee pool and the masters' debits must agree with the engine's. A replay of
every command through a fresh engine and a snapshot round trip must reproduce the state hash.

The reference also plays Lighter's ``L2TxAttributes``: the four self-trade behaviours (6; the
equality mode 7 with every account its own master), versioned modifies (8) and cancel-all in one
market (5); and a market order's price as the limit of its average fill.

The reference also holds stop-loss / take-profit orders (market and limit, sized, not
reduce-only): each waits until the mark reaches its trigger (a stop sells as the mark falls and
buys as it rises, a take-profit the other way; one placed beyond the mark fires at once), then
takes the book as a market order (IOC) or a limit order (GoodTillTime) would, the crossed ones
in crossing order (rises: ascending trigger, falls: descending; ties by order index). The stress
machine adds grouped orders, TWAPs and time, checked by the engine's invariants, replay and
snapshot round trips."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from kit.engine import KEY, market

from raydex.codecs import (
    MAX_ACCOUNT_INDEX,
    MAX_SUB_ACCOUNTS,
    ApplyFunding,
    CancelAllOrders,
    CancelOrder,
    CreateGroupedOrders,
    CreateOrder,
    CreateSubAccount,
    Deposit,
    ModifyOrder,
    OrderInfo,
    RegisterApiKey,
    SetMarkPrice,
    TimeTick,
    Transfer,
    UpdateLeverage,
    UpdateMargin,
    Withdraw,
    grouped_slots,
)
from raydex.codecs import ResultCode as RC
from raydex.engine import Engine

NOW = 1_700_000_000_000
SIG = b"\x00" * 80
#: A tx refused by one of these gates consumes no nonce.
GATE_CODES = (RC.ACCOUNT_NOT_FOUND, RC.API_KEY_NOT_FOUND, RC.INVALID_NONCE, RC.TX_EXPIRED)
ACCOUNTS = (1, 2, 3)
PRICES = st.integers(95, 105)
SIZES = st.integers(1, 5)
MARKET = market(
    0, symbol="T", maker_fee=100, taker_fee=300, max_price_deviation=10_000, mark_price=100
)
MULT = 100  # micro-USDC per tick * lot (2 price and 2 size decimals)
#: isolated positions of the reference machine run at 1x (100% initial margin), so the marks it
#: moves (97-103) never bring one near its maintenance margin: no liquidation to model
ISOLATED_IMF = 10_000


@dataclass
class RefLedger:
    """One account's position as plainly as possible: signed lots, signed cost basis, and in
    isolated mode its collateral (``Position.allocated``)."""

    isolated: bool = False
    size: int = 0
    basis: int = 0
    collateral: int = 0

    def fill(self, d: int, price: int, fee: int, mark: int) -> None:
        """``d`` signed lots at ``price`` paying ``fee``: the basis as the engine keeps it and,
        isolated, raydex's rule (docs/lighter-compatibility.md, isolated margin)."""
        s, pq = self.size, price * MULT
        realized = 0
        if s == 0 or (s > 0) == (d > 0):
            self.size, self.basis = s + d, self.basis + d * pq
        else:
            c = min(abs(s), abs(d))
            removed = _trunc(self.basis * c, abs(s))
            realized = (pq * c if s > 0 else -pq * c) - removed
            self.size = s + d
            self.basis = self.size * pq if abs(d) > c else self.basis - removed
        if not self.isolated:
            return
        ns = self.size
        cash = self.collateral + realized - fee
        opened = 0
        if s == 0:
            opened = abs(ns)
        elif ns != 0 and (ns > 0) == (s > 0):
            if abs(ns) > abs(s):
                opened = abs(ns) - abs(s)
            elif cash > 0:
                cash -= cash * (abs(s) - abs(ns)) // abs(s)
        else:
            cash = 0  # all of it back to the cross collateral (no deficit at 1x)
            opened = abs(ns)
        if opened:
            mq = mark * MULT
            cash += -(-opened * mq * ISOLATED_IMF // 10_000)
            cash += opened * max(0, (pq - mq) if ns > 0 else (mq - pq))
        self.collateral = cash


def _trunc(a: int, b: int) -> int:
    """``a / b`` rounded toward zero (``b > 0``)."""
    return a // b if a >= 0 else -(-a // b)


@dataclass
class RefOrder:
    oid: int
    account: int
    is_ask: int
    price: int
    remaining: int
    seq: int
    post_only: bool
    version: int = 0


#: ``take``'s answer when self-trade prevention ended the taker (it does not rest).
SELF_CANCELED = -1
STB = st.integers(0, 3)  # self-trade behaviour: ExpireMaker, ExpireTaker, CancelBoth, Reduce
STE = st.sampled_from((0, 0, 0, 1))  # equality: same account / same master


class ReferenceBook:
    """Price-time priority with Lighter's self-trade behaviours, as plainly as possible."""

    def __init__(self) -> None:
        self.orders: list[RefOrder] = []
        self.seq = 0
        self.positions = dict.fromkeys(ACCOUNTS, 0)

    def _queue(self, is_ask: int) -> list[RefOrder]:
        side = [o for o in self.orders if o.is_ask == is_ask]
        return sorted(side, key=lambda o: (o.price if is_ask else -o.price, o.seq))

    def crosses(self, is_ask: int, price: int) -> bool:
        opp = self._queue(1 - is_ask)
        return bool(opp) and (opp[0].price >= price if is_ask else opp[0].price <= price)

    def take(
        self, account: int, is_ask: int, price: int, size: int, stb: int = 0, average: bool = False
    ) -> tuple[int, list[Any]]:
        """Match; returns (lots left, or SELF_CANCELED when self-trade prevention ended the
        taker; the fills). ``average``: ``price`` bounds the average fill (a market order)."""
        fills: list[tuple[int, int, int]] = []
        filled = spent = 0
        while size:
            opp = self._queue(1 - is_ask)
            if not opp:
                break
            best = opp[0]
            cap = size
            if best.price < price if is_ask else best.price > price:
                if not average:
                    break
                room = spent - price * filled if is_ask else price * filled - spent
                cap = room // abs(best.price - price)
                if cap <= 0:
                    break
            if best.account == account:
                if stb in (0, 2):  # ExpireMaker, CancelBoth: the resting order goes
                    self.orders.remove(best)
                if stb in (1, 2):  # ExpireTaker, CancelBoth: the taker ends
                    return SELF_CANCELED, fills
                if stb == 3:  # Reduce: both shrink by the overlap
                    q = min(size, best.remaining)
                    best.remaining -= q
                    if best.remaining == 0:
                        self.orders.remove(best)
                    if q == size:
                        return SELF_CANCELED, fills
                    size -= q
                continue
            q = min(size, best.remaining, cap)
            size -= q
            best.remaining -= q
            filled += q
            spent += best.price * q
            fills.append((best.oid, best.price, q))
            sign = -1 if is_ask else 1
            self.positions[account] += sign * q
            self.positions[best.account] -= sign * q
            if best.remaining == 0:
                self.orders.remove(best)
        return size, fills

    def rest(
        self, oid: int, account: int, is_ask: int, price: int, size: int, po: bool, version: int = 0
    ) -> None:
        self.seq += 1
        self.orders.append(RefOrder(oid, account, is_ask, price, size, self.seq, po, version))

    def levels(self, is_ask: int) -> list[tuple[int, int]]:
        agg: dict[int, int] = {}
        for o in self._queue(is_ask):
            agg[o.price] = agg.get(o.price, 0) + o.remaining
        return list(agg.items())

    def find(self, oid: int) -> RefOrder | None:
        return next((o for o in self.orders if o.oid == oid), None)


@dataclass
class RefTrigger:
    """A waiting stop-loss (``stop``) or take-profit: ``limit`` ones rest their remainder."""

    oid: int
    account: int
    is_ask: int
    stop: bool
    limit: bool
    trigger: int
    price: int
    size: int

    @property
    def on_rise(self) -> bool:
        return (not self.is_ask) if self.stop else bool(self.is_ask)

    def reached(self, mark: int) -> bool:
        return mark >= self.trigger if self.on_rise else mark <= self.trigger


class EngineVsReference(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.eng = Engine()
        self.ref = ReferenceBook()
        self.triggers: list[RefTrigger] = []
        self.nonces = dict.fromkeys(ACCOUNTS, 0)
        self.ledgers = {a: RefLedger() for a in ACCOUNTS}
        self.mark_price = MARKET.mark_price
        self.subs: dict[int, int] = {}  # sub-account -> master
        self.sub_cash: dict[int, int] = {}
        self.next_sub = MAX_ACCOUNT_INDEX
        self.fee_pool = 0  # the trades' fees and the transfers'
        self.log: list[Any] = []
        self.events: list[Any] = []
        self.run(MARKET)
        for a in ACCOUNTS:
            self.run(RegisterApiKey(a, 0, KEY))
            self.run(Deposit(a, 10**15))

    def run(self, cmd: Any) -> int:
        self.log.append(cmd)
        self.events = []
        code = self.eng.execute(cmd, NOW, self.events)
        for e in self.events:
            if type(e).__name__ == "TradeExecuted":
                q = -e.size if e.taker_is_ask else e.size
                self.fee_pool += e.taker_fee + e.maker_fee
                self.ledgers[e.taker_account_index].fill(q, e.price, e.taker_fee, self.mark_price)
                self.ledgers[e.maker_account_index].fill(-q, e.price, e.maker_fee, self.mark_price)
        return code

    def nonce(self, a: int) -> int:
        n = self.nonces[a]
        self.nonces[a] = n + 1
        return n

    def fills(self) -> list[tuple[int, int, int]]:
        return [
            (e.maker_order_index, e.price, e.size)
            for e in self.events
            if type(e).__name__ == "TradeExecuted"
        ]

    def last_order_index(self) -> int:
        return [e.order_index for e in self.events if type(e).__name__ == "OrderUpdated"][-1]

    @rule(
        a=st.sampled_from(ACCOUNTS),
        is_ask=st.integers(0, 1),
        price=PRICES,
        size=SIZES,
        tif=st.sampled_from((0, 1, 1, 2)),
        stb=STB,
        ste=STE,
    )
    def limit(
        self, a: int, is_ask: int, price: int, size: int, tif: int, stb: int, ste: int
    ) -> None:
        would_cross = self.ref.crosses(is_ask, price)
        code = self.run(
            CreateOrder(
                a,
                0,
                0,
                0,
                size,
                price,
                is_ask,
                0,
                tif,
                0,
                0,
                0,
                NOW,
                self.nonce(a),
                SIG,
                stb,
                ste,
            )
        )
        if stb == 3 and ste == 1:  # lighter-go refuses Reduce with MasterAccountIndex
            assert code == RC.INVALID_PARAM
            return
        if tif == 2 and would_cross:
            assert code == RC.POST_ONLY_WOULD_CROSS
            return
        assert code == RC.OK
        oid = self.last_order_index()
        left, fills = self.ref.take(a, is_ask, price, size, stb)
        assert self.fills() == fills
        if left > 0 and tif != 0:
            self.ref.rest(oid, a, is_ask, price, left, tif == 2)

    @rule(
        a=st.sampled_from(ACCOUNTS),
        is_ask=st.integers(0, 1),
        size=SIZES,
        limit=PRICES,
        stb=STB,
    )
    def market_order(self, a: int, is_ask: int, size: int, limit: int, stb: int) -> None:
        code = self.run(
            CreateOrder(
                a,
                0,
                0,
                0,
                size,
                limit,
                is_ask,
                1,
                0,
                0,
                0,
                0,
                NOW,
                self.nonce(a),
                SIG,
                stb,
                0,
            )
        )
        assert code == RC.OK
        _, fills = self.ref.take(a, is_ask, limit, size, stb, average=True)
        assert self.fills() == fills

    @precondition(lambda self: self.ref.orders)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        o = data.draw(st.sampled_from(self.ref.orders))
        code = self.run(CancelOrder(o.account, 0, 0, o.oid, NOW, self.nonce(o.account), SIG))
        assert code == RC.OK
        self.ref.orders.remove(o)

    @rule(a=st.sampled_from(ACCOUNTS), oid=st.integers(1 << 48, (1 << 48) + 400))
    def cancel_unknown_or_foreign(self, a: int, oid: int) -> None:
        o = self.ref.find(oid)
        t = next((t for t in self.triggers if t.oid == oid and t.account == a), None)
        code = self.run(CancelOrder(a, 0, 0, oid, NOW, self.nonce(a), SIG))
        if o is not None and o.account == a:
            assert code == RC.OK
            self.ref.orders.remove(o)
        elif t is not None:
            assert code == RC.OK
            self.triggers.remove(t)
        else:
            assert code == RC.NOT_ACTIVE_LIMIT_ORDER

    @precondition(lambda self: self.ref.orders)
    @rule(
        data=st.data(),
        price=PRICES,
        size=st.integers(1, 8),
        stb=STB,
        bump=st.sampled_from((None, None, -1, 0, 1, 5)),
    )
    def modify(
        self, data: st.DataObject, price: int, size: int, stb: int, bump: int | None
    ) -> None:
        o = data.draw(st.sampled_from(self.ref.orders))
        # The engine's base_amount is the new total: filled + new remaining.
        ev_initial = self._initial(o.oid)
        filled = ev_initial - o.remaining
        total = filled + size
        version = 0 if bump is None else max(0, o.version + bump)
        code = self.run(
            ModifyOrder(
                o.account,
                0,
                0,
                o.oid,
                total,
                price,
                0,
                NOW,
                self.nonce(o.account),
                SIG,
                stb,
                0,
                version,
            )
        )
        if version and version <= o.version:  # stale: refused, the order as it was
            assert code == RC.STALE_ORDER_VERSION
            return
        if version:
            o.version = version
        if price == o.price and size <= o.remaining:
            assert code == RC.OK
            o.remaining = size
            return
        self.ref.orders.remove(o)
        if o.post_only and self.ref.crosses(o.is_ask, price):
            assert code == RC.POST_ONLY_WOULD_CROSS
            return
        assert code == RC.OK
        left, fills = self.ref.take(o.account, o.is_ask, price, size, stb)
        assert self.fills() == fills
        if left > 0:
            self.ref.rest(o.oid, o.account, o.is_ask, price, left, o.post_only, o.version)

    def _initial(self, oid: int) -> int:
        for rec in self.eng.records():
            if type(rec).__name__ == "OrderRecord" and rec.order_index == oid:
                return int(rec.initial_base_amount)
        raise AssertionError(f"order {oid} not in the engine")

    @rule(a=st.sampled_from(ACCOUNTS), market=st.sampled_from((255, 255, 0, 3)))
    def cancel_all(self, a: int, market: int) -> None:
        """Every market (255), the book's market (0) or one that does not exist (3)."""
        code = self.run(CancelAllOrders(a, 0, 0, 0, NOW, self.nonce(a), SIG, market))
        if market == 3:
            assert code == RC.MARKET_NOT_FOUND
            return
        assert code == RC.OK
        self.ref.orders = [o for o in self.ref.orders if o.account != a]
        self.triggers = [t for t in self.triggers if t.account != a]

    @rule(mark=st.integers(97, 103))
    def move_mark(self, mark: int) -> None:
        self.mark_price = mark  # (set first: the orders this move fires trade at it)
        assert self.run(SetMarkPrice(0, mark)) == RC.OK
        assert self.fills() == self._fire()

    @rule(
        a=st.sampled_from(ACCOUNTS),
        is_ask=st.integers(0, 1),
        stop=st.booleans(),
        limit=st.booleans(),
        trigger=st.integers(96, 104),
        price=PRICES,
        size=SIZES,
    )
    def trigger_order(
        self, a: int, is_ask: int, stop: bool, limit: bool, trigger: int, price: int, size: int
    ) -> None:
        otype = (3 if limit else 2) if stop else (5 if limit else 4)
        code = self.run(
            CreateOrder(
                a, 0, 0, 0, size, price, is_ask, otype, 1 if limit else 0, 0, trigger,
                NOW + 3_600_000, NOW, self.nonce(a), SIG,
            )
        )  # fmt: skip
        assert code == RC.OK
        oid = next(
            e.order_index for e in self.events if type(e).__name__ == "ConditionalOrderUpdated"
        )
        self.triggers.append(RefTrigger(oid, a, is_ask, stop, limit, trigger, price, size))
        assert self.fills() == self._fire()

    @precondition(lambda self: self.triggers)
    @rule(data=st.data())
    def cancel_trigger(self, data: st.DataObject) -> None:
        t = data.draw(st.sampled_from(self.triggers))
        code = self.run(CancelOrder(t.account, 0, 0, t.oid, NOW, self.nonce(t.account), SIG))
        assert code == RC.OK
        self.triggers.remove(t)

    def _fire(self) -> list[tuple[int, int, int]]:
        """Fire the reference's triggers the mark has reached (crossing order); their fills."""
        due = [t for t in self.triggers if t.reached(self.mark_price)]
        ups = sorted((t for t in due if t.on_rise), key=lambda t: (t.trigger, t.oid))
        downs = sorted((t for t in due if not t.on_rise), key=lambda t: (-t.trigger, t.oid))
        fills: list[tuple[int, int, int]] = []
        for t in ups + downs:
            self.triggers.remove(t)
            # a fired stop-loss / take-profit is a market order: its price bounds the average
            left, got = self.ref.take(t.account, t.is_ask, t.price, t.size, average=not t.limit)
            fills += got
            if left and t.limit:
                self.ref.rest(t.oid, t.account, t.is_ask, t.price, left, False)
        return fills

    @rule(a=st.sampled_from(ACCOUNTS), isolated=st.booleans())
    def margin_mode(self, a: int, isolated: bool) -> None:
        """UpdateLeverage to cross or isolated: refused while the position is open or the
        account rests an order (MARGIN_MODE_LOCKED)."""
        imf = ISOLATED_IMF if isolated else MARKET.default_initial_margin_fraction
        code = self.run(UpdateLeverage(a, 0, 0, imf, int(isolated), NOW, self.nonce(a), SIG))
        ledger = self.ledgers[a]
        locked = ledger.size != 0 or any(o.account == a for o in self.ref.orders)
        if isolated != ledger.isolated and locked:
            assert code == RC.MARGIN_MODE_LOCKED
            return
        assert code == RC.OK
        ledger.isolated = isolated

    @rule(a=st.sampled_from(ACCOUNTS), amount=st.integers(1, 3_000), add=st.booleans())
    def update_margin(self, a: int, amount: int, add: bool) -> None:
        """UpdateMargin: into the position, or out of it down to its initial margin."""
        code = self.run(UpdateMargin(a, 0, 0, amount, int(add), NOW, self.nonce(a), SIG))
        ledger = self.ledgers[a]
        if not ledger.isolated or ledger.size == 0:
            assert code == RC.NO_ISOLATED_POSITION
            return
        if add:
            assert code == RC.OK
            ledger.collateral += amount
            return
        mq = self.mark_price * MULT
        equity = ledger.collateral - amount + ledger.size * mq - ledger.basis
        if amount > ledger.collateral:
            assert code == RC.INSUFFICIENT_BALANCE
        elif equity * 10_000 < abs(ledger.size) * mq * ISOLATED_IMF:
            assert code == RC.NOT_ENOUGH_MARGIN
        else:
            assert code == RC.OK
            ledger.collateral -= amount

    @rule(a=st.sampled_from(ACCOUNTS))
    def open_sub_account(self, a: int) -> None:
        """CreateSubAccount: the next index down, the signer its master, no collateral; the
        operator then gives it a key as the SDK's ChangePubKey would."""
        code = self.run(CreateSubAccount(a, 0, NOW, self.nonce(a), SIG))
        if sum(m == a for m in self.subs.values()) >= MAX_SUB_ACCOUNTS:
            assert code == RC.TOO_MANY_SUB_ACCOUNTS
            return
        assert code == RC.OK
        made = [
            (e.account_index, e.master_index)
            for e in self.events
            if type(e).__name__ == "SubAccountCreated"
        ]
        sub = self.next_sub
        assert made == [(sub, a)]
        self.next_sub -= 1
        self.subs[sub], self.sub_cash[sub], self.nonces[sub] = a, 0, 0
        assert self.run(RegisterApiKey(sub, 0, KEY)) == RC.OK

    @precondition(lambda self: bool(self.subs))
    @rule(data=st.data(), amount=st.integers(1, 10**9), fee=st.integers(0, 1_000))
    def transfer(self, data: st.DataObject, amount: int, fee: int) -> None:
        """Transfer of USDC on the perps route between any two accounts (the masters here have
        no L1 address, so none needs an L1 signature): the sender pays amount and fee, the fee
        goes to the fee pool; a sub-account holds only what was sent to it (no position, no
        order), a master far more than any transfer."""
        everyone = sorted((*ACCOUNTS, *self.subs))
        src = data.draw(st.sampled_from(everyone))
        others = [a for a in everyone if a != src]
        dst = data.draw(
            st.sampled_from(others) | st.sampled_from(sorted(self.subs.keys() - {src}) or others)
        )
        if src in self.subs:  # often what it holds, or less
            held = self.sub_cash[src]
            amount = data.draw(st.sampled_from((amount, max(1, held), max(1, held // 2))))
        paid = self.eng.account_collateral(src)
        tx = Transfer(
            src, 0, dst, 3, 0, 0, amount, fee, bytes(32), bytes(65), NOW, self.nonce(src), SIG
        )
        code = self.run(tx)
        if src in self.subs and amount + fee > self.sub_cash[src]:
            assert code == RC.INSUFFICIENT_BALANCE
            assert self.eng.account_collateral(src) == paid
            event("transfer refused: INSUFFICIENT_BALANCE")
            return
        assert code == RC.OK
        event("transfer from a sub-account" if src in self.subs else "transfer from a master")
        assert paid - self.eng.account_collateral(src) == amount + fee
        self.fee_pool += fee
        for a, delta in ((src, -amount - fee), (dst, amount)):
            if a in self.subs:
                self.sub_cash[a] += delta

    @invariant()
    def books_positions_and_internal_state_agree(self) -> None:
        self.eng.validate_internal_state()
        assert self.eng.book_levels(0, 0, 100) == self.ref.levels(0)
        assert self.eng.book_levels(0, 1, 100) == self.ref.levels(1)
        for a in ACCOUNTS:
            p = self.eng.position(a, 0)
            assert (0 if p is None else p.size) == self.ref.positions[a]
            versions = {r.order_index: r.order_version for r in self.eng.open_orders(a)}
            assert versions == {o.oid: o.version for o in self.ref.orders if o.account == a}
            ledger = self.ledgers[a]
            got = (
                (0, 0, 0, 0)
                if p is None
                else (p.size, p.entry_quote, p.margin_mode, p.allocated_margin)
            )
            assert got == (ledger.size, ledger.basis, int(ledger.isolated), ledger.collateral)
        for sub, master in self.subs.items():
            assert self.eng.master_index(sub) == master
            assert self.eng.account_collateral(sub) == self.sub_cash[sub]
        assert self.eng.fee_pool == self.fee_pool
        waiting = sorted(
            c.order_index
            for a in ACCOUNTS
            for c in self.eng.conditional_orders(a)
            if c.status == 1  # PENDING
        )
        assert waiting == sorted(t.oid for t in self.triggers)

    def teardown(self) -> None:
        replay = Engine()
        for cmd in self.log:
            replay.execute(cmd, NOW, [])
        assert replay.state_hash() == self.eng.state_hash()
        restored = Engine.from_records(self.eng.records())
        assert restored.state_hash() == self.eng.state_hash()


EngineVsReference.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEngineAgainstReferenceBook = EngineVsReference.TestCase


STRESS_MARKETS = (
    market(
        0,
        symbol="A",
        maker_fee=200,
        taker_fee=500,
        liquidation_fee=5_000,
        max_price_deviation=3_000,
        mark_price=100,
    ),
    market(
        1,
        symbol="B",
        price_decimals=1,
        size_decimals=3,
        liquidation_fee=10_000,
        default_initial_margin_fraction=2_000,
        min_initial_margin_fraction=1_000,
        maintenance_margin_fraction=600,
        closeout_margin_fraction=300,
        mark_price=100,
    ),
)
ANY_CODE = st.integers(-2, 2**33)


class EngineUnderStress(RuleBasedStateMachine):
    """Small accounts, leverage, reduce-only, transfers, funding and wild mark moves: liquidations
    and ADL happen; every invariant must still hold after every step, and odd field values must be
    answered with a code, never an exception."""

    def __init__(self) -> None:
        super().__init__()
        self.eng = Engine()
        self.nonces = dict.fromkeys(range(1, 6), 0)
        self.log: list[Any] = []
        self.now = NOW
        for m in STRESS_MARKETS:
            self.run(m)
        for a in self.nonces:
            self.run(RegisterApiKey(a, 0, KEY))
            self.run(Deposit(a, 2_000_000 if a < 4 else 10**9))

    def run(self, cmd: Any) -> int:
        self.log.append((cmd, self.now))
        out: list[Any] = []
        code = self.eng.execute(cmd, self.now, out)
        assert isinstance(code, int)
        for e in out:
            name = type(e).__name__
            if name in ("PositionLiquidated", "PositionDeleveraged", "TradeExecuted"):
                event(name)
                if name != "TradeExecuted" and self._isolated(e.account_index, e.market_index):
                    event(f"{name} of an isolated position")
            elif name == "OrderUpdated" and e.status in (12, 6):
                event(f"order status {e.status}")
        return code

    def nonce(self, a: int) -> int:
        n = self.nonces[a]
        self.nonces[a] = n + 1
        return n

    @initialize(
        isolated=st.sets(st.tuples(st.integers(1, 4), st.integers(0, 1)), max_size=6),
        imf=st.sampled_from((2_000, 5_000)),
    )
    def isolate_some(self, isolated: set[tuple[int, int]], imf: int) -> None:
        """Some (account, market) positions start in isolated margin, before any trade."""
        for a, m in sorted(isolated):
            code = self.run(UpdateLeverage(a, 0, m, imf, 1, self.now, self.nonce(a), SIG))
            assert code == RC.OK

    def _isolated(self, a: int, m: int) -> bool:
        p = self.eng.position(a, m)
        return p is not None and p.margin_mode == 1

    @rule(
        a=st.integers(1, 5),
        m=st.integers(0, 1),
        is_ask=st.integers(0, 1),
        # extremes too: a market order's widest average limits, a limit order's band (an
        # aggressive one refused, a passive one resting)
        price=st.integers(92, 108) | st.sampled_from((1, 2**32 - 1)),
        size=st.integers(1, 2_000),
        otype=st.integers(0, 1),
        tif=st.integers(0, 2),
        ro=st.integers(0, 1),
        expiry=st.sampled_from((0, -1, NOW + 5)),
        stb=STB,
        ste=STE,
    )
    def order(
        self,
        a: int,
        m: int,
        is_ask: int,
        price: int,
        size: int,
        otype: int,
        tif: int,
        ro: int,
        expiry: int,
        stb: int,
        ste: int,
    ) -> None:
        self.run(
            CreateOrder(
                a,
                0,
                m,
                0,
                size,
                price,
                is_ask,
                otype,
                tif,
                ro,
                0,
                expiry,
                self.now,
                self.nonce(a),
                SIG,
                stb,
                ste,
            )
        )

    @rule(
        a=st.integers(1, 4),
        m=st.integers(0, 1),
        is_ask=st.integers(0, 1),
        size=st.integers(1, 5_000),
        depth=st.integers(0, 3),
    )
    def open_position(self, a: int, m: int, is_ask: int, size: int, depth: int) -> None:
        """The deep-pocket account 5 quotes at the mark; ``a`` takes it (if its margin allows)."""
        mark = self.eng.market(m).mark_price  # type: ignore[union-attr]
        for i in range(depth):
            self.run(
                CreateOrder(
                    5,
                    0,
                    m,
                    0,
                    size,
                    mark + (i if is_ask else -i),
                    1 - is_ask,
                    0,
                    1,
                    0,
                    0,
                    0,
                    self.now,
                    self.nonce(5),
                    SIG,
                )
            )
        self.run(
            CreateOrder(
                a,
                0,
                m,
                0,
                size,
                mark,
                is_ask,
                0,
                0,
                0,
                0,
                0,
                self.now,
                self.nonce(a),
                SIG,
            )
        )

    @rule(m=st.integers(0, 1), spread=st.integers(1, 40), size=st.integers(1, 3_000))
    def provide_liquidity(self, m: int, spread: int, size: int) -> None:
        mark = self.eng.market(m).mark_price  # type: ignore[union-attr]
        for is_ask in (0, 1):
            price = mark + spread if is_ask else max(1, mark - spread)
            self.run(
                CreateOrder(
                    5,
                    0,
                    m,
                    0,
                    size,
                    price,
                    is_ask,
                    0,
                    1,
                    0,
                    0,
                    0,
                    self.now,
                    self.nonce(5),
                    SIG,
                )
            )

    @rule(
        a=st.integers(1, 5),
        m=st.integers(0, 1),
        idx=st.integers(1 << 48, (1 << 48) + 300),
        price=st.integers(30, 130),
        size=st.integers(1, 400),
        version=st.sampled_from((0, 0, 1, 2, 2**48 - 1, 2**48)),
        stb=st.integers(-1, 4),
    )
    def modify_or_cancel(
        self, a: int, m: int, idx: int, price: int, size: int, version: int, stb: int
    ) -> None:
        self.run(
            ModifyOrder(a, 0, m, idx, size, price, 0, self.now, self.nonce(a), SIG, stb, 0, version)
        )
        self.run(CancelOrder(a, 0, m, idx + 1, self.now, self.nonce(a), SIG))

    @rule(m=st.integers(0, 1), mark=st.integers(40, 160))
    def mark(self, m: int, mark: int) -> None:
        assert self.run(SetMarkPrice(m, mark)) == RC.OK

    @rule(m=st.integers(0, 1), rate=st.integers(-5_000_000, 5_000_000))
    def funding(self, m: int, rate: int) -> None:
        assert self.run(ApplyFunding(m, rate)) == RC.OK

    @rule(a=st.integers(1, 5), b=st.integers(1, 5), amount=st.integers(1, 3_000_000))
    def move_cash(self, a: int, b: int, amount: int) -> None:
        self.run(
            Transfer(
                a, 0, b, 3, 0, 0, amount, 0, bytes(32), bytes(65), self.now, self.nonce(a), SIG
            )
        )
        self.run(Withdraw(b, 0, 3, 0, amount // 2 + 1, self.now, self.nonce(b), SIG))

    @rule(
        a=st.integers(1, 5),
        m=st.integers(0, 1),
        imf=st.integers(1, 10_000),
        mode=st.sampled_from((0, 0, 1)),
    )
    def leverage(self, a: int, m: int, imf: int, mode: int) -> None:
        self.run(UpdateLeverage(a, 0, m, imf, mode, self.now, self.nonce(a), SIG))

    @rule(
        a=st.integers(1, 5),
        m=st.integers(0, 1),
        amount=st.integers(1, 3_000_000),
        direction=st.integers(0, 1),
    )
    def isolated_margin(self, a: int, m: int, amount: int, direction: int) -> None:
        code = self.run(UpdateMargin(a, 0, m, amount, direction, self.now, self.nonce(a), SIG))
        if code == RC.OK:
            event("isolated margin moved")

    @rule(ms=st.integers(0, 10))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule(ms=st.integers(0, 200_000))
    def time_jumps(self, ms: int) -> None:
        """Time moves on with no order: TWAP slices and expiries run on a ``TimeTick``."""
        self.now += ms
        assert self.run(TimeTick()) == RC.OK

    @rule(
        a=st.integers(1, 5),
        m=st.integers(0, 1),
        is_ask=st.integers(0, 1),
        otype=st.integers(2, 6),
        size=st.integers(0, 2_000),
        price=st.integers(40, 160),
        trigger=st.integers(0, 160),
        ro=st.integers(0, 1),
        minutes=st.integers(-1, 30),
    )
    def conditional(
        self, a: int, m: int, is_ask: int, otype: int, size: int, price: int, trigger: int,
        ro: int, minutes: int,
    ) -> None:  # fmt: skip
        """A stop-loss / take-profit (market or limit, sized or position-tied) or a TWAP."""
        tif = {2: 0, 4: 0, 6: 1}.get(otype, 1)
        expiry = self.now + minutes * 60_000 if minutes >= 0 else 0
        code = self.run(
            CreateOrder(
                a, 0, m, 0, size, price, is_ask, otype, tif, ro, 0 if otype == 6 else trigger,
                expiry, self.now, self.nonce(a), SIG,
            )
        )  # fmt: skip
        event(f"conditional {otype}: {RC(code).name}")

    @rule(
        a=st.integers(1, 5),
        m=st.integers(0, 1),
        grouping=st.integers(0, 4),
        entry_ask=st.integers(0, 1),
        entry_market=st.booleans(),
        size=st.integers(1, 2_000),
        price=st.integers(60, 140),
        stop=st.integers(40, 160),
        profit=st.integers(40, 160),
        tied=st.booleans(),
    )
    def grouped(
        self, a: int, m: int, grouping: int, entry_ask: int, entry_market: bool, size: int,
        price: int, stop: int, profit: int, tied: bool,
    ) -> None:  # fmt: skip
        """OTO / OCO / OTOCO (and a bad grouping type), children on the other side."""
        later = self.now + 3_600_000
        kid = 1 - entry_ask
        sl = OrderInfo(m, 0, 0 if tied else size, price, kid, 2, 0, 1, stop, later)
        tp = OrderInfo(m, 0, 0 if tied else size, price, kid, 5, 1, 1, profit, later)
        if entry_market:
            entry = OrderInfo(m, 0, size, price, entry_ask, 1, 0, 0, 0, 0)
        else:
            entry = OrderInfo(m, 0, size, price, entry_ask, 0, 1, 0, 0, later)
        orders = [tp, sl] if grouping == 2 else [entry, sl] if grouping == 1 else [entry, tp, sl]
        code = self.run(
            CreateGroupedOrders(
                a, 0, grouping, len(orders), *grouped_slots(orders), self.now, self.nonce(a), SIG
            )
        )
        event(f"grouped {grouping}: {RC(code).name}")

    @rule(
        a=ANY_CODE,
        k=st.integers(-1, 300),
        m=st.integers(-1, 300),
        size=ANY_CODE,
        price=ANY_CODE,
        flag=st.integers(-1, 3),
        expiry=ANY_CODE,
    )
    def odd_values_get_a_code(
        self, a: int, k: int, m: int, size: int, price: int, flag: int, expiry: int
    ) -> None:
        a = a % 7 if a < 2**32 else a
        nonce = self.nonces.get(a, 0)
        code = self.run(
            CreateOrder(
                a,
                k,
                m,
                flag,
                size,
                price,
                flag,
                flag,
                flag,
                flag,
                0,
                expiry - 2,
                self.now,
                nonce,
                SIG,
            )
        )
        if code not in GATE_CODES and a in self.nonces:
            self.nonces[a] += 1

    @invariant()
    def internal_state_is_consistent(self) -> None:
        self.eng.validate_internal_state()

    def teardown(self) -> None:
        replay = Engine()
        for cmd, now in self.log:
            replay.execute(cmd, now, [])
        assert replay.state_hash() == self.eng.state_hash()
        restored = Engine.from_records(self.eng.records())
        assert restored.state_hash() == self.eng.state_hash()


EngineUnderStress.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEngineUnderStress = EngineUnderStress.TestCase
