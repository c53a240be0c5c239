"""The replica's C apply loop (actors/replica/cache/_cacheloop.c) leaves every cache exactly as the
Python loop (``ReplicaState._apply_events``) does: the same books and sorted price lists, orders
and their indexes, accounts, keys, pending nonces, tx results in the same order, the same
``Applied`` per block, the same GC tracking of the records it keeps, and the same error on a block
that refers to a market the replica does not have."""

from __future__ import annotations

import gc
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raydex.actors.replica.cache import state as replica_state
from raydex.actors.replica.cache.state import CACHE_LOOP_ACCELERATED, ReplicaState
from raydex.codecs import (
    BalanceChanged,
    Block,
    LevelChanged,
    MarketStatsChanged,
    NonceUpdated,
    OrderStatus,
    OrderUpdated,
    PositionChanged,
    TradeExecuted,
    TxExecuted,
    decode_block,
)
from raydex.observability.bench.apply import build_stream

pytestmark = pytest.mark.skipif(
    not CACHE_LOOP_ACCELERATED, reason="built without a C compiler: apply_block is the Python loop"
)


@pytest.fixture(scope="module", params=[3, 11])
def stream(request: pytest.FixtureRequest) -> tuple[int, int, list[Any], list[Block]]:
    # 4,000 commands of the bench workload (300 accounts, 8 markets) after 3,000 of warm-up, in
    # blocks of 10 txs: orders placed, modified, filled and cancelled, trades, positions, funding
    _, seq, height, frames, records = build_stream(4_000, 3_000, 10, request.param, 300)
    return seq, height, records, [decode_block(f) for f in frames]


