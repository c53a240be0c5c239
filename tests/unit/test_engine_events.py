"""Replicas rebuild their caches from events alone: folding the events of a long, liquidating
workload into plain dicts must reproduce the engine's books, open orders, balances, positions,
nonces, keys, markets and exchange balances exactly."""

from __future__ import annotations

from typing import Any

from kit.workload import Workload

from raydex.codecs import (
    AccountRecord,
    ApiKeyRecord,
    ExchangeRecord,
    MarketRecord,
    OrderRecord,
    OrderStatus,
    PositionRecord,
)
from raydex.engine import Engine

ACTIVE_LIMIT = OrderStatus.ACTIVE_LIMIT


class EventFold:
    """What a replica keeps, built only from events (absolute values: last one wins)."""

    def __init__(self) -> None:
        self.levels: dict[tuple[int, int, int], int] = {}
        self.orders: dict[int, tuple[Any, ...]] = {}
        self.balances: dict[int, int] = {}
        self.positions: dict[tuple[int, int], tuple[Any, ...]] = {}
        self.nonces: dict[tuple[int, int], int] = {}
        self.keys: dict[tuple[int, int], bytes] = {}
        self.markets: dict[int, tuple[Any, ...]] = {}
        self.stats: dict[int, tuple[int, int, int]] = {}
        self.exchange = (0, 0)

    def apply(self, e: Any) -> None:
        kind = type(e).__name__
        if kind == "LevelChanged":
            key = (e.market_index, e.is_ask, e.price)
            if e.size:
                self.levels[key] = e.size
            else:
                self.levels.pop(key, None)
        elif kind == "OrderUpdated":
            if e.status == ACTIVE_LIMIT:
                self.orders[e.order_index] = tuple(e)[:12]
            else:
                self.orders.pop(e.order_index, None)
        elif kind == "BalanceChanged":
            self.balances[e.account_index] = e.collateral
        elif kind == "PositionChanged":
            self.positions[(e.account_index, e.market_index)] = tuple(e)[2:]
        elif kind == "NonceUpdated":
            self.nonces[(e.account_index, e.api_key_index)] = e.nonce
        elif kind == "ApiKeyChanged":
            self.keys[(e.account_index, e.api_key_index)] = e.pub_key
        elif kind == "MarketChanged":
            self.markets[e.market_index] = (*tuple(e)[1:14], e.status)
        elif kind == "MarketStatsChanged":
            self.stats[e.market_index] = (e.mark_price, e.last_trade_price, e.open_interest)
        elif kind == "ExchangeBalancesChanged":
            self.exchange = (e.fee_pool, e.insurance_fund)


def test_folding_the_events_reproduces_the_engine_state() -> None:
    w = Workload(
        accounts=60, markets=3, seed=11, oracle_every=50, oracle_step=40, funding_every=700
    )
    eng = Engine()
    fold = EventFold()
    seen: set[str] = set()
    for cmd, now in [*w.setup(), *w.commands(6_000)]:
        out: list[Any] = []
        eng.execute(cmd, now, out)
        for e in out:
            fold.apply(e)
            seen.add(type(e).__name__)
    assert {"PositionLiquidated", "TradeExecuted"} <= seen
    recs = list(eng.records())
    levels: dict[tuple[int, int, int], int] = {}
    orders = {}
    for r in recs:
        if isinstance(r, OrderRecord):
            key = (r.market_index, r.is_ask, r.price)
            levels[key] = levels.get(key, 0) + r.remaining_base_amount
            orders[r.order_index] = tuple(r)[:12]
    assert fold.levels == levels
    assert fold.orders == orders
    assert fold.balances == {
        r.account_index: r.collateral for r in recs if type(r) is AccountRecord
    }
    positions = {
        (r.account_index, r.market_index): tuple(r)[2:] for r in recs if type(r) is PositionRecord
    }
    # Positions the engine created only to track resting orders never changed: no event needed.
    assert {k: v for k, v in positions.items() if any(v[:4])} == {
        k: v for k, v in fold.positions.items() if any(v[:4])
    }
    keys = [r for r in recs if type(r) is ApiKeyRecord]
    assert fold.nonces == {(r.account_index, r.api_key_index): r.nonce for r in keys}
    assert fold.keys == {(r.account_index, r.api_key_index): r.pub_key for r in keys}
    markets = [r for r in recs if type(r) is MarketRecord]
    assert fold.markets == {r.market_index: (*tuple(r)[1:14], r.status) for r in markets}
    assert fold.stats == {
        r.market_index: (r.mark_price, r.last_trade_price, r.open_interest) for r in markets
    }
    (ex,) = [r for r in recs if type(r) is ExchangeRecord]
    assert fold.exchange == (ex.fee_pool, ex.insurance_fund)
