"""``raydex bench codecs``: encode/decode of a typical 200-delta block, six ways side by side.

- ``construct`` / ``construct_compiled``: the construct reference (``BLOCK_CONSTRUCT``, and its
  ``.compile()``), events turned into dicts and back into the wire NamedTuples;
- ``hot``: :func:`raydex.codecs.encode_block` / :func:`raydex.codecs.decode_block`;
- ``struct_floor``: a hand-written raw ``struct`` loop (a tag-indexed list of ``(unpack_from,
  size)`` at a running offset): no registry, no checks, plain tuples out; the floor.
  ``struct_floor_typed`` builds the same NamedTuples the hot codec returns, so the cost of typed
  objects shows apart from the cost of derivation;
- ``msgpack`` (msgspec, untyped decode) and ``pickle`` (protocol 5: what Ray would do).

Timing: timeit-style, GC off, samples of ~5 ms, 25 rounds that time every method in turn (so
background load hits all alike); the median per-call time in µs. The run takes seconds.
"""

from __future__ import annotations

import json
import pickle
import random
import statistics
import struct
import timeit
from collections.abc import Callable
from itertools import repeat, starmap
from typing import Any

import msgspec

from raydex.codecs import (
    BLOCK_CONSTRUCT,
    HEADER_SIZE,
    BalanceChanged,
    LevelChanged,
    NonceUpdated,
    OrderUpdated,
    PositionChanged,
    TradeExecuted,
    TxExecuted,
    decode_block,
    decode_block_reference,
    encode_block,
    encode_block_reference,
    spec_of,
)

METHODS = ("construct", "construct_compiled", "hot", "struct_floor", "msgpack", "pickle")
BLOCK_EVENTS = 200


def typical_events(n: int = BLOCK_EVENTS, seed: int = 7) -> list[Any]:
    """A realistic block body: per tx a TxExecuted and NonceUpdated, then what the tx caused.

    Mix: ~45% resting limit orders, ~35% cancels, ~20% taker fills (trade, two order updates, a
    level change, two balances, two positions).
    """
    rnd = random.Random(seed)
    out: list[Any] = []
    order_index = 1 << 48
    trade_id = 1
    while len(out) < n:
        acct, nonce = rnd.randrange(10_000), rnd.randrange(1, 10**6)
        market, price = rnd.randrange(8), 330_000 + rnd.randrange(-500, 500)
        size, is_ask = rnd.randrange(1, 10_000), rnd.randrange(2)
        kind = rnd.random()
        tx_type = 14 if kind < 0.45 or kind >= 0.8 else 15
        out.append(TxExecuted(rnd.randbytes(40), tx_type, acct, 0, nonce, 200))
        out.append(NonceUpdated(acct, 0, nonce))
        order_index += 1
        if kind < 0.8:  # rest or cancel: one order update and its level
            status = 2 if kind < 0.45 else 4
            out.append(
                OrderUpdated(
                    market,
                    order_index,
                    acct,
                    nonce,
                    is_ask,
                    price,
                    size,
                    size,
                    -1,
                    0,
                    1,
                    0,
                    status,
                    order_index,
                    0,
                )
            )
            out.append(LevelChanged(market, is_ask, price, rnd.randrange(0, 100_000)))
        else:  # taker fill
            maker = rnd.randrange(10_000)
            out.append(
                TradeExecuted(
                    market,
                    trade_id,
                    price,
                    size,
                    acct,
                    maker,
                    order_index,
                    order_index - 7,
                    is_ask,
                    50 * size,
                    10 * size,
                )
            )
            trade_id += 1
            out.append(
                OrderUpdated(
                    market,
                    order_index - 7,
                    maker,
                    3,
                    1 - is_ask,
                    price,
                    size,
                    0,
                    -1,
                    0,
                    1,
                    0,
                    3,
                    9,
                    0,
                )
            )
            out.append(
                OrderUpdated(
                    market, order_index, acct, nonce, is_ask, price, size, 0, -1, 1, 0, 0, 3, 9, 0
                )
            )
            out.append(LevelChanged(market, 1 - is_ask, price, rnd.randrange(0, 100_000)))
            out.append(BalanceChanged(acct, rnd.randrange(10**9)))
            out.append(BalanceChanged(maker, rnd.randrange(10**9)))
            out.append(PositionChanged(acct, market, -size, -size * price, 0, 0, 1000, 0, 0))
            out.append(PositionChanged(maker, market, size, size * price, 0, 0, 1000, 0, 0))
    return out[:n]


# ---- the struct floor: hand-written, no registry, no checks ----------------------------------

