"""Determinism: the same commands give the same state hash; snapshot records round-trip exactly
and the restored engine behaves the same on further commands."""

from __future__ import annotations

from typing import Any

from kit.engine import KEY, market
from kit.workload import Workload

from raydex.codecs import (
    CancelOrder,
    CreateOrder,
    Deposit,
    RegisterApiKey,
    SetMarkPrice,
)
from raydex.codecs import ResultCode as RC
from raydex.engine import Engine

NOW = 1_700_000_000_000


def _run(eng: Engine, cmds: list[tuple[Any, int]]) -> list[tuple[int, list[Any]]]:
    results = []
    for cmd, now in cmds:
        out: list[Any] = []
        results.append((eng.execute(cmd, now, out), out))
    return results


def _stream(n: int, seed: int = 7) -> list[tuple[Any, int]]:
    w = Workload(accounts=40, markets=3, seed=seed)
    return list(w.setup()) + list(w.commands(n))


def test_the_same_commands_through_two_fresh_engines_give_the_same_hash_and_events() -> None:
    cmds = _stream(3_000)
    a, b = Engine(), Engine()
    assert _run(a, cmds) == _run(b, cmds)
    assert a.state_hash() == b.state_hash()
    a.validate_internal_state()


def test_different_histories_give_different_hashes() -> None:
    a, b = Engine(), Engine()
    _run(a, _stream(500, seed=1))
    _run(b, _stream(500, seed=2))
    assert a.state_hash() != b.state_hash()


def test_records_round_trip_to_an_engine_with_the_same_hash_and_the_same_future() -> None:
    cmds = _stream(4_000)
    live = Engine()
    _run(live, cmds[:2_500])
    restored = Engine.from_records(live.records())
    restored.validate_internal_state()
    assert restored.state_hash() == live.state_hash()
    assert list(restored.records()) == list(live.records())
    assert _run(restored, cmds[2_500:]) == _run(live, cmds[2_500:])
    assert restored.state_hash() == live.state_hash()


def test_a_snapshot_keeps_time_priority_inside_a_level() -> None:
    eng = Engine()
    sig = b"\x00" * 80
    setup: list[Any] = [
        market(0, symbol="ETH"),
    ]
    for a in (1, 2, 3):
        setup += [RegisterApiKey(a, 0, KEY), Deposit(a, 10**12)]
    for cmd in setup:
        assert eng.execute(cmd, NOW, []) == RC.OK
    for nonce, a in enumerate((1, 2)):
        order = CreateOrder(a, 0, 0, 0, 5, 9_900, 0, 0, 1, 0, 0, 0, NOW, 0, sig)
        assert eng.execute(order, NOW, []) == RC.OK, nonce
    restored = Engine.from_records(eng.records())
    taker = CreateOrder(3, 0, 0, 0, 5, 9_900, 1, 0, 0, 0, 0, 0, NOW, 0, sig)
    for e in (eng, restored):
        out: list[Any] = []
        assert e.execute(taker, NOW, out) == RC.OK
        assert [t.maker_account_index for t in out if type(t).__name__ == "TradeExecuted"] == [1]
    assert eng.state_hash() == restored.state_hash()
    cancel = CancelOrder(2, 0, 0, 1 << 48 | 1, NOW, 1, sig)
    assert eng.execute(cancel, NOW, []) == restored.execute(cancel, NOW, [])
    assert eng.execute(SetMarkPrice(0, 9_000), NOW, []) == RC.OK
    assert eng.state_hash() != restored.state_hash()


def test_conditional_orders_round_trip_and_replay_to_the_same_hash_and_future() -> None:
    """Waiting stop-loss / take-profit orders, grouped children, running TWAPs and fired orders
    on the book survive records and replay: same hash, same events after."""
    w = Workload(accounts=120, markets=2, seed=5, oracle_every=25, conditional=12, ms_per_8=400)
    cmds = list(w.setup()) + list(w.commands(6_000))
    live = Engine()
    _run(live, cmds[:4_000])
    assert live.state.conds, "the stream left conditional orders live"
    restored = Engine.from_records(live.records())
    restored.validate_internal_state()
    assert restored.state_hash() == live.state_hash()
    assert list(restored.records()) == list(live.records())
    assert _run(restored, cmds[4_000:]) == _run(live, cmds[4_000:])
    again = Engine()
    _run(again, cmds)
    assert again.state_hash() == live.state_hash()
