"""``rules.product``: the exact ``a * b`` on both sides of its machine-multiply bounds.

Compiled (the default build), ``product`` multiplies as ``i64`` while ``|a| < 2**41`` and
``|b| < 2**21``, or ``|a| < 2**48`` and ``|b| < 2**14`` (an amount times ``BPS``), and as Python
ints outside; an off-by-one bound or a wrong sign test would
overflow silently, so the edges are drawn on purpose. Interpreted it is ``operator.mul``.
"""

from __future__ import annotations

import operator

from hypothesis import example, given
from hypothesis import strategies as st

import raydex.engine
from raydex.engine import rules


def _around(bound: int) -> st.SearchStrategy[int]:
    edge = st.sampled_from([bound - 1, bound, bound + 1, -bound + 1, -bound, -bound - 1])
    return edge | st.integers(-2 * bound, 2 * bound) | st.integers(-(2**70), 2**70)


@given(_around(rules.WIDE), _around(rules.NARROW))
@example(rules.WIDE - 1, rules.NARROW - 1)
@example(-(rules.WIDE - 1), rules.NARROW - 1)
@example(-(rules.WIDE - 1), -(rules.NARROW - 1))
@example(2**62, 2**62)
def test_product_is_the_exact_product_on_both_sides_of_its_bounds(a: int, b: int) -> None:
    assert rules.product(a, b) == a * b


@given(_around(rules.WIDER), _around(rules.NARROWER))
@example(rules.WIDER - 1, rules.NARROWER - 1)
@example(-(rules.WIDER - 1), rules.NARROWER - 1)
@example(rules.WIDER - 1, -(rules.NARROWER - 1))
@example(rules.WIDER - 1, rules.BPS)
def test_product_is_exact_on_both_sides_of_its_second_tier(a: int, b: int) -> None:
    assert rules.product(a, b) == a * b


def test_the_interpreted_engine_multiplies_with_operator_mul() -> None:
    assert (rules.product is operator.mul) is not raydex.engine.COMPILED
