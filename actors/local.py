"""An in-process exchange for the API app without Ray: a BlockProducer as the sequencer and any
number of replicas (ReplicaState + optional Fanout) fed every closed block synchronously.

``LocalExchange.execute`` has the ``ExecuteTxs`` signature of ``build_app``: it executes the txs,
closes a block, applies it to every replica (and publishes it to their fan-outs), then returns the
outcomes, so a client's answer follows its block exactly as with the real sequencer.
``LocalExchange.serve`` builds one such replica with its fan-out and aiohttp app, the way
``ReplicaService`` wires its own. Used by the tests and usable by a Ray-free demo. Cost: one block
per ``execute`` call (no micro-batching).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from raydex.codecs import (
    CancelOrder,
    CreateMarket,
    CreateOrder,
    Deposit,
    RegisterApiKey,
    TxOutcome,
    Verifier,
    generate_key,
    sign_tx,
)
from raydex.engine import Engine
from raydex.observability.metrics import ApiCounters

from .replica import ApiConfig, Applied, Fanout, ReplicaHooks, ReplicaState, build_app
from .sequencer import BlockProducer, ClosedBlock


@dataclass(frozen=True, slots=True)
class LocalReplica:
    """One in-process replica of a :class:`LocalExchange`: its caches, fan-out, counters and app
    (serve ``app`` with e.g. ``aiohttp.test_utils.TestServer``)."""

    state: ReplicaState
    fanout: Fanout
    counters: ApiCounters
    app: web.Application


class LocalExchange:
    def __init__(self, producer: BlockProducer) -> None:
        self.producer = producer
        self.replicas: list[tuple[ReplicaState, Fanout | None]] = []
        #: every closed block, in seq order (for late replicas and replays)
        self.frames: list[bytes] = []
        #: the sequencer's clock (ns) stamped on each block; tests set it to drive time
        self.clock: Callable[[], int] = time.time_ns

    def attach(self, state: ReplicaState, fanout: Fanout | None = None) -> None:
        self.replicas.append((state, fanout))

    def run(self, txs: list[Any], operator: bool = False) -> ClosedBlock:
        """Execute ``txs`` as one block and deliver it to every replica."""
        self.producer.submit(txs, self.clock(), operator=operator)
        block = self.producer.close_block()
        assert block is not None, "a block with txs always closes"
        self.frames.append(block.frame)
        self.deliver(block.frame)
        return block

    def deliver(self, frame: bytes) -> list[Applied]:
        out = []
        for state, fanout in self.replicas:
            applied = state.apply_block(frame)
            if fanout is not None:
                fanout.publish(applied)
            out.append(applied)
        return out

    async def execute(self, txs: list[Any]) -> list[TxOutcome]:
        """``ExecuteTxs`` for ``build_app``: one block with ``txs``, applied everywhere."""
        return self.run(txs).outcomes

    def serve(
        self, config: ApiConfig | None = None, hooks: ReplicaHooks | None = None
    ) -> LocalReplica:
        """A new replica booted from the engine's records at the current seq, attached (it gets
        every later block), with its fan-out and its app executing txs through this exchange."""
        p = self.producer
        cfg = config if config is not None else ApiConfig()
        state = ReplicaState.from_records(p.engine.records(), p.seq, p.height)
        fanout = Fanout(state, cfg)
        counters = ApiCounters()
        app = build_app(state, self.execute, fanout, counters=counters, config=cfg, hooks=hooks)
        self.attach(state, fanout)
        return LocalReplica(state, fanout, counters, app)


# ---- a small market and funded traders (tests, demo) --------------------------------------------

FAR_MS = 4_000_000_000_000  # a tx deadline far in the future (year 2096)


def eth_market(market_index: int = 0, mark_price: int = 300_000) -> CreateMarket:
    """A perp market with 2 price and 4 size decimals (``300_000`` ticks = 3000.00)."""
    return CreateMarket(
        market_index=market_index,
        symbol="ETH",
        price_decimals=2,
        size_decimals=4,
        min_base_amount=1,
        min_quote_amount=0,
        maker_fee=0,
        taker_fee=200,
        liquidation_fee=5_000,
        default_initial_margin_fraction=500,
        min_initial_margin_fraction=200,
        maintenance_margin_fraction=120,
        closeout_margin_fraction=80,
        max_price_deviation=5_000,
        mark_price=mark_price,
        status=1,
    )


class Trader:
    """An account with one Lighter API key that signs its own txs with consecutive nonces."""

    def __init__(self, account: int, api_key: int = 0) -> None:
        self.account = account
        self.api_key = api_key
        self.seed, self.pub = generate_key()
        self.nonce = 0

    def setup(self, usdc: int) -> list[Any]:
        """Operator commands that create the account, register the key and fund it."""
        return [RegisterApiKey(self.account, self.api_key, self.pub), Deposit(self.account, usdc)]

    def order(
        self, price: int, size: int, is_ask: int, market: int = 0, tif: int = 1, coi: int = 0
    ) -> CreateOrder:
        tx = CreateOrder(
            self.account,
            self.api_key,
            market,
            coi,
            size,
            price,
            is_ask,
            0,
            tif,
            0,
            0,
            -1,
            FAR_MS,
            self.nonce,
            bytes(80),
        )
        self.nonce += 1
        return sign_tx(tx, self.seed)

    def cancel(self, order_index: int, market: int = 0) -> CancelOrder:
        tx = CancelOrder(
            self.account, self.api_key, market, order_index, FAR_MS, self.nonce, bytes(80)
        )
        self.nonce += 1
        return sign_tx(tx, self.seed)


def new_exchange(traders: list[Trader], usdc: int = 10**12, markets: int = 1) -> LocalExchange:
    """A LocalExchange whose first block creates ``markets`` markets and funds ``traders``."""
    ex = LocalExchange(BlockProducer(Engine(), None, Verifier()))
    ops: list[Any] = [eth_market(m) for m in range(markets)]
    for t in traders:
        ops += t.setup(usdc)
    ex.run(ops, operator=True)
    return ex
