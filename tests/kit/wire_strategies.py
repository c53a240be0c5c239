"""Hypothesis strategies derived from the ``@wire`` registry (test support; needs ``hypothesis``).

Not imported by ``raydex.codecs``: production code never pays for Hypothesis. Every strategy is
derived from the declarations, so a new field or type is covered without touching the tests.

- :func:`field_values`: one field's values: integers within its ``Range`` extra (or its whole C
  type with ``respect_ranges=False``), exact-length bytes, NUL-free ASCII up to the symbol width.
- :func:`wire_values`: instances of one wire type; :func:`family_values`: of any type of a family.
- :func:`blocks`: ``(seq, height, timestamp_ns, events)`` tuples for the block codecs.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from raydex.codecs import (  # importing raydex.codecs registers every layout
    BY_CLASS,
    EVENT,
    GROUPED_FIRST_SLOT,
    REGISTRY,
    CreateGroupedOrders,
    FieldSpec,
    field_format,
    grouped_orders,
    grouped_slots,
    int_bounds,
)

_SYMBOL_CHARS = st.characters(min_codepoint=1, max_codepoint=127)


def field_values(field: FieldSpec, *, respect_ranges: bool = True) -> st.SearchStrategy[Any]:
    """Values of one wire field (see module docstring)."""
    fmt = field_format(field.construct)
    bounds = int_bounds(fmt)
    if bounds is not None:
        lo, hi = bounds
        r = field.range
        if respect_ranges and r is not None:
            lo, hi = max(lo, r.lo), min(hi, r.hi)
        # Edges matter most for codecs: mix the bounds in explicitly.
        return st.one_of(st.sampled_from([lo, hi]), st.integers(lo, hi))
    n = int(fmt[:-1])
    if field.py_type is str:
        return st.text(_SYMBOL_CHARS, max_size=n)
    return st.binary(min_size=n, max_size=n)


def wire_values(cls: type, *, respect_ranges: bool = True) -> st.SearchStrategy[Any]:
    """Instances of one registered wire type (a CreateGroupedOrders in its canonical form:
    the slots past its ``order_count`` zero, ``codecs.grouped_canonical``)."""
    fields = BY_CLASS[cls].fields
    parts = [field_values(f, respect_ranges=respect_ranges) for f in fields]
    values = st.tuples(*parts).map(cls._make)  # type: ignore[attr-defined]
    return values.map(_zero_unused_slots) if cls is CreateGroupedOrders else values


def _zero_unused_slots(tx: Any) -> Any:
    return type(tx)(*tx[:GROUPED_FIRST_SLOT], *grouped_slots(grouped_orders(tx)), *tx[-3:])


def family_values(family: str, *, respect_ranges: bool = True) -> st.SearchStrategy[Any]:
    """Instances of any registered type of ``family`` (``"tx"``, ``"event"``, ``"record"``)."""
    return st.one_of(
        [wire_values(s.cls, respect_ranges=respect_ranges) for s in REGISTRY[family].values()]
    )


_U64 = st.integers(0, 2**64 - 1)


def blocks(max_events: int = 40) -> st.SearchStrategy[tuple[int, int, int, list[Any]]]:
    """``(seq, height, timestamp_ns, events)`` with any mix of registered events."""
    return st.tuples(_U64, _U64, _U64, st.lists(family_values(EVENT), max_size=max_events))
