"""The benchmark workload: deterministic, valid transactions, a realistic mix, and (run through the
real engine) a sane spread of result codes with the engine's invariants intact."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydex.codecs import (
    FIRST_ORDER_INDEX,
    ApplyFunding,
    CancelAllOrders,
    CancelOrder,
    CreateGroupedOrders,
    CreateMarket,
    CreateOrder,
    Deposit,
    ModifyOrder,
    OrderType,
    PositionLiquidated,
    RegisterApiKey,
    ResultCode,
    SetMarkPrice,
    TimeInForce,
    TradeExecuted,
    Transaction,
    Transfer,
    UpdateLeverage,
    Withdraw,
    grouped_orders,
)
from raydex.engine import Engine
from raydex.observability.loadtest.workload import (
    ADD,
    CANCEL,
    MARKETS,
    START_MS,
    Chunk,
    Workload,
    WorkloadConfig,
)

SMALL = {"accounts": 400, "market_makers": 40, "levered": 8}


def _generate(cfg: WorkloadConfig) -> tuple[Chunk, list[Chunk]]:
    w = Workload(cfg)
    return w.setup(), list(w.chunks())


def _stream(chunks: list[Chunk]) -> list[Transaction]:
    return [c for ch in chunks for c in ch.commands]


def _signed(cmds: list[Transaction]) -> list[Any]:
    return [c for c in cmds if hasattr(c, "nonce")]


def test_the_same_seed_generates_the_same_commands_times_and_bare_ops() -> None:
    cfg = WorkloadConfig(seed=7, commands=3_000, chunk_size=1_000, **SMALL)
    assert _generate(cfg) == _generate(cfg)


def test_a_different_seed_generates_a_different_stream() -> None:
    a = _stream(_generate(WorkloadConfig(seed=1, commands=2_000, **SMALL))[1])
    b = _stream(_generate(WorkloadConfig(seed=2, commands=2_000, **SMALL))[1])
    assert a != b


def test_chunks_hold_exactly_the_requested_commands_even_across_scheduled_bursts() -> None:
    cfg = WorkloadConfig(commands=2_500, chunk_size=1_000, levered_open_at=990, **SMALL)
    _, chunks = _generate(cfg)
    assert [len(ch.commands) for ch in chunks] == [1_000, 1_000, 500]
    assert all(len(ch.now_ms) == len(ch.commands) for ch in chunks)


def test_setup_creates_eight_markets_with_realistic_decimals_and_funds_every_account() -> None:
    cfg = WorkloadConfig(commands=1)
    setup, _ = _generate(cfg)
    markets = [c for c in setup.commands if isinstance(c, CreateMarket)]
    assert [(m.symbol, m.price_decimals, m.size_decimals) for m in markets[:3]] == [
        ("BTC", 1, 5),
        ("ETH", 2, 4),
        ("SOL", 3, 3),
    ]
    assert len(markets) == len(MARKETS) == 8
    assert all(m.price_decimals + m.size_decimals <= 6 for m in markets)
    keyed = {c.account_index for c in setup.commands if isinstance(c, RegisterApiKey)}
    funded = {c.account_index for c in setup.commands if isinstance(c, Deposit)}
    assert keyed == funded == set(range(1, cfg.accounts + 1))
    assert len(keyed) == 10_000


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32))
def test_nonces_run_consecutively_per_account_and_key_from_the_first_one(seed: int) -> None:
    cfg = WorkloadConfig(seed=seed, commands=1_500, chunk_size=512, **SMALL)
    setup, chunks = _generate(cfg)
    last: dict[tuple[int, int], int] = {}
    for c in _signed(setup.commands + _stream(chunks)):
        key = (c.account_index, c.api_key_index)
        assert c.nonce == last.get(key, cfg.first_nonce - 1) + 1
        last[key] = c.nonce


def test_client_order_indexes_are_unique_and_cancels_name_orders_that_were_created() -> None:
    _, chunks = _generate(WorkloadConfig(commands=6_000, **SMALL))
    created: dict[int, int] = {}
    for c in _stream(chunks):
        if isinstance(c, CreateOrder | CreateGroupedOrders):
            cois = (
                [c.client_order_index]
                if isinstance(c, CreateOrder)
                else [o.client_order_index for o in grouped_orders(c) if o.client_order_index]
            )
            for coi in cois:
                assert coi not in created
                assert 0 < coi < FIRST_ORDER_INDEX
                created[coi] = c.account_index
        elif isinstance(c, CancelOrder | ModifyOrder):
            assert created[c.index] == c.account_index


def test_time_advances_and_no_transaction_or_resting_order_expires_during_the_run() -> None:
    _, chunks = _generate(WorkloadConfig(commands=4_000, **SMALL))
    times = [t for ch in chunks for t in ch.now_ms]
    assert times == sorted(times) and times[0] == START_MS and times[-1] > START_MS
    for c in _stream(chunks):
        if hasattr(c, "expired_at"):
            assert c.expired_at > times[-1] + 86_400_000
        if isinstance(c, CreateOrder) and c.time_in_force != TimeInForce.IMMEDIATE_OR_CANCEL:
            if c.order_type == OrderType.TWAP:  # its expiry is its end, five minutes or more on
                assert c.order_expiry >= START_MS + 300_000
            else:
                assert c.order_expiry > times[-1] + 86_400_000


def test_the_mix_is_mostly_quoting_with_about_forty_percent_cancels_and_every_kind_present() -> (
    None
):
    cfg = WorkloadConfig(commands=20_000, funding_every=8_000, shock_every=10_000)
    _, chunks = _generate(cfg)
    kinds = Counter(type(c) for c in _stream(chunks))
    cancels = kinds[CancelOrder] + kinds[CancelAllOrders]
    assert 0.30 <= cancels / cfg.commands <= 0.45
    assert 0.35 <= kinds[CreateOrder] / cfg.commands <= 0.60
    for kind in (ModifyOrder, Transfer, Withdraw, Deposit, SetMarkPrice, UpdateLeverage):
        assert kinds[kind] > 0, kind.__name__
    assert kinds[ApplyFunding] == 2 * len(MARKETS)


def test_bare_ops_mirror_the_order_commands() -> None:
    _, chunks = _generate(WorkloadConfig(commands=5_000, **SMALL))
    for ch in chunks:
        kinds = Counter(type(c) for c in ch.commands)
        iocs = sum(
            1
            for c in ch.commands
            if isinstance(c, CreateOrder) and c.time_in_force == TimeInForce.IMMEDIATE_OR_CANCEL
        )
        # waiting orders (stop-loss / take-profit, TWAP) are not book operations; a grouped
        # order's entry is
        waiting = sum(1 for c in ch.commands if isinstance(c, CreateOrder) and c.order_type > 1)
        entries = sum(
            1 for c in ch.commands if isinstance(c, CreateGroupedOrders) and c.grouping_type != 2
        )
        ops = Counter(op.kind for op in ch.bare_ops)
        assert ops[ADD] == kinds[CreateOrder] - waiting + kinds[ModifyOrder] + entries
        assert ops[CANCEL] >= kinds[CancelOrder] + kinds[ModifyOrder] + iocs


@pytest.fixture(scope="module")
def executed() -> tuple[Engine, Counter[int], Counter[int], Counter[type]]:
    """A 20,000-command default workload through the real engine."""
    w = Workload(WorkloadConfig(seed=3, commands=20_000))
    engine = Engine()
    out: list[Any] = []
    setup_codes: Counter[int] = Counter()
    setup = w.setup()
    for cmd, now in zip(setup.commands, setup.now_ms, strict=True):
        setup_codes[engine.execute(cmd, now, out)] += 1
    out.clear()
    codes: Counter[int] = Counter()
    events: Counter[type] = Counter()
    for ch in w.chunks():
        for cmd, now in zip(ch.commands, ch.now_ms, strict=True):
            codes[engine.execute(cmd, now, out)] += 1
        events.update(map(type, out))
        out.clear()
    return engine, setup_codes, codes, events


def test_the_setup_is_accepted_in_full(
    executed: tuple[Engine, Counter[int], Counter[int], Counter[type]],
) -> None:
    _, setup_codes, _, _ = executed
    assert set(setup_codes) == {ResultCode.OK}


def test_a_20k_workload_executes_with_a_sane_mix_of_result_codes(
    executed: tuple[Engine, Counter[int], Counter[int], Counter[type]],
) -> None:
    _, _, codes, events = executed
    total = sum(codes.values())
    assert total == 20_000
    assert codes[ResultCode.OK] / total >= 0.80
    # The generator's own bookkeeping is never the reason for a rejection.
    for gate in (
        ResultCode.INVALID_NONCE,
        ResultCode.ACCOUNT_NOT_FOUND,
        ResultCode.API_KEY_NOT_FOUND,
        ResultCode.TX_EXPIRED,
        ResultCode.MARKET_NOT_FOUND,
        ResultCode.CLIENT_ORDER_INDEX_EXISTS,
        ResultCode.FAT_FINGER_PRICE,
        ResultCode.BELOW_MIN_AMOUNT,
        ResultCode.INVALID_EXPIRY,
    ):
        assert codes[gate] == 0, gate.name
    # What a real venue sees: some cancels arrive after the fill, some post-only quotes cross.
    assert codes[ResultCode.NOT_ACTIVE_LIMIT_ORDER] > 0
    assert events[TradeExecuted] > 1_000


def test_the_engine_state_is_valid_after_the_workload(
    executed: tuple[Engine, Counter[int], Counter[int], Counter[type]],
) -> None:
    engine, _, _, _ = executed
    engine.validate_internal_state()


@pytest.mark.slow
def test_an_oracle_shock_liquidates_some_levered_accounts() -> None:
    cfg = WorkloadConfig(
        seed=5, commands=9_000, levered_open_at=2_000, shock_every=3_000, shock_bps=300.0
    )
    w = Workload(cfg)
    engine = Engine()
    out: list[Any] = []
    liquidated = 0
    for ch in (w.setup(), *w.chunks()):
        for cmd, now in zip(ch.commands, ch.now_ms, strict=True):
            engine.execute(cmd, now, out)
        liquidated += sum(1 for e in out if type(e) is PositionLiquidated)
        out.clear()
    assert liquidated > 0
    engine.validate_internal_state()
