"""Result codes and order values have one source, ``raydex.codecs``: the engine's fast-path ints
(``raydex.engine.codes``) are the enum members of the same name, and no engine module retypes a
result code as a literal."""

from __future__ import annotations

import ast
from enum import IntEnum
from pathlib import Path

import raydex.engine
from raydex import codecs as C
from raydex.codecs import (
    GroupingType,
    OrderStatus,
    OrderType,
    ResultCode,
    SelfTradeBehavior,
    SelfTradeEquality,
    TimeInForce,
    TriggerStatus,
)
from raydex.engine import codes

#: Engine names that differ from their enum member's name.
ALIASES = {
    "IOC": "IMMEDIATE_OR_CANCEL",
    "GTT": "GOOD_TILL_TIME",
    "ST_EXPIRE_MAKER": "EXPIRE_MAKER",
    "ST_EXPIRE_TAKER": "EXPIRE_TAKER",
    "ST_CANCEL_BOTH": "CANCEL_BOTH",
    "ST_REDUCE": "REDUCE",
    "ST_MASTER_ACCOUNT": "MASTER_ACCOUNT_INDEX",
}
ENUMS: tuple[type[IntEnum], ...] = (
    ResultCode,
    OrderStatus,
    OrderType,
    TimeInForce,
    SelfTradeBehavior,
    SelfTradeEquality,
)
#: Engine names of plain ``raydex.codecs`` constants (no enum): the same value.
CONSTANTS = {"ALL_MARKETS": C.ALL_MARKETS}
#: Engine names of members of an enum whose names another enum also has: the enum, the member.
QUALIFIED: dict[str, tuple[type[IntEnum], str]] = {
    "TRIGGER_NA": (TriggerStatus, "NA"),
    "TRIGGER_READY": (TriggerStatus, "READY"),
    "TRIGGER_MARK_PRICE": (TriggerStatus, "MARK_PRICE"),
    "TRIGGER_TWAP": (TriggerStatus, "TWAP"),
    "TRIGGER_PARENT_ORDER": (TriggerStatus, "PARENT_ORDER"),
    "OTO": (GroupingType, "ONE_TRIGGERS_THE_OTHER"),
    "OCO": (GroupingType, "ONE_CANCELS_THE_OTHER"),
    "OTOCO": (GroupingType, "ONE_TRIGGERS_A_ONE_CANCELS_THE_OTHER"),
}
ENGINE_DIR = Path(raydex.engine.__file__).parent


def _member(name: str) -> IntEnum:
    if name in QUALIFIED:
        enum, member = QUALIFIED[name]
        return enum[member]
    wanted = ALIASES.get(name, name)
    found = [e[wanted] for e in ENUMS if wanted in e.__members__]
    assert len(found) == 1, f"{name}: {len(found)} enum members of that name"
    return found[0]


def test_every_engine_constant_is_the_codecs_member_of_the_same_name_as_a_plain_int() -> None:
    assert codes.__all__
    for name in codes.__all__:
        value = getattr(codes, name)
        assert type(value) is int, f"{name} is {type(value).__name__}, not a plain int"
        want = CONSTANTS[name] if name in CONSTANTS else _member(name).value
        assert value == want, name


def test_the_result_codes_the_engine_returns_are_all_declared_in_codecs() -> None:
    declared = {c.value for c in ResultCode}
    for name in codes.__all__:
        if name in ResultCode.__members__:
            assert getattr(codes, name) in declared


def test_no_engine_module_writes_a_result_code_as_a_literal() -> None:
    result_codes = {c.value for c in ResultCode if c.value >= 20_000}
    offenders = []
    for path in sorted(ENGINE_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            is_int = isinstance(node, ast.Constant) and type(node.value) is int
            if is_int and node.value in result_codes:
                offenders.append(f"{path.name}:{node.lineno}: {node.value}")
    assert offenders == []
