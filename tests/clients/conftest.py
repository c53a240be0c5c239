"""One in-process raydex stack for the client tests: real Lighter clients talk to it over sockets.

::

    background thread (its own event loop)                 test thread
    ┌──────────────────────────────────────────────┐
    │ SequencerService (gRPC) ─► SnapshotService   │       lighter-sdk ApiClient / WsClient
    │        ▲  blocks ▼                           │◄─HTTP─ ccxt.lighter
    │ ReplicaService (aiohttp, REST + /stream)     │◄─WS──
    │ Committer (follows the holder's block ring)  │   (GET block / blocks)
    └──────────────────────────────────────────────┘

The stack is session-scoped (booting it costs ~1 s): two markets (``ETH`` 0 and ``BTC`` 1, both
2 price / 4 size decimals) and three funded traders (accounts 1, 2, 3, one Lighter API key each,
1,000,000 USDC). Tests share it, so each asserts on what it placed itself (its own client order
index, price or account) rather than on absolute book contents, and reads a trader's nonce from
the server before signing. Clients run on the test thread; the stack never shares their loop.
The sequencer stamps blocks with ``Exchange.clock`` (the wall clock plus an offset a test may
move forward, never back: a TWAP's slices need minutes of block time; the oracle is off, so time
reaches the engine with commands, e.g. the operator's ``SetMarkPrice``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pytest

from raydex.actors.committer import Committer, _as_json
from raydex.actors.local import Trader, eth_market
from raydex.actors.replica.service import ReplicaConfig, ReplicaService
from raydex.actors.sequencer.service import SequencerConfig, SequencerService
from raydex.actors.snapshot.holder import SnapshotConfig, SnapshotService
from raydex.codecs import ResultCode

T = TypeVar("T")
BOOT_S = 30.0


class Clock:
    """The sequencer's block clock (ns): the wall clock plus ``offset_ns``."""

    def __init__(self) -> None:
        self.offset_ns = 0

    def __call__(self) -> int:
        return time.time_ns() + self.offset_ns

    def advance(self, ms: int) -> None:
        """Move block time ``ms`` forward (for the rest of the session)."""
        assert ms >= 0, "block time never goes back"
        self.offset_ns += ms * 1_000_000

    def now_ms(self) -> int:
        return self() // 1_000_000


USDC = 10**12  # 1,000,000 USDC in micro-USDC
MARKETS = {0: "ETH", 1: "BTC"}


@dataclass
class Exchange:
    """Handle on the running stack: where to point clients, and the funded traders."""

    port: int
    traders: dict[int, Trader]
    seq: SequencerService
    replica: ReplicaService
    loop: asyncio.AbstractEventLoop
    clock: Clock
    coi: list[int] = field(default_factory=lambda: [1000])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/stream"

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = BOOT_S) -> T:
        """Run ``coro`` on the stack's loop (server-side reads, operator commands)."""
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def next_coi(self) -> int:
        """A client order index no other test used (the stack is shared)."""
        self.coi[0] += 1
        return self.coi[0]


class _Commitments:
    """``CommitmentSource`` for the replica: a Committer fed from the snapshot holder's ring by a
    long-poll task (as the committer actor follows the block stream, off the hot path)."""

    def __init__(self, holder: SnapshotService) -> None:
        self.holder = holder
        self.committer = Committer()
        self.task: asyncio.Task[None] | None = None

    async def follow(self) -> None:
        while True:
            _, frames = await self.holder.blocks_since(self.committer.seq, timeout_s=0.05)
            for _, frame in frames:
                self.committer.apply(frame)

    async def commitment(self, height: int) -> dict[str, Any] | None:
        c = self.committer.commitments.get(height)
        return None if c is None else _as_json(c)

    async def latest(self, limit: int) -> list[dict[str, Any]]:
        items = list(self.committer.commitments.values())[-limit:]
        return [_as_json(c) for c in reversed(items)]


class _Stack:
    """Starts and stops the services on a private event loop in a daemon thread."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="raydex-stack", daemon=True
        )
        self.tables: dict[str, tuple[int, int, dict[str, pa.Table]]] = {}
        self.seq: SequencerService | None = None
        self.holder: SnapshotService | None = None
        self.replica: ReplicaService | None = None
        self.commitments: _Commitments | None = None
        self.clock = Clock()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(BOOT_S)

    async def start(self, traders: list[Trader]) -> int:
        tmp = self.tmp
        cfg = SequencerConfig(
            wal_dir=str(tmp / "wal"), snapshot_dir=str(tmp / "s"), wal_fsync="none"
        )
        self.seq = SequencerService(cfg, clock=self.clock)
        await self.seq.start()
        self.holder = SnapshotService(
            SnapshotConfig(dir=str(tmp / "s"), every_blocks=50, every_seconds=60),
            on_tables=lambda s, h, t: self.tables.__setitem__("latest", (s, h, t)),
        )
        await self.holder.start(f"127.0.0.1:{self.seq.port}", f"127.0.0.1:{self.seq.txlog_port}")
        ops: list[Any] = [eth_market(mi)._replace(symbol=sym) for mi, sym in MARKETS.items()]
        for t in traders:
            ops += t.setup(USDC)
        codes = {o.code for o in await self.seq.submit(ops, operator=True)}
        assert codes == {ResultCode.OK}, codes
        holder = self.holder

        async def fetch_snapshot() -> tuple[int, int, dict[str, pa.Table]]:
            for _ in range(int(BOOT_S / 0.02)):
                if "latest" in self.tables:
                    return self.tables["latest"]
                await asyncio.sleep(0.02)
            raise AssertionError("the snapshot holder published no snapshot")

        self.commitments = _Commitments(holder)
        self.commitments.task = asyncio.get_running_loop().create_task(self.commitments.follow())
        self.replica = ReplicaService(
            ReplicaConfig(name="clients", sequencer_target=f"127.0.0.1:{self.seq.port}"),
            fetch_snapshot,
            lambda s: holder.blocks_since(s, timeout_s=0.01),
            commitments=self.commitments,
        )
        return await self.replica.start()

    async def stop(self) -> None:
        if self.replica is not None:
            await self.replica.stop()
        if self.commitments is not None and self.commitments.task is not None:
            self.commitments.task.cancel()
            await asyncio.gather(self.commitments.task, return_exceptions=True)
        if self.holder is not None:
            await self.holder.stop()
        if self.seq is not None:
            await self.seq.stop()


@pytest.fixture(scope="session")
def exchange(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exchange]:
    traders = {ai: Trader(ai) for ai in (1, 2, 3)}
    stack = _Stack(tmp_path_factory.mktemp("clients"))
    stack.thread.start()
    try:
        port = stack.call(stack.start(list(traders.values())))
        assert stack.seq is not None and stack.replica is not None
        yield Exchange(port, traders, stack.seq, stack.replica, stack.loop, stack.clock)
    finally:
        try:
            stack.call(stack.stop())
        finally:
            stack.loop.call_soon_threadsafe(stack.loop.stop)
            stack.thread.join(BOOT_S)
            stack.loop.close()
