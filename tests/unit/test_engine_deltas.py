"""The engine writes its events as block bytes (``engine._deltas``): those bytes must be exactly
what the codec's own encoding of the same events gives, field by field and over a workload, and
``Engine.execute`` must hand back the same NamedTuples as before (decoded from them)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit.engine import Desk
from kit.workload import Workload

from raydex.codecs import (
    BalanceChanged,
    ConditionalOrderUpdated,
    CreateOrder,
    ExchangeBalancesChanged,
    LevelChanged,
    MarketStatsChanged,
    NonceUpdated,
    OrderUpdated,
    PositionChanged,
    PositionDeleveraged,
    PositionLiquidated,
    TradeExecuted,
    TxExecuted,
    decode_block,
    decode_body,
    encode_block,
    encode_block_body,
    encode_event,
)
from raydex.engine import Deltas, Engine

U8 = st.integers(0, 255)
U16 = st.integers(0, 2**16 - 1)
U32 = st.integers(0, 2**32 - 1)
U63 = st.integers(0, 2**63 - 1)  # the engine's Q fields never reach 2**63
I64 = st.integers(-(2**63), 2**63 - 1)

#: writer, its event class, and a strategy per field (the codec's layout, in order)
HOT: list[tuple[str, type, list[Any]]] = [
    ("level_changed", LevelChanged, [U8, U8, U32, U63]),  # (from a Level: _writer_args)
    (
        "order_updated",  # (written from an Order: see _order_args)
        OrderUpdated,
        [U8, U63, U63, U63, U8, U32, U63, U63, I64, U8, U8, U8, U8, U63, U63],
    ),
    ("trade_executed", TradeExecuted, [U8, U63, U32, U63, U63, U63, U63, U63, U8, I64, I64]),
    ("balance_changed", BalanceChanged, [U63, I64]),
    ("position_changed", PositionChanged, [U63, U8, I64, I64, I64, I64, U16, U8, I64]),
    ("nonce_updated", NonceUpdated, [U63, U8, I64]),
    ("market_stats_changed", MarketStatsChanged, [U8, U32, U32, U63]),
    ("exchange_balances_changed", ExchangeBalancesChanged, [I64, I64, I64, I64]),
    (
        "cond_updated",  # (written from a Cond: see _writer_args)
        ConditionalOrderUpdated,
        [
            *(U8, U63, U63, U63, U8, U32, U63, U63, I64, U8, U8, U8, U8, U8, U32, I64),
            *(U63, U63, U63, U63, I64, I64, U63),
        ],
    ),
]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_each_hot_writer_writes_what_the_codec_encodes(data: st.DataObject) -> None:
    """Any in-range values, the extremes included (u32 prices above 2**31, negative i64s); the
    tag byte is the codec's too."""
    for name, cls, fields in HOT:
        values = [data.draw(f) for f in fields]
        args = _writer_args(name, values)
        d = Deltas()
        getattr(d, name)(*args)
        getattr(d, name)(*args)
        assert d.count == 2
        count, body = d.take()
        assert (count, body) == (2, encode_event(cls(*values)) * 2), name
        assert d.take() == (0, b"")


def _model_types() -> tuple[type, ...]:
    """The engine's Order, Account, Market, Level and Position classes (private modules: taken
    from a live engine's objects rather than imported)."""
    d = Desk(accounts=(1,))
    assert d.buy(1, 1, 9_000) == 200
    o = next(iter(d.eng.state.orders.values()))
    assert d.mark(9_000) == 200
    assert d.trigger(1, 2, 1, 1, 7_000, 8_000, ro=0) == 200  # a stop-loss sell waiting
    [c] = d.eng.state.conds.values()
    return type(o), type(o.account), type(o.market), type(o.level), type(o.position), type(c)


ORDER, ACCOUNT, MARKET, LEVEL, POSITION, COND = _model_types()


