"""The committer: a state commitment per block, computed off the hot path.

For every block it computes ``block_hash = sha256(frame)``, the Merkle root of account state, and
a hash chain ``chain[seq] = sha256(chain[seq-1] || block_hash || account_root)``. It follows the
block stream like any replica; it may fall behind under load, and trading never waits for it.

Account state leaves: one leaf per account, ``sha256(account_index, collateral, then each
non-flat position (market, size, entry_quote) in market order)``, in a sparse Merkle tree keyed by
account index, so a block costs ~48 hashes per touched account, not a rebuild, and the root
depends on state only.

Invariants: commitments are computed in seq order with no gap (a gap means the caller must rebuild
from a snapshot via :meth:`Committer.from_records`); applying an already-committed seq is a no-op.

Following (:class:`CommitterFollower`, a supervised loop): every (re)connect resumes *at* the
committed seq and checks the sequencer's block there has the committed ``block_hash``
(``actors/snapshot/follow.py``): a sequencer that lost published blocks and published different
ones under their seqs makes the committer log the divergence, count it and rebuild from the
snapshot holder's newest snapshot (itself checked against the sequencer's block at its seq, when
the holder's delta ring holds it), never chain a commitment onto a history that was replaced.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import struct
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, NamedTuple

from raydex.codecs import (
    AccountRecord,
    BalanceChanged,
    PositionChanged,
    PositionRecord,
    TxExecuted,
    decode_block,
)
from raydex.observability.metrics import Recorder

from .runtime import ActorRuntime, Supervisor, exit_process, log_fatal
from .snapshot import Diverged, Reconnect, block_digest, follow
from .transport import BlockSource, ResyncRequired, TransportError

log = logging.getLogger(__name__)

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
        #: block hash of block ``seq`` when this committer started from a snapshot (if known)
        self.anchor: bytes | None = None

    @property
    def last_hash(self) -> bytes | None:
        """The block hash of block ``seq`` (None when not known: seq 0, or an unanchored start)."""
        c = self.commitments.get(self.seq)
        return c.block_hash if c is not None else self.anchor

    @classmethod
    def from_records(
        cls, records: Iterable[Any], seq: int, chain: bytes = _EMPTY, anchor: bytes | None = None
    ) -> Committer:
        """Start at snapshot ``seq`` (the chain restarts from ``chain``, by default zeros);
        ``anchor``: the block hash of block ``seq``, checked when following resumes."""
        c = cls()
        c.seq = seq
        c.chain = chain
        c.anchor = anchor
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
            if size or quote:  # a flat position is no position (snapshots may hold flat ones)
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


#: ``() -> (seq, snapshot records, block hash of block seq or None)``: the holder's newest snapshot
FetchSnapshot = Callable[[], Awaitable[tuple[int, Iterable[Any], bytes | None]]]


class CommitterFollower:
    """The committer's follower (Ray-free): applies the block stream to a :class:`Committer`,
    checks every resume, rebuilds from a snapshot on a gap, a ring miss or a divergence."""

    def __init__(
        self,
        source: BlockSource,
        fetch_snapshot: FetchSnapshot,
        metrics: Recorder | None = None,
        on_fatal: Callable[[str], None] = log_fatal,
        retry_s: float = 0.2,
    ) -> None:
        self.source = source
        self.fetch_snapshot = fetch_snapshot
        self.committer = Committer()
        self.resyncs = 0
        self.divergences = 0
        self.retry_s = retry_s
        self.supervisor = Supervisor(metrics, on_fatal)

    def start(self) -> None:
        self.supervisor.start("committer", self._follow)

    async def stop(self) -> None:
        await self.supervisor.stop()

    async def rebuild(self) -> None:
        seq, records, anchor = await self.fetch_snapshot()
        self.committer = Committer.from_records(records, seq, anchor=anchor)
        self.resyncs += 1

    async def _follow(self) -> None:
        retry = Reconnect("committer", self.retry_s)
        while True:
            c = self.committer
            before = c.seq
            try:
                async for _seq, frame in follow(self.source, c.seq, c.last_hash, block_digest):
                    c.apply(frame)
            except (ResyncRequired, GapError) as exc:
                log.info("committer: %s; rebuilding from the holder's snapshot", exc)
                await self._rebuild_or_wait()
            except Diverged as exc:
                self.divergences += 1
                log.error("committer: %s", exc)
                await self._rebuild_or_wait()
            except TransportError as exc:
                if self.committer.seq != before:
                    retry.progressed()
                await retry.wait(exc)

    async def _rebuild_or_wait(self) -> None:
        before = (self.committer.seq, self.committer.last_hash)
        await self.rebuild()
        if (self.committer.seq, self.committer.last_hash) == before:
            await asyncio.sleep(self.retry_s)  # the holder has nothing newer yet: don't spin


class CommitterActor:
    """Ray shell: follows the sequencer's block stream (gRPC) and commits each block; rebuilds
    from the snapshot holder's newest snapshot when it must. Off the hot path by design: nobody
    waits for it. A follower loop that keeps failing exits the process (Ray restarts it)."""

    def __init__(
        self, delta_target: str, holder_name: str, namespace: str, data_plane_secret: str = ""
    ) -> None:
        from .snapshot import ONE_ATTEMPT
        from .transport import GrpcBlockSource

        self.delta_target = delta_target
        self.holder_name = holder_name
        self.namespace = namespace
        self.runtime = ActorRuntime(nice=None)
        self.metrics = Recorder("committer", "committer")
        source = GrpcBlockSource(
            delta_target, name="committer", secret=data_plane_secret, backoff=ONE_ATTEMPT
        )
        self.follower = CommitterFollower(source, self._fetch, self.metrics, exit_process)
        self.metrics.gauge("raydex_block_seq", lambda: self.follower.committer.seq)
        self._task = asyncio.get_event_loop().create_task(self._start())

    @property
    def committer(self) -> Committer:
        return self.follower.committer

    async def _fetch(self) -> tuple[int, Iterable[Any], bytes | None]:
        import ray

        from raydex.codecs import tables_to_records

        holder = ray.get_actor(self.holder_name, namespace=self.namespace)
        seq, _height, refs = await holder.latest_snapshot.remote()
        tables = {name: await ref for name, ref in refs.items()}
        anchor: bytes | None = await holder.block_digest.remote(seq)
        return seq, tables_to_records(tables), anchor

    async def _start(self) -> None:
        self.runtime.before_boot()
        self.runtime.after_boot(self.metrics)  # GC + placement series; starts the flush task
        self.follower.start()

    async def commitment(self, seq: int) -> dict[str, Any] | None:
        c = self.committer.commitments.get(seq)
        return None if c is None else _as_json(c)

    async def latest(self, limit: int = 10) -> list[dict[str, Any]]:
        items = list(self.committer.commitments.values())[-limit:]
        return [_as_json(c) for c in reversed(items)]

    async def status(self) -> dict[str, Any]:
        f = self.follower
        return {
            "seq": self.committer.seq,
            "chain": self.committer.chain.hex(),
            "resyncs": f.resyncs,
            "divergences": f.divergences,
            "loop_restarts": f.supervisor.restarts("committer"),
            **self.runtime.status(),
            "repr": repr(self),
        }

    def __repr__(self) -> str:
        """Role, deployment/name, the committed seq, the head of the hash chain, placement."""
        c = self.committer
        return self.runtime.describe(
            "committer",
            {
                "seq": c.seq,
                "chain": c.chain.hex()[:8] if c.seq else None,
                "follows": self.delta_target,
            },
        )


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