def _replay(
    stream: tuple[int, int, list[Any], list[Block]], use_c: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[ReplicaState, list[Any]]:
    seq, height, records, blocks = stream
    st = ReplicaState.from_records(records, seq, height)
    st.tx_results = 1_000  # fewer than the stream's txs: the oldest results are dropped
    # a third of the txs as if sent through this replica, some twice: their pending nonces are
    # cleared (or counted down) by their TxExecuted
    noted = 0
    for b in blocks:
        for ev in b.events:
            if type(ev) is TxExecuted and ev.nonce % 3 == 0:
                sent = SimpleNamespace(
                    account_index=ev.account_index, api_key_index=ev.api_key_index, nonce=ev.nonce
                )
                st.note_sent(sent)
                noted += 1
                if ev.nonce % 2 == 0:
                    st.note_sent(sent)
                    noted += 1
    assert st.pending_count() == noted > 1_000
    with monkeypatch.context() as m:
        if not use_c:
            m.setattr(replica_state, "_cacheloop", None)
        applied = [st.apply_block(b) for b in blocks]
    st.validate()
    return st, [(a.books, a.trades, a.accounts, a.txs) for a in applied]


def _caches(st: ReplicaState) -> dict[str, Any]:
    return {
        "accounts": {
            ai: (a.collateral, a.positions, a.orders, a.open_lots, a.cois, a.order_counts)
            for ai, a in st.accounts.items()
        },
        "orders": st.orders,
        "level_orders": st.level_orders,
        "api_keys": st.api_keys,
        "pending": st._pending,
        "tx_results": list(st.txs.items()),  # in order: the oldest are dropped first
        "books": (st._bids, st._asks, st._prices),
        "trades": {mi: list(rows) for mi, rows in st.trades.items()},
        "markets": st.markets,
        "exchange": (st.fee_pool, st.insurance_fund),
        "stats": {mi: repr(s) for mi, s in st.stats.items()},
        "records": list(st.records()),
    }


def test_the_c_loop_leaves_the_caches_as_the_python_loop_does(
    stream: tuple[int, int, list[Any], list[Block]], monkeypatch: pytest.MonkeyPatch
) -> None:
    c_state, c_applied = _replay(stream, True, monkeypatch)
    py_state, py_applied = _replay(stream, False, monkeypatch)
    assert sum(len(b.events) for b in stream[3]) > 10_000
    assert len(py_state.txs) == 1_000
    c_caches, py_caches = _caches(c_state), _caches(py_state)
    for name in py_caches:
        assert c_caches[name] == py_caches[name], name
    assert c_applied == py_applied
    # each tx noted twice is still pending once after its TxExecuted, the others not at all
    assert 0 < c_state.pending_count() == py_state.pending_count()
    # the records the caches keep are tracked by the collector alike (untracked as made)
    c_orders = list(c_state.orders.values())[:200] + list(c_state.api_keys.values())[:200]
    py_orders = list(py_state.orders.values())[:200] + list(py_state.api_keys.values())[:200]
    assert [gc.is_tracked(r) for r in c_orders] == [gc.is_tracked(r) for r in py_orders]
    assert [gc.is_tracked(r) for r in c_state.txs.values()] == [
        gc.is_tracked(r) for r in py_state.txs.values()
    ]
    assert [gc.is_tracked(m) for m in c_state.markets.values()] == [
        gc.is_tracked(m) for m in py_state.markets.values()
    ]


@pytest.mark.parametrize(
    "event",
    [
        LevelChanged(99, 0, 1_000, 5),  # a market the replica does not have
        OrderUpdated(99, 7, 1, 0, 0, 1_000, 5, 5, 0, 0, 0, 0, int(OrderStatus.ACTIVE_LIMIT), 1, 0),
        TradeExecuted(99, 1, 1_000, 1, 1, 2, 1, 2, 0, 0, 0),
        MarketStatsChanged(99, 1_000, 1_000, 5),
    ],
)
def test_both_loops_refuse_a_block_about_an_unknown_market_alike(
    stream: tuple[int, int, list[Any], list[Block]],
    monkeypatch: pytest.MonkeyPatch,
    event: Any,
) -> None:
    seq, height, records, _ = stream
    errors = []
    for use_c in (True, False):
        st = ReplicaState.from_records(records, seq, height)
        bad = Block(seq + 1, height + 1, 1, [event])
        with monkeypatch.context() as m:
            if not use_c:
                m.setattr(replica_state, "_cacheloop", None)
            with pytest.raises(KeyError) as info:
                st.apply_block(bad)
        errors.append(info.value.args)
    assert errors[0] == errors[1] == (99,)


# ---- synthetic blocks: the corners a realistic stream seldom reaches ----------------------------

ACTIVE = int(OrderStatus.ACTIVE_LIMIT)
ACCOUNTS = st.sampled_from([1, 2, 3, 250, 9_001])  # 9,001: not booted, made on first sight
small = st.integers(0, 6)
OWNERS = (1, 2, 3, 250, 9_001)
order_updates = st.builds(
    lambda oi, coi, ask, px, rem, ro, live: OrderUpdated(
        oi % 2,
        oi,
        OWNERS[oi % 5],
        coi,
        ask,
        px,
        rem + 1,
        rem,
        0,
        0,
        1,
        ro,
        ACTIVE if live else 2,
        oi,
        oi * 3,  # order version
    ),
    # order index (its market and account fixed, as the engine keeps them): updated, moved to
    # another price or side, dropped, made again
    st.integers(1, 6),
    st.sampled_from([0, 0, 5, 6]),  # client order index, shared by some
    st.integers(0, 1),  # side: an update may move an order across
    st.integers(1, 4).map(lambda p: 1_000 * p),
    st.integers(0, 3),  # remaining 0: dropped like a cancel
    st.integers(0, 1),  # reduce-only orders rest too, outside the open lots
    st.booleans(),
)
events = st.one_of(
    order_updates,
    order_updates,  # the order paths have the most branches: drawn three times as often
    order_updates,
    st.builds(
        LevelChanged, st.integers(0, 1), st.integers(0, 1), small.map(lambda p: 500 * p), small
    ),
    st.builds(
        TxExecuted,
        st.binary(min_size=40, max_size=40),
        st.just(14),
        ACCOUNTS,
        st.integers(0, 3),
        st.integers(0, 3),
        st.just(0),
    ),
    st.builds(NonceUpdated, ACCOUNTS, st.integers(0, 3), st.integers(0, 9)),
    st.builds(BalanceChanged, ACCOUNTS, st.integers(-5, 5)),
    st.builds(
        PositionChanged,
        ACCOUNTS,
        st.integers(0, 1),
        small,
        small,
        small,
        small,
        st.just(1),
        st.just(0),
    ),
    st.builds(
        lambda mi, tid, a, b: TradeExecuted(mi, tid, 1_000, 1, a, b, 1, 2, 0, 0, 0),
        st.integers(0, 1),
        st.integers(1, 10**6),
        ACCOUNTS,
        ACCOUNTS,
    ),
    st.builds(MarketStatsChanged, st.integers(0, 1), small, small, small),
)


@pytest.fixture(scope="module")
def small_boot() -> tuple[int, int, list[Any]]:
    _, seq, height, _, records = build_stream(100, 100, 10, 1, 300)
    return seq, height, records


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    blocks=st.lists(st.lists(events, max_size=40), min_size=1, max_size=4), pending=st.booleans()
)
@example(  # a tx hash seen again keeps its place among the results kept (oldest dropped first)
    blocks=[
        [TxExecuted(bytes([h]) * 40, 14, 1, 0, 0, 0) for h in (1, 2, 1, 3)],
        [TxExecuted(bytes([h]) * 40, 14, 1, 0, 0, 0) for h in (4, 2)],
    ],
    pending=False,
)
@example(  # an order that moves to the other side at the same price leaves its old level
    blocks=[[OrderUpdated(0, 4, 250, 0, s, 2_000, 3, 2, 0, 0, 1, 0, ACTIVE, 4, 7) for s in (0, 1)]],
    pending=False,
)
def test_both_loops_agree_on_synthetic_blocks(
    small_boot: tuple[int, int, list[Any]],
    monkeypatch: pytest.MonkeyPatch,
    blocks: list[list[Any]],
    pending: bool,
) -> None:
    seq, height, records = small_boot
    caches = []
    for use_c in (True, False):
        st_ = ReplicaState.from_records(records, seq, height)
        st_.tx_results = 3
        if pending:  # some of the blocks' txs as if sent through here
            for b in blocks:
                for ev in b:
                    if type(ev) is TxExecuted:
                        st_.note_sent(
                            SimpleNamespace(
                                account_index=ev.account_index,
                                api_key_index=ev.api_key_index,
                                nonce=ev.nonce,
                            )
                        )
        applied: list[Any] = []
        # fresh events per loop, GC-tracked as built in Python: each loop untracks them itself
        fresh = [[type(ev)(*ev) for ev in evs] for evs in blocks]
        with monkeypatch.context() as m:
            if not use_c:
                m.setattr(replica_state, "_cacheloop", None)
            for i, evs in enumerate(fresh):
                a = st_.apply_block(Block(seq + 1 + i, height + 1 + i, 10**15, evs))
                applied.append((a.books, a.trades, a.accounts, a.txs))
        caches.append((_caches(st_), applied, _tracking(st_, fresh, applied)))
    assert caches[0] == caches[1]


