"""``execute`` answers every field value with a result code: out-of-range, negative and huge
integers, wrong-length keys, unknown markets and accounts never raise, and never break an invariant.
"""

from __future__ import annotations

import typing
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.engine import KEY, market

from raydex.codecs import (
    CreateOrder,
    Deposit,
    RegisterApiKey,
    ResultCode,
    Transaction,
)
from raydex.engine import Engine

NOW = 1_700_000_000_000
TX_CLASSES = typing.get_args(Transaction)
CODES = {int(c) for c in ResultCode}

INTS = st.one_of(
    st.integers(-3, 5),
    st.integers(0, 300),
    st.sampled_from([2**32 - 1, 2**32, 2**48 - 1, 2**48, 2**48 + 1, 2**63 - 1, 2**63, NOW]),
    st.integers(-(2**70), 2**70),
)
BYTES = st.one_of(st.binary(max_size=70), st.just(b"\x00" * 40), st.just(b"\x05" * 40))


def _field(py_type: Any) -> st.SearchStrategy[Any]:
    base = getattr(py_type, "__supertype__", py_type)
    if base is bytes:
        return BYTES
    if base is str:
        return st.text(max_size=20)
    return INTS


def _tx_strategy(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, *(_field(hints[name]) for name in cls._fields))  # type: ignore[attr-defined]


ANY_TX = st.one_of(*(_tx_strategy(c) for c in TX_CLASSES))


def _seeded() -> Engine:
    eng = Engine()
    setup: list[Any] = [
        market(0, symbol="A", maker_fee=10, taker_fee=20, liquidation_fee=30, mark_price=100),
        market(
            1,
            symbol="B",
            price_decimals=0,
            size_decimals=6,
            default_initial_margin_fraction=2_000,
            min_initial_margin_fraction=1_000,
            max_price_deviation=10_000,
            mark_price=3,
        ),
    ]
    for a in range(4):
        setup += [RegisterApiKey(a, 0, KEY), Deposit(a, 10**9)]
    for a in range(4):
        setup.append(
            CreateOrder(a, 0, a % 2, 1, 5, 100 + a, a % 2, 0, 1, 0, 0, 0, NOW, 0, b"\x00" * 80)
        )
    for cmd in setup:
        eng.execute(cmd, NOW, [])
    return eng


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ANY_TX, min_size=1, max_size=12), st.integers(0, 2**64))
def test_any_field_values_get_a_result_code_and_keep_the_state_valid(
    cmds: list[Any], now: int
) -> None:
    eng = _seeded()
    for cmd in cmds:
        out: list[Any] = []
        code = eng.execute(cmd, now, out)
        assert code in CODES
        eng.validate_internal_state()


def test_an_unknown_command_type_is_unsupported() -> None:
    eng = _seeded()
    out: list[Any] = []
    assert eng.execute(("not", "a", "tx"), NOW, out) == ResultCode.UNSUPPORTED_TX_TYPE
    assert out == []
