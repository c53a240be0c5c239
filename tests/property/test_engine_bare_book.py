"""BareBook, the benchmark's matching-only floor, must match like the engine: the same random
add/cancel stream through a BareBook and through the engine (distinct accounts, so no self-trade
prevention) leaves the same levels and fills the same lots."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kit.engine import KEY, market

from raydex.codecs import CancelOrder, CreateOrder, Deposit, RegisterApiKey
from raydex.codecs import ResultCode as RC
from raydex.engine import Engine
from raydex.observability.bench.floors import BareBook

NOW = 1_700_000_000_000
SIG = b"\x00" * 80

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 1), st.integers(95, 105), st.integers(1, 9)),
        st.tuples(st.just("cancel"), st.integers(0, 60)),
    ),
    max_size=80,
)


def test_a_crossing_add_fills_in_price_time_order_and_rests_the_remainder() -> None:
    b = BareBook()
    assert b.add(1, True, 101, 3) == 0
    assert b.add(2, True, 100, 2) == 0
    assert b.add(3, True, 100, 2) == 0
    assert b.add(4, False, 101, 5) == 5
    assert b.levels(True, 10) == [(101, 2)]
    assert b.add(5, False, 102, 4) == 2
    assert b.levels(False, 10) == [(102, 2)] and b.levels(True, 10) == []


def test_cancel_removes_a_resting_order_once() -> None:
    b = BareBook()
    b.add(1, False, 99, 3)
    b.add(2, False, 99, 4)
    assert b.cancel(1) is True
    assert b.cancel(1) is False
    assert b.levels(False, 10) == [(99, 4)]
    assert b.cancel(2) is True
    assert b.levels(False, 10) == []


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_bare_book_and_engine_agree_on_the_same_stream(ops: list[Any]) -> None:
    eng = Engine()
    setup: list[Any] = [market(0, symbol="T", max_price_deviation=10_000, mark_price=100)]
    n_accounts = len(ops) + 1
    for a in range(n_accounts):
        setup += [RegisterApiKey(a, 0, KEY), Deposit(a, 10**15)]
    for cmd in setup:
        assert eng.execute(cmd, NOW, []) == RC.OK
    book = BareBook()
    owner: dict[int, int] = {}
    nonces = dict.fromkeys(range(n_accounts), 0)
    for i, op in enumerate(ops):
        if op[0] == "add":
            _, is_ask, price, size = op
            out: list[Any] = []
            nonces[i] += 1
            cmd = CreateOrder(i, 0, 0, i + 1, size, price, is_ask, 0, 1, 0, 0, 0, NOW, 0, SIG)
            assert eng.execute(cmd, NOW, out) == RC.OK
            filled = sum(e.size for e in out if type(e).__name__ == "TradeExecuted")
            assert book.add(i + 1, bool(is_ask), price, size) == filled
            owner[i + 1] = i
        else:
            oid = op[1]
            a = owner.get(oid, 0)
            code = eng.execute(CancelOrder(a, 0, 0, oid, NOW, nonces[a], SIG), NOW, [])
            nonces[a] += 1
            assert book.cancel(oid) == (code == RC.OK)
            if code == RC.OK:
                owner.pop(oid)
        for is_ask in (0, 1):
            assert book.levels(bool(is_ask), 50) == eng.book_levels(0, is_ask, 50)
