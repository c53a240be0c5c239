"""The replica's C apply loop (actors/replica/_cacheloop.c) leaves every cache exactly as the Python
loop (``ReplicaState._apply_events``) does: the same books and sorted price lists, orders and their
indexes, accounts, keys, pending nonces, tx results in the same order, the same ``Applied`` per
block, the same GC tracking of the records it keeps, and the same error on a block that refers to
a market the replica does not have."""

from __future__ import annotations

import gc
from types import SimpleNamespace
from typing import Any

import pytest

from raydex.actors.replica import state as replica_state
from raydex.actors.replica.state import CACHE_LOOP_ACCELERATED, ReplicaState
from raydex.codecs import Block, LevelChanged, OrderStatus, OrderUpdated, TxExecuted, decode_block
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


@pytest.mark.parametrize(
    "event",
    [
        LevelChanged(99, 0, 1_000, 5),  # a market the replica does not have
        OrderUpdated(99, 7, 1, 0, 0, 1_000, 5, 5, 0, 0, 0, 0, int(OrderStatus.ACTIVE_LIMIT), 1),
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