def _tracking(st_: ReplicaState, blocks: list[list[Any]], applied: list[Any]) -> list[bool]:
    """Whether the collector tracks each event and each record the caches and blocks keep."""
    kept: list[Any] = [ev for evs in blocks for ev in evs]
    for _, trades, _, txs in applied:
        kept += txs
        kept += [row for rows in trades.values() for row in rows]
    kept += list(st_.orders.values()) + list(st_.api_keys.values()) + list(st_.markets.values())
    kept += [p for ai in sorted(st_.accounts) for p in st_.accounts[ai].positions.values()]
    return [gc.is_tracked(r) for r in kept]


def test_the_day_stats_count_every_trade_of_every_block(
    stream: tuple[int, int, list[Any], list[Block]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # counted once per market per block after the loop (ReplicaState._count_trades): the same
    # figures as folding the trades one by one, in block order
    seq, height, records, blocks = stream
    booted = ReplicaState.from_records(records, seq, height)
    want = {mi: [s.day, s.trades, s.base_volume, s.quote_volume, s.first_price, s.high, s.low]
            for mi, s in booted.stats.items()}  # fmt: skip
    for b in blocks:
        day = b.timestamp_ns // 1_000_000 // 86_400_000
        for ev in b.events:
            if type(ev) is TradeExecuted:
                w = want[ev.market_index]
                if w[0] != day:
                    w[:] = [day, 0, 0, 0, ev.price, ev.price, ev.price]
                w[1] += 1
                w[2] += ev.size
                w[3] += ev.size * ev.price
                w[5], w[6] = max(w[5], ev.price), min(w[6], ev.price)
    st_, _ = _replay(stream, True, monkeypatch)
    got = {mi: [s.day, s.trades, s.base_volume, s.quote_volume, s.first_price, s.high, s.low]
           for mi, s in st_.stats.items()}  # fmt: skip
    assert sum(w[1] for w in want.values()) > 100
    assert got == want