_FLOOR_CLASSES = (
    LevelChanged,
    OrderUpdated,
    TradeExecuted,
    BalanceChanged,
    PositionChanged,
    NonceUpdated,
    TxExecuted,
)
#: Layout formats written by hand (no tag); the floor's structs put the tag byte in front.
_FLOOR_FORMATS = {
    1: "BBIQ",  # LevelChanged
    2: "BQQQBIQQqBBBBQQ",  # OrderUpdated
    3: "BQIQQQQQBqq",  # TradeExecuted
    4: "Qq",  # BalanceChanged
    5: "QBqqqqHBq",  # PositionChanged
    6: "QBq",  # NonceUpdated
    13: "40sBQBqI",  # TxExecuted
}
_FLOOR_STRUCTS = {tag: struct.Struct("<B" + fmt) for tag, fmt in _FLOOR_FORMATS.items()}
_FLOOR_HEADER = struct.Struct("<QQQI")


def _floor_group(events: list[Any]) -> list[tuple[Callable[..., bytes], int, tuple[Any, ...]]]:
    """Pre-group events as (pack, tag, plain tuple): the floor's input, built outside the timing."""
    out = []
    for ev in events:
        tag = int(spec_of(type(ev)).tag)
        out.append((_FLOOR_STRUCTS[tag].pack, tag, tuple(ev)))
    return out


def floor_encode(seq: int, height: int, ts: int, items: list[Any]) -> bytes:
    parts = [_FLOOR_HEADER.pack(seq, height, ts, len(items))]
    append = parts.append
    for pack, tag, vals in items:
        append(pack(tag, *vals))
    return b"".join(parts)


def _floor_table(skip_tag: bool) -> list[Any]:
    """Tag-indexed list of (unpack_from, class, tag + layout size); None for unknown tags.

    ``skip_tag``: the layout is read with the tag as a pad byte ("x"), as the NamedTuples need.
    """
    table: list[Any] = [None] * 256
    for cls in _FLOOR_CLASSES:
        tag = int(spec_of(cls).tag)
        fmt = ("<x" if skip_tag else "<B") + _FLOOR_FORMATS[tag]
        table[tag] = (struct.Struct(fmt).unpack_from, cls, _FLOOR_STRUCTS[tag].size)
    return table


_FLOOR_DECODE = [None if e is None else (e[0], e[2]) for e in _floor_table(skip_tag=False)]
_FLOOR_DECODE_TYPED = _floor_table(skip_tag=True)


def floor_decode(buf: bytes) -> tuple[int, int, int, list[tuple[Any, ...]]]:
    """Plain tuples whose first value is the tag (dispatchable, every field present)."""
    seq, height, ts, count = _FLOOR_HEADER.unpack_from(buf, 0)
    table = _FLOOR_DECODE
    out: list[tuple[Any, ...]] = []
    append = out.append
    off = HEADER_SIZE
    for _ in repeat(None, count):
        unpack, size = table[buf[off]]
        append(unpack(buf, off))  # the tag stays as the tuple's first value: no slicing
        off += size
    return seq, height, ts, out


def floor_decode_typed(buf: bytes) -> tuple[int, int, int, list[Any]]:
    """The floor building the same NamedTuples as the hot codec, the cheapest way found: values
    and classes collected in the loop, NamedTuples built by ``starmap(tuple.__new__, zip(...))``
    (per-event ``tuple.__new__(cls, values)`` inside the loop is ~20% slower)."""
    seq, height, ts, count = _FLOOR_HEADER.unpack_from(buf, 0)
    table = _FLOOR_DECODE_TYPED
    classes: list[type] = []
    values: list[tuple[Any, ...]] = []
    add_class, add_values = classes.append, values.append
    off = HEADER_SIZE
    for _ in repeat(None, count):
        unpack, cls, size = table[buf[off]]
        add_class(cls)
        add_values(unpack(buf, off))
        off += size
    new: Callable[..., Any] = tuple.__new__
    return seq, height, ts, list(starmap(new, zip(classes, values, strict=True)))


# ---- timing -----------------------------------------------------------------------------------