def _writer_args(name: str, values: list[int]) -> tuple[Any, ...]:
    """The arguments of writer ``name`` for an event with these fields: the engine object it
    reads them from (with the status, for an order), or the fields themselves."""
    if name == "order_updated":
        mi, oi, ai, coi, is_ask, price, init, rem, expiry, otype, tif, ro, status, pr, ver = values
        m = MARKET(mi, "M", 2, 2)
        o = ORDER(oi, ACCOUNT(ai), coi, m, is_ask, price, init, expiry, otype, tif, ro, pr)
        o.remaining = rem
        o.version = ver
        return o, status
    if name == "cond_updated":
        mi, oi, ai, coi, is_ask, price, size, rem, expiry, otype, tif, ro = values[:12]
        status, tstatus, tprice, ttime, parent, kid0, kid1, sib, created, nxt, sl = values[12:]
        c = COND(oi, ACCOUNT(ai), MARKET(mi, "M", 2, 2), coi, is_ask, price, size, expiry,
                 otype, tif, ro, tprice, created)  # fmt: skip
        c.remaining, c.status, c.trigger_status, c.trigger_time = rem, status, tstatus, ttime
        c.parent_index, c.kid_indexes, c.sibling_index = parent, (kid0, kid1), sib
        c.next_slice, c.slice_index = nxt, sl
        return (c,)
    if name == "level_changed":
        mi, is_ask, price, size = values
        lvl = LEVEL(mi, is_ask, price)
        lvl.size = size
        return (lvl,)
    if name == "position_changed":
        ai, mi, size, entry, realized, funding, imf, mode, allocated = values
        p = POSITION(ACCOUNT(ai), MARKET(mi, "M", 2, 2), imf)
        p.size, p.entry_quote, p.realized_pnl, p.funding_paid = size, entry, realized, funding
        p.margin_mode, p.allocated = mode, allocated
        return (p,)
    return tuple(values)


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=40, max_size=40), U8, U63, U8, I64, U32, U32)
def test_tx_executed_and_its_code_set_afterwards(
    h: bytes, ttype: int, account: int, key: int, nonce: int, code: int, first: int
) -> None:
    d = Deltas()
    d.balance_changed(1, 2)  # not at the start of the buffer
    at = d.tx_executed(h, ttype, account, key, nonce, first)
    d.set_code(at, code)
    d.nonce_updated(account, key, nonce)
    want = [BalanceChanged(1, 2), TxExecuted(h, ttype, account, key, nonce, code)]
    want.append(NonceUpdated(account, key, nonce))
    assert d.take() == (3, b"".join(encode_event(e) for e in want))


def test_a_cold_event_goes_through_the_codec() -> None:
    d = Deltas()
    ev = TxExecuted(b"\x07" * 40, 14, 5, 1, 9, 21_120)
    d.event(ev)
    count, body = d.take()
    assert decode_body(body, count) == [ev]


def _stream(conditional: int = 0) -> list[tuple[Any, int]]:
    w = Workload(
        accounts=60, markets=3, seed=11, oracle_every=40, oracle_step=60, funding_every=1500,
        conditional=conditional, ms_per_8=400 if conditional else 1,
    )  # fmt: skip
    return [*w.setup(), *w.commands(6_000)]


@pytest.mark.parametrize("conditional", [0, 12], ids=["plain", "conditional"])
def test_execute_into_writes_the_blocks_the_tuple_events_encode_to(conditional: int) -> None:
    """Two engines, one stream: blocks of 7 commands built from ``execute_into``'s bytes are
    byte for byte the blocks ``encode_block`` makes of ``execute``'s NamedTuples, and decode to
    them; the codes agree and so do the final states (liquidations in the plain stream,
    ``ConditionalOrderUpdated`` in the conditional one)."""
    stream = _stream(conditional)
    a, b = Engine(), Engine()
    kinds: set[type] = set()
    for start in range(0, len(stream), 7):
        events: list[Any] = []
        for cmd, now in stream[start : start + 7]:
            out: list[Any] = []
            code = a.execute(cmd, now, out)
            assert b.execute_into(cmd, now) == code
            events += out
        kinds.update(type(e) for e in events)
        count, body = b.take_deltas()
        frame = encode_block_body(start, start, 0, count, body)
        assert frame == encode_block(start, start, 0, events)
        assert decode_block(frame).events == events
    assert a.state_hash() == b.state_hash()
    assert {LevelChanged, OrderUpdated, TradeExecuted, PositionChanged, MarketStatsChanged} <= kinds
    if conditional:
        assert ConditionalOrderUpdated in kinds
    else:
        assert {PositionLiquidated, PositionDeleveraged} <= kinds


def test_execute_decodes_its_own_events_and_leaves_an_open_block_alone() -> None:
    """``execute`` (NamedTuples) between ``execute_into`` calls: the open block keeps exactly the
    ``execute_into`` commands' bytes, in order."""
    stream = _stream()
    eng, ref = Engine(), Engine()
    for cmd, now in stream[:400]:
        eng.execute(cmd, now, [])
        ref.execute(cmd, now, [])
    want: list[Any] = []
    for i, (cmd, now) in enumerate(stream[400:700]):
        if i % 3:
            eng.execute_into(cmd, now)
            ref.execute(cmd, now, want)
        else:
            got: list[Any] = []
            eng.execute(cmd, now, got)
            mine: list[Any] = []
            ref.execute(cmd, now, mine)
            assert got == mine
    count, body = eng.take_deltas()
    assert count > 100 and decode_body(body, count) == want


def test_last_order_index_is_the_order_a_create_order_made() -> None:
    stream = _stream()
    eng = Engine()
    made = 0
    for cmd, now in stream:
        before = eng.last_order_index
        out: list[Any] = []
        eng.execute(cmd, now, out)
        if type(cmd) is CreateOrder and eng.last_order_index != before:
            mine = [
                e for e in out if type(e) is OrderUpdated and e.order_index == eng.last_order_index
            ]
            assert mine and mine[-1].account_index == cmd.account_index
            made += 1
    assert made > 1_000
