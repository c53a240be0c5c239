"""The committer: a state commitment per block, computed off the hot path.

For every block it computes ``block_hash = sha256(frame)``, the Merkle root of account state, and
a hash chain ``chain[seq] = sha256(chain[seq-1] || block_hash || account_root)``. It follows the
block stream like any replica; it may fall behind under load, and trading never waits for it.

Account state leaves: one leaf per account, ``sha256(account_index, collateral, then each position
(market, size, entry_quote) in market order)``, in a sparse Merkle tree keyed by account index, so
a block costs ~48 hashes per touched account, not a rebuild, and the root depends on state only.

Invariants: commitments are computed in seq order with no gap (a gap means the caller must rebuild
from a snapshot via :meth:`Committer.from_records`); applying an already-committed seq is a no-op.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, NamedTuple

from raydex.codecs import (
    AccountRecord,
    BalanceChanged,
    PositionChanged,
    PositionRecord,
    TxExecuted,
    decode_block,
)

_EMPTY = bytes(32)
_ACCOUNT = struct.Struct("<Qq")
_POSITION = struct.Struct("<Bqq")


class Commitment(NamedTuple):
    seq: int
    height: int
    timestamp_ns: int
    block_hash: bytes
    account_root: bytes
    chain: bytes
    tx_count: int


class GapError(RuntimeError):
    pass


class SparseMerkleTree:
    """Sparse binary Merkle tree keyed by account index (depth 48: the account index domain).

    Empty subtrees hash to precomputed defaults, so the root depends only on the leaf contents,
    never on the order accounts appeared in: a committer that booted from a snapshot and one that
    saw every block agree. :meth:`update` recomputes each touched path once per batch.
    Cost: ~48 sha256 per touched leaf (less where paths share ancestors).
    """

    DEPTH = 48

    def __init__(self) -> None:
        defaults = [_EMPTY]
        for _ in range(self.DEPTH):
            defaults.append(hashlib.sha256(defaults[-1] + defaults[-1]).digest())
        self._defaults = defaults
        #: level -> {index: hash}; level 0 holds the leaves, level DEPTH the root.
        self._nodes: list[dict[int, bytes]] = [{} for _ in range(self.DEPTH + 1)]

    def update(self, leaves: dict[int, bytes]) -> None:
        nodes = self._nodes
        nodes[0].update(leaves)
        touched = set(leaves)
        sha = hashlib.sha256
        for level in range(self.DEPTH):
            below = nodes[level]
            default = self._defaults[level]
            above = nodes[level + 1]
            parents = set()
            for i in touched:
                p = i >> 1
                if p in parents:
                    continue
                parents.add(p)
                left = below.get(p << 1, default)
                right = below.get((p << 1) | 1, default)
                above[p] = sha(left + right).digest()
            touched = parents

    @property
    def root(self) -> bytes:
        return self._nodes[self.DEPTH].get(0, self._defaults[self.DEPTH])


class Committer:
    """Per-block commitments (see module docstring). Pure; the Ray shell feeds it frames."""

    def __init__(self, keep: int = 10_000) -> None:
        self.seq = 0
        self.chain = _EMPTY
        self.tree = SparseMerkleTree()
        self._collateral: dict[int, int] = {}
        self._positions: dict[int, dict[int, tuple[int, int]]] = {}
        self.commitments: OrderedDict[int, Commitment] = OrderedDict()
        self.keep = keep

    @classmethod
    def from_records(cls, records: Iterable[Any], seq: int, chain: bytes = _EMPTY) -> Committer:
        """Start at snapshot ``seq`` (the chain restarts from ``chain``, by default zeros)."""
        c = cls()
        c.seq = seq
        c.chain = chain
        touched: set[int] = set()
        for r in records:
            if type(r) is AccountRecord:
                c._collateral[r.account_index] = r.collateral
                touched.add(r.account_index)
            elif type(r) is PositionRecord:
                c._positions.setdefault(r.account_index, {})[r.market_index] = (
                    r.size,
                    r.entry_quote,
                )
                touched.add(r.account_index)
        c.tree.update({a: c._leaf(a) for a in touched})
        return c

    def _leaf(self, account: int) -> bytes:
        h = hashlib.sha256(_ACCOUNT.pack(account, self._collateral.get(account, 0)))
        for m, (size, quote) in sorted(self._positions.get(account, {}).items()):
            h.update(_POSITION.pack(m, size, quote))
        return h.digest()

    def apply(self, frame: bytes) -> Commitment | None:
        """Commit one block frame; None for an already-committed seq; GapError on a gap."""
        block = decode_block(frame)
        if block.seq <= self.seq:
            return None
        if block.seq != self.seq + 1:
            raise GapError(f"block {block.seq} after {self.seq}")
        touched: set[int] = set()
        txs = 0
        for ev in block.events:
            t = type(ev)
            if t is TxExecuted:
                txs += 1
            elif t is BalanceChanged:
                self._collateral[ev.account_index] = ev.collateral
                touched.add(ev.account_index)
            elif t is PositionChanged:
                self._positions.setdefault(ev.account_index, {})[ev.market_index] = (
                    ev.size,
                    ev.entry_quote,
                )
                touched.add(ev.account_index)
        if touched:
            self.tree.update({a: self._leaf(a) for a in touched})
        block_hash = hashlib.sha256(frame).digest()
        root = self.tree.root
        self.chain = hashlib.sha256(self.chain + block_hash + root).digest()
        self.seq = block.seq
        c = Commitment(
            block.seq, block.height, block.timestamp_ns, block_hash, root, self.chain, txs
        )
        self.commitments[block.seq] = c
        if len(self.commitments) > self.keep:
            self.commitments.popitem(last=False)
        return c


class CommitterActor:
    """Ray shell: follows the sequencer's block stream (gRPC) and commits each block; on a gap it
    restarts its chain from the snapshot holder's newest snapshot. Off the hot path by design:
    nobody waits for it."""

    def __init__(self, delta_target: str, holder_name: str, namespace: str) -> None:
        import asyncio

        from raydex.observability.metrics import Recorder

        from .runtime import ActorRuntime

        self.delta_target = delta_target
        self.holder_name = holder_name
        self.namespace = namespace
        self.runtime = ActorRuntime(nice=None)
        self.committer = Committer()
        self.resyncs = 0
        self.metrics = Recorder("committer", "committer")
        self.metrics.gauge("raydex_block_seq", lambda: self.committer.seq)
        self._task = asyncio.get_event_loop().create_task(self._follow())

    async def _rebuild(self) -> None:
        import ray

        from raydex.codecs import tables_to_records

        holder = ray.get_actor(self.holder_name, namespace=self.namespace)
        seq, _height, refs = await holder.latest_snapshot.remote()
        tables = {name: await ref for name, ref in refs.items()}
        self.committer = Committer.from_records(tables_to_records(tables), seq)
        self.resyncs += 1

    async def _follow(self) -> None:
        import asyncio

        from .transport import GrpcBlockSource, ResyncRequired, TransportUnavailable

        self.runtime.before_boot()
        self.runtime.after_boot(self.metrics)  # GC + placement series; starts the flush task
        source = GrpcBlockSource(self.delta_target, name="committer")
        while True:
            try:
                async for _seq, frame in source.subscribe(self.committer.seq + 1):
                    self.committer.apply(frame)
            except (ResyncRequired, GapError):
                before = self.committer.seq
                await self._rebuild()
                if self.committer.seq == before:
                    await asyncio.sleep(0.2)  # the holder has nothing newer yet: don't spin
            except TransportUnavailable:
                await asyncio.sleep(0.5)

    async def commitment(self, seq: int) -> dict[str, Any] | None:
        c = self.committer.commitments.get(seq)
        return None if c is None else _as_json(c)

    async def latest(self, limit: int = 10) -> list[dict[str, Any]]:
        items = list(self.committer.commitments.values())[-limit:]
        return [_as_json(c) for c in reversed(items)]

    async def status(self) -> dict[str, Any]:
        return {
            "seq": self.committer.seq,
            "chain": self.committer.chain.hex(),
            "resyncs": self.resyncs,
        }


def _as_json(c: Commitment) -> dict[str, Any]:
    """Lighter's ``Block`` shape (its L1 fields have no raydex meaning and stay empty)."""
    ms = c.timestamp_ns // 1_000_000
    return {
        "commitment": c.chain.hex(),
        "height": c.seq,
        "state_root": c.account_root.hex(),
        "priority_operations": 0,
        "on_chain_l2_operations": 0,
        "pending_on_chain_operations_pub_data": "",
        "committed_tx_hash": c.block_hash.hex(),
        "committed_at": ms,
        "verified_tx_hash": "",
        "verified_at": 0,
        "txs": [],
        "status": 1,
        "size": c.tx_count,
        "tx_count_total": c.height,
    }
