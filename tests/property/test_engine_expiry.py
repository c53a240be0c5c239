"""Resting orders expire exactly and in order, whichever structure holds them.

``Market.expiry_queue`` holds the orders that arrive in ``(expiry, index)`` order (the default
lifetime, ``now + 28 days``) and the heap ``Market.expiries`` the rest (explicit expiries, orders
re-entering after a modify, time going backwards). Whatever the mix, a command that touches the
market must cancel (CANCELED_EXPIRED) exactly the resting orders whose expiry is before its time,
in ``(expiry, order index)`` order, and leave every other order resting. The model here is the
set of resting orders, read from the engine's own OrderUpdated events.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kit.engine import NOW, OK, Desk

from raydex.codecs import OrderStatus, OrderUpdated
from raydex.engine import DEFAULT_ORDER_LIFETIME_MS

DAY = 86_400_000
EXPIRED = OrderStatus.CANCELED_EXPIRED
ACTIVE = OrderStatus.ACTIVE_LIMIT

# One step: ("order", account, is_ask, ticks from the touch, lifetime or 0 for the default),
# ("modify", pick, size, ticks), ("cancel", pick), ("clock", ms: forward mostly, backward some).
# Lifetimes and clock steps are whole days around the default lifetime (28 days) so that
# expiries tie often, across the queue and the heap.
LIFETIMES = st.sampled_from([0, 0, 0, DAY, 2 * DAY, 27 * DAY, 28 * DAY, 29 * DAY, 30 * DAY])
CLOCK = st.sampled_from([-DAY, 0, DAY, 2 * DAY, 27 * DAY, 28 * DAY, 29 * DAY]) | st.integers(
    -DAY, 30 * DAY
)
STEPS = st.one_of(
    st.tuples(st.just("order"), st.integers(1, 3), st.integers(0, 1), st.integers(0, 5), LIFETIMES),
    st.tuples(st.just("modify"), st.integers(0, 50), st.integers(1, 6), st.integers(0, 5)),
    st.tuples(st.just("cancel"), st.integers(0, 50)),
    st.tuples(st.just("clock"), CLOCK),
)


class Book:
    """The resting orders of market 0 as the events say: index -> (expiry, account)."""

    def __init__(self) -> None:
        self.resting: dict[int, tuple[int, int]] = {}

    def follow(self, events: list[Any]) -> None:
        for e in events:
            if type(e) is OrderUpdated:
                if e.status == ACTIVE:
                    self.resting[e.order_index] = (e.order_expiry, e.account_index)
                else:
                    self.resting.pop(e.order_index, None)


def _price(is_ask: int, ticks: int) -> int:
    # bids at or below 10_000, asks at or above 10_001: some steps cross and fill
    return 10_001 + ticks - 1 if is_ask else 10_000 - ticks + 1


def _check(desk: Desk, book: Book) -> None:
    """The command just run touched market 0 at ``desk.now``: exactly the resting orders that
    were due are gone, each CANCELED_EXPIRED, in (expiry, index) order."""
    due = sorted((exp, i) for i, (exp, _) in book.resting.items() if exp < desk.now)
    got = [
        (e.order_expiry, e.order_index)
        for e in desk.events
        if type(e) is OrderUpdated and e.status == EXPIRED
    ]
    assert got == due
    book.follow(desk.events)
    assert all(exp >= desk.now for exp, _ in book.resting.values())


def _run(desk: Desk, book: Book, steps: list[tuple[Any, ...]]) -> None:
    for step in steps:
        kind = step[0]
        if kind == "clock":
            desk.now = max(NOW, desk.now + step[1])
            continue
        if kind == "order":
            _, account, is_ask, ticks, life = step
            desk.order(
                account,
                is_ask,
                1 + ticks,
                _price(is_ask, ticks),
                expiry=desk.now + life if life else 0,
            )
        elif book.resting:
            live = sorted(book.resting)
            index = live[step[1] % len(live)]
            account = book.resting[index][1]
            if kind == "modify":
                _, _, size, ticks = step
                desk.modify(account, index, size, 10_000 - ticks)
            else:
                desk.cancel(account, index)
        else:
            continue
        _check(desk, book)


@settings(max_examples=150, deadline=None)
@given(st.lists(STEPS, min_size=1, max_size=60))
def test_orders_expire_exactly_and_in_order_whatever_holds_them(steps: list[Any]) -> None:
    _run(Desk(), Book(), steps)


def test_an_order_due_on_the_heap_expires_while_the_queue_head_is_later() -> None:
    """A (28 days) is queued; B (1 day) and C (2 days) arrive out of order, on the heap. After B
    expires the next one due is C, not A: C expires on the next touch after its time."""
    _run(
        Desk(),
        Book(),
        [
            ("order", 1, 0, 0, 0),
            ("order", 2, 0, 1, DAY),
            ("order", 3, 0, 2, 2 * DAY),
            ("clock", DAY + DAY // 2),
            ("order", 1, 1, 5, 0),
            ("clock", DAY),
            ("order", 2, 1, 5, 0),
        ],
    )


def test_expiries_survive_compaction_and_a_snapshot_reload() -> None:
    """Thousands of orders (compaction runs several times: it starts at 1,024 entries), most with
    the default lifetime, some explicit, some modified, half cancelled; then a reload from the
    records and a clock past every expiry: all expire, in order, from either engine."""
    from raydex.engine import Engine

    desk = Desk()
    book = Book()
    for n in range(3_000):
        desk.now += 7 * (n % 3 == 0)  # three orders at a time: their default expiries tie
        account = 1 + n % 3
        life = 0 if n % 5 else DAY * (1 + n % 40)
        desk.order(account, 0, 1 + n % 4, 9_000 + n % 500, expiry=desk.now + life if life else 0)
        book.follow(desk.events)
        if n % 2:
            live = sorted(book.resting)
            victim = live[(n * 7919) % len(live)]
            desk.cancel(book.resting[victim][1], victim)
            book.follow(desk.events)
        if n % 11 == 0 and book.resting:
            index = max(book.resting)
            desk.modify(book.resting[index][1], index, 5, 8_999)
            book.follow(desk.events)
    assert len(book.resting) > 1_000
    reloaded = Desk.__new__(Desk)
    reloaded.__dict__.update(desk.__dict__)
    reloaded.eng = Engine.from_records(desk.eng.records())
    reloaded.events = []
    reloaded.nonces = dict(desk.nonces)
    due = sorted((exp, i) for i, (exp, _) in book.resting.items())
    later = desk.now + DEFAULT_ORDER_LIFETIME_MS + 41 * DAY
    for d in (desk, reloaded):
        d.now = later
        assert d.order(3, 1, 1, 14_000) == OK  # touches the market: every resting order is due
        expired = [
            (e.order_expiry, e.order_index)
            for e in d.events
            if type(e) is OrderUpdated and e.status == EXPIRED
        ]
        assert expired == due
    assert desk.eng.state_hash() == reloaded.eng.state_hash()


def test_orders_expire_in_order_step_by_step_after_compactions() -> None:
    """Compaction moves every live order onto the heap and restarts the queue; new orders then
    queue again. With thousands of orders (several compactions) and the clock stepping past a
    few expiries at a time, each touch expires exactly the due orders, in (expiry, index)
    order, across the heap and the queue."""
    desk = Desk()
    book = Book()
    for n in range(2_500):
        desk.now += 7 * (n % 3 == 0)
        life = 0 if n % 4 else DAY * (1 + n % 30)
        desk.order(
            1 + n % 3, n % 2, 1, _price(n % 2, 5 + n % 300), expiry=desk.now + life if life else 0
        )
        book.follow(desk.events)
        if n % 3 == 1:
            live = sorted(book.resting)
            victim = live[(n * 7919) % len(live)]
            desk.cancel(book.resting[victim][1], victim)
            _check(desk, book)
    assert len(book.resting) > 1_000
    steps = 0
    while len(book.resting) > 1 and steps < 5_000:  # each step expires >= 3 orders, adds 1
        # step to just past the next few expiries, then touch the market with a resting order
        due = sorted({exp for exp, _ in book.resting.values()})
        desk.now = due[min(2, len(due) - 1)] + 1
        desk.order(1 + steps % 3, steps % 2, 1, _price(steps % 2, 400), expiry=desk.now + DAY)
        _check(desk, book)
        steps += 1
    assert len(book.resting) <= 1
    assert steps > 10
