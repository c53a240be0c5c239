"""The snapshot holder's state is a fold of the blocks' events: it equals the engine's state (by
state hash and record by record) without executing a single tx."""

from __future__ import annotations

from typing import Any

from kit.engine import IOC, POST_ONLY, Desk, market
from kit.workload import Workload

from raydex.actors.snapshot.deltas import DeltaState
from raydex.codecs import (
    FundingRecord,
    FundingTick,
    L1Deposit,
    decode_block,
    encode_block,
    generate_key,
)
from raydex.engine import Engine


def test_folding_a_long_workloads_blocks_gives_the_engines_state_after_every_block() -> None:
    eng, st = Engine(), DeltaState()
    w = Workload(accounts=300, markets=4, seed=7, oracle_every=40, funding_every=1500)
    stream = [*w.setup(), *w.commands(12_000)]
    checked = blocks = 0
    i = 0
    size = 1
    while i < len(stream):
        events: list[Any] = []
        for cmd, now in stream[i : i + size]:
            eng.execute(cmd, now, events)
        i += size
        size = size % 37 + 1  # blocks of 1..37 commands
        # through the wire, as the holder receives them
        st.apply(decode_block(encode_block(i, i, 0, events)).events)
        blocks += 1
        if blocks % 4 == 0 or i >= len(stream):
            assert st.state_hash() == eng.state_hash(), f"after command {i}"
            checked += 1
    assert list(st.records()) == list(eng.records())
    assert checked > 100 and len(st.orders) > 0 and eng.insurance_fund != 0


def test_every_kind_of_state_change_reaches_the_deltas() -> None:
    desk = Desk(
        accounts=(1, 2, 3), markets=(market(0), market(1, default_initial_margin_fraction=2000))
    )
    st = DeltaState.from_records(desk.eng.records())

    def check(code: int, want: int = 200) -> None:
        assert code == want
        st.apply(desk.events)
        assert st.state_hash() == desk.eng.state_hash()

    check(desk.sell(1, 10, 10_100, coi=7))  # rests: a position row appears in market 0
    rest = desk.last_order_index()
    check(desk.buy(2, 4, 10_100))  # partial fill: trade id, fees, positions
    check(desk.sell(3, 2, 9_000, ro=1, m=1), 21732)  # rejected: no position in market 1
    assert desk.eng.position(3, 1) is None
    check(desk.buy(3, 1, 10_200, tif=POST_ONLY), 21807)  # would cross: cancelled, priority used
    check(desk.modify(1, rest, 12, 10_100))  # grows: re-entered with a new priority
    check(desk.modify(1, desk.last_order_index(), 11, 10_100))  # shrinks in place
    check(desk.sell(2, 3, 10_300, m=1))
    check(desk.buy(1, 1, 10_300, m=1, tif=IOC))
    check(desk.leverage(2, 1500, m=1))
    check(desk.transfer(3, 1, 5_000_000))
    check(desk.withdraw(2, 7_000_000))  # totals of the exchange ledger
    check(desk.deposit(9, 1_000_000))  # a new account
    check(desk.run(L1Deposit(b"\x42" * 20, 3_000_000)))  # a new account with its L1 address
    check(desk.run(L1Deposit(b"\x42" * 20, 1_000_000)))  # the same account, credited
    check(desk.change_key(1, 3, generate_key()[1]))  # a new key: nonce -1, then its pub key
    check(desk.mark(10_400))
    check(desk.funding(30_000))
    check(desk.cancel_all(1))
    assert list(st.records()) == list(desk.eng.records())


def test_funding_clocks_are_folded_from_the_events_across_minutes_and_an_hour_mark() -> None:
    desk = Desk(accounts=(1, 2, 3), markets=(market(0),))
    check_from = DeltaState.from_records(desk.eng.records())
    for place in (lambda: desk.sell(1, 10, 10_100), lambda: desk.buy(3, 2, 10_000)):
        assert place() == 200  # a book on both sides: a premium to sample
        check_from.apply(desk.events)
    start = desk.now
    for t in (0, 10, 60_000, 61_000, 3_600_000, 3_660_000, 7_300_000):
        desk.now = start + t
        assert desk.run(FundingTick(0)) == 200
        check_from.apply(decode_block(encode_block(1, 1, 0, desk.events)).events)
        assert check_from.state_hash() == desk.eng.state_hash(), f"after the tick at +{t} ms"
    clocks = [r for r in check_from.records() if type(r) is FundingRecord]
    assert len(clocks) == 1 and clocks[0].last_funding_ms > 0 and clocks[0].samples == 1
    assert list(check_from.records()) == list(desk.eng.records())


def test_a_state_loaded_from_records_gives_back_the_same_records() -> None:
    eng = Engine()
    w = Workload(accounts=50, markets=2, seed=2)
    for cmd, now in [*w.setup(), *w.commands(2_000)]:
        eng.execute(cmd, now, [])
    assert list(DeltaState.from_records(eng.records()).records()) == list(eng.records())


def test_folding_a_workload_with_conditional_orders_gives_the_engines_state() -> None:
    """Stop-loss / take-profit, grouped orders and TWAPs: the holder keeps each live one from
    its ``ConditionalOrderUpdated`` and drops it with its final status or its order's exit."""
    eng, st = Engine(), DeltaState()
    w = Workload(accounts=120, markets=2, seed=11, oracle_every=25, conditional=12, ms_per_8=400)
    stream = [*w.setup(), *w.commands(8_000)]
    live_seen = 0
    for i in range(0, len(stream), 9):
        events: list[Any] = []
        for cmd, now in stream[i : i + 9]:
            eng.execute(cmd, now, events)
        st.apply(decode_block(encode_block(i, i, 0, events)).events)
        assert st.state_hash() == eng.state_hash(), f"after command {i}"
        live_seen = max(live_seen, len(st.conds))
    assert list(st.records()) == list(eng.records())
    kinds = {type(e).__name__ for e in events}
    assert live_seen > 10, kinds