def _medians_us(
    fns: dict[str, Callable[[], object]], target_s: float = 0.005, rounds: int = 25
) -> dict[str, float]:
    """Median per-call microseconds of each function, timed round-robin so that load from other
    processes lands on every method alike (ratios stay meaningful on a shared machine)."""
    numbers: dict[str, int] = {}
    for name, fn in fns.items():
        t0 = timeit.default_timer()
        fn()
        numbers[name] = max(1, int(target_s / max(timeit.default_timer() - t0, 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = timeit.timeit(fn, number=numbers[name])
            samples[name].append(t / numbers[name] * 1e6)
    return {name: round(statistics.median(v), 2) for name, v in samples.items()}


def run(json_out: bool = False) -> dict[str, Any]:
    """Measure, print (a table, or one JSON object when ``json_out``) and return the figures."""
    events = typical_events()
    seq, height, ts = 41_692_864, 1_000_000, 1_766_434_222_583_000_000
    compiled = BLOCK_CONSTRUCT.compile()
    grouped = _floor_group(events)
    blob = encode_block(seq, height, ts, events)
    tagged = [(int(spec_of(type(e)).tag), e) for e in events]
    mp_enc, mp_dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()
    mp_blob = mp_enc.encode((seq, height, ts, tagged))
    block = decode_block(blob)
    pk_blob = pickle.dumps(block, protocol=5)

    # Every method must agree on the bytes (or round-trip) before it is timed.
    assert encode_block_reference(seq, height, ts, events) == blob
    assert encode_block_reference(seq, height, ts, events, compiled=compiled) == blob
    assert floor_encode(seq, height, ts, grouped) == blob
    assert decode_block_reference(blob) == block == decode_block_reference(blob, compiled=compiled)
    assert [tuple(e) for e in block.events] == [v[1:] for v in floor_decode(blob)[3]]
    assert floor_decode_typed(blob)[3] == events

    encoders: dict[str, Callable[[], object]] = {
        "construct": lambda: encode_block_reference(seq, height, ts, events),
        "construct_compiled": lambda: encode_block_reference(
            seq, height, ts, events, compiled=compiled
        ),
        "hot": lambda: encode_block(seq, height, ts, events),
        "struct_floor": lambda: floor_encode(seq, height, ts, grouped),
        "msgpack": lambda: mp_enc.encode(
            (seq, height, ts, [(int(spec_of(type(e)).tag), e) for e in events])
        ),
        "pickle": lambda: pickle.dumps(block, protocol=5),
    }
    decoders: dict[str, Callable[[], object]] = {
        "construct": lambda: decode_block_reference(blob),
        "construct_compiled": lambda: decode_block_reference(blob, compiled=compiled),
        "hot": lambda: decode_block(blob),
        "struct_floor": lambda: floor_decode(blob),
        "msgpack": lambda: mp_dec.decode(mp_blob),
        "pickle": lambda: pickle.loads(pk_blob),
    }
    timed = _medians_us(
        {
            **{f"enc:{k}": f for k, f in encoders.items()},
            **{f"dec:{k}": f for k, f in decoders.items()},
            "dec:struct_floor_typed": lambda: floor_decode_typed(blob),
        }
    )
    enc = {name: timed[f"enc:{name}"] for name in METHODS}
    dec = {name: timed[f"dec:{name}"] for name in METHODS}
    typed_floor = timed["dec:struct_floor_typed"]
    result: dict[str, Any] = {
        "block_events": len(events),
        "block_bytes": len(blob),
        "block_decode_us": dec,
        "block_encode_us": enc,
        "struct_floor_typed_decode_us": typed_floor,
        "ratios": {
            "decode_hot_over_struct_floor": round(dec["hot"] / dec["struct_floor"], 2),
            "decode_hot_over_struct_floor_typed": round(dec["hot"] / typed_floor, 2),
            "decode_struct_floor_typed_over_struct_floor": round(
                typed_floor / dec["struct_floor"], 2
            ),
            "decode_construct_over_hot": round(dec["construct"] / dec["hot"], 1),
            "encode_hot_over_struct_floor": round(enc["hot"] / enc["struct_floor"], 2),
            "encode_construct_over_hot": round(enc["construct"] / enc["hot"], 1),
        },
        "sizes_bytes": {"binary": len(blob), "msgpack": len(mp_blob), "pickle": len(pk_blob)},
    }
    if json_out:
        print(json.dumps(result))
    else:
        _print_table(result)
    return result


def _print_table(r: dict[str, Any]) -> None:
    print(
        f"block of {r['block_events']} events, {r['block_bytes']} bytes "
        f"(msgpack {r['sizes_bytes']['msgpack']}, pickle {r['sizes_bytes']['pickle']})"
    )
    print(f"{'method':<20}{'decode us':>12}{'encode us':>12}")
    for name in METHODS:
        print(f"{name:<20}{r['block_decode_us'][name]:>12.1f}{r['block_encode_us'][name]:>12.1f}")
    print(f"{'struct_floor_typed':<20}{r['struct_floor_typed_decode_us']:>12.1f}{'-':>12}")
    for k, v in r["ratios"].items():
        print(f"  {k}: {v}")


if __name__ == "__main__":
    import sys

    run(json_out="--json" in sys.argv[1:])
