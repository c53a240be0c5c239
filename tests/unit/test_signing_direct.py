"""A tx's message hash read straight from its tuple (``message_hash_of``'s direct path) is the
hash of its Lighter JSON (``lighter_info`` + ``signing.message_hash``, the reference), for every
signed tx type and every value its layout can hold, attributes and SkipNonce included."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from raydex.codecs import (
    BY_CLASS,
    DEFAULT_CHAIN_ID,
    OrderType,
    codec_of,
    field_format,
    int_bounds,
    is_signed_type,
    lighter_info,
    message_hash_of,
    signing,
)

SIGNED = sorted((c for c in BY_CLASS if is_signed_type(c)), key=lambda c: c.__name__)


def reference(tx: Any, chain_id: int) -> bytes:
    tx_type, info = lighter_info(tx)
    return signing.message_hash(tx_type, info, chain_id)


def field_values(f: Any) -> st.SearchStrategy[Any]:
    fmt = field_format(f.construct)
    bounds = int_bounds(fmt)
    if bounds is None:
        return st.binary(min_size=int(fmt[:-1]), max_size=int(fmt[:-1]))
    lo, hi = bounds
    edges = [v for v in (lo, hi, 0, 1, -1, 2**31, 2**32 - 1, 2**32, 2**62) if lo <= v <= hi]
    if f.attribute is not None:  # mostly nil: most txs set no attribute
        edges = [f.attribute.nil] * 4 + edges
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


def txs_of(cls: type) -> st.SearchStrategy[Any]:
    return st.tuples(*(field_values(f) for f in codec_of(cls).spec.fields)).map(
        lambda values: cls(*values)
    )


@settings(max_examples=60, deadline=None)
@given(data=st.data(), chain_id=st.sampled_from([DEFAULT_CHAIN_ID, 300, 2**32 - 1]))
def test_the_direct_hash_is_the_reference_hash_for_every_signed_type(
    data: st.DataObject, chain_id: int
) -> None:
    for cls in SIGNED:
        tx = data.draw(txs_of(cls), label=cls.__name__)
        try:
            want: bytes | Exception = reference(tx, chain_id)
        except (KeyError, ValueError) as exc:  # e.g. grouped slots past the count
            want = exc
        if isinstance(want, bytes):
            assert message_hash_of(tx, chain_id) == want, tx
        else:
            try:
                got = message_hash_of(tx, chain_id)
            except type(want):
                continue
            raise AssertionError(f"{tx}: the reference refused it ({want!r}), got {got!r}")


def test_a_field_holding_an_int_enum_or_a_bool_is_read_as_the_reference_reads_it() -> None:
    cls = next(c for c in SIGNED if c.__name__ == "CreateOrder")
    spec = codec_of(cls).spec.fields
    base = cls(*(bytes(80) if f.name == "sig" else 1 for f in spec))
    as_enum = base._replace(order_type=OrderType.LIMIT, nonce=7)
    assert message_hash_of(as_enum) == reference(as_enum, DEFAULT_CHAIN_ID)
    assert message_hash_of(as_enum) == message_hash_of(as_enum._replace(order_type=0))
    as_bool = base._replace(order_type=True, nonce=7)
    try:
        reference(as_bool, DEFAULT_CHAIN_ID)
    except ValueError:
        refused = True
    else:
        refused = False
    assert refused  # Lighter's JSON has numbers: a bool is refused by both paths
    try:
        message_hash_of(as_bool)
    except ValueError:
        return
    raise AssertionError("the direct path took a bool the reference refuses")
