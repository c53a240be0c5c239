"""The committer: a state commitment per block, computed off the hot path.

For every block: ``block_hash = sha256(frame)``, the Merkle root of account state, and a hash chain
``chain[seq] = sha256(chain[seq-1] || block_hash || account_root)``. It follows the block stream
like any replica; it may fall behind under load, and trading never waits for it. Account leaves:
``sha256(account_index, collateral, each non-flat position (market, size, entry_quote, isolated
collateral) in market order)`` in a sparse Merkle tree keyed by account index, so a block costs ~48
hashes per touched account, not a rebuild, and the root depends on state only.

Invariants: commitments are computed in seq order with no gap (a gap means rebuilding from a
snapshot, :meth:`Committer.from_records`); applying an already-committed seq is a no-op.
:class:`CommitterFollower` resumes *at* the committed seq on every (re)connect and checks the
sequencer's block there has the committed ``block_hash`` (``actors/snapshot/follow.py``); a
replaced history is logged, counted and rebuilt from the holder's newest snapshot, never chained
onto. The signature audit (``actors/audit.py``) runs in the same actor.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import struct
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NamedTuple

from raydex.codecs import (
    DEFAULT_CHAIN_ID,
    AccountRecord,
    ApiKeyChanged,
    BalanceChanged,
    PositionChanged,
    PositionRecord,
    TxExecuted,
    decode_block_of,
    decode_wal_read_reply,
    encode_wal_read_request,
)
from raydex.observability.metrics import Recorder

from .audit import SignatureAudit
from .runtime import (
    ActorRuntime,
    HeldBlocks,
    PrimaryTargets,
    PrimaryWatch,
    RecentBlocks,
    Supervisor,
    exit_process,
    held_blocks,
    log_fatal,
)
from .snapshot import Diverged, Reconnect, block_digest, follow
from .transport import BlockSource, ResyncRequired, TransportError, TxChannel

log = logging.getLogger(__name__)

#: While the signature audit keeps up, it reads the sequencer's WAL at most this often: one range
#: read for the blocks of the last few ms, not a round trip per block (each costs both loops a
#: loopback write and a wake-up). The audit is behind the commitments anyway; this adds <= 10 ms.
AUDIT_LINGER_S = 0.01

try:  # the tree update in C (actors/_smt.c; optional, like the signing extension)
    from . import _smt  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - no compiler where it was installed
    _smt = None

_EMPTY = bytes(32)
#: the events a block's commitment and its signature audit read (``SignatureAudit.note_block``):
#: the others (book levels, orders, trades, stats) are stepped over by the decoder, never built
_COMMITTED: frozenset[type] = frozenset(
    {TxExecuted, BalanceChanged, PositionChanged, ApiKeyChanged}
)
_ACCOUNT = struct.Struct("<Qq")
_POSITION = struct.Struct("<Bqqq")


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
    Cost: ~48 sha256 per touched leaf (less where paths share ancestors): ~0.85 µs each in
    Python (hashlib's per-call overhead dominates a 64-byte digest), a few times less in C
    (``actors/_smt.c``, SHA-NI where the CPU has it), which :meth:`update` uses when built.
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
        if _smt is not None:  # the same loop in C (actors/_smt.c)
            _smt.update(nodes, self._defaults, list(leaves))
            return
        self._update_py(set(leaves))

    def _update_py(self, touched: set[int]) -> None:
        """:meth:`update` above the leaves, in Python (no C extension; the reference)."""
        nodes = self._nodes
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
        #: called with ``(seq, events)`` of each block committed, the ``_COMMITTED`` kinds only
        #: (the signature audit's feed)
        self.on_block: Callable[[int, Sequence[Any]], None] | None = None
        self.seq = 0
        self.chain = _EMPTY
        self.tree = SparseMerkleTree()
        self._collateral: dict[int, int] = {}
        self._positions: dict[int, dict[int, tuple[int, int, int]]] = {}
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
                    r.allocated_margin,
                )
                touched.add(r.account_index)
        c.tree.update({a: c._leaf(a) for a in touched})
        return c

    def _leaf(self, account: int) -> bytes:
        h = hashlib.sha256(_ACCOUNT.pack(account, self._collateral.get(account, 0)))
        for m, (size, quote, allocated) in sorted(self._positions.get(account, {}).items()):
            if size or quote:  # a flat position is no position (snapshots may hold flat ones)
                h.update(_POSITION.pack(m, size, quote, allocated))
        return h.digest()

    def apply(self, frame: bytes) -> Commitment | None:
        """Commit one block frame; None for an already-committed seq; GapError on a gap."""
        block = decode_block_of(frame, _COMMITTED)
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
                    ev.allocated_margin,
                )
                touched.add(ev.account_index)
        if touched:
            self.tree.update({a: self._leaf(a) for a in touched})
        block_hash = hashlib.sha256(frame).digest()
        root = self.tree.root
        self.chain = hashlib.sha256(self.chain + block_hash + root).digest()
        self.seq = block.seq
        if self.on_block is not None:
            self.on_block(block.seq, block.events)
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
        txlog: TxChannel | None = None,
        audit: SignatureAudit | None = None,
        audit_read_records: int = 256,
        audit_linger_s: float = AUDIT_LINGER_S,
    ) -> None:
        self.source = source
        self.fetch_snapshot = fetch_snapshot
        self.resyncs = 0
        self.divergences = 0
        self.retry_s = retry_s
        self.supervisor = Supervisor(metrics, on_fatal)
        #: the sequencer's tx log (WAL range reads) and the audit of what it holds; the audit runs
        #: only with both (see ``actors/audit.py``)
        self.txlog = txlog
        self.audit = audit if txlog is not None else None
        self.audit_read_records = audit_read_records
        self.audit_linger_s = audit_linger_s
        #: WAL range reads the audit made (one per ``audit_linger_s`` at most while it keeps up)
        self.audit_reads = 0
        self._committed = asyncio.Event()
        self.committer = self._new(Committer())
        #: the newest block frames committed, for a sequencer repairing its log (``held_blocks``)
        self.recent = RecentBlocks()

    def _new(self, c: Committer) -> Committer:
        if self.audit is not None:
            c.on_block = self._noted
        return c

    def _noted(self, seq: int, events: Any) -> None:
        assert self.audit is not None
        self.audit.note_block(seq, events)
        self._committed.set()

    def start(self) -> None:
        self.supervisor.start("committer", self._follow)
        if self.audit is not None:
            self.supervisor.start("audit", self._audit)

    async def stop(self) -> None:
        await self.supervisor.stop()
        if self.txlog is not None:
            await self.txlog.close()

    async def rebuild(self) -> None:
        seq, records, anchor = await self.fetch_snapshot()
        records = list(records)
        self.committer = self._new(Committer.from_records(records, seq, anchor=anchor))
        if self.audit is not None:
            a = self.audit
            if seq > a.seq and a.seq == 0 and a.audited_blocks == a.skipped_blocks == 0:
                # this committer's first state: it audits from there (its status says so); what
                # came before was the previous committer's to audit, not passed by this one
                a.from_seq = seq
            elif seq > a.seq:  # blocks the snapshot jumps over are never audited: say so
                a.skipped_blocks += seq - a.seq
                why = "signature audit: blocks %d..%d passed unaudited (rebuilt from a snapshot)"
                log.warning(why, a.seq + 1, seq)
            a.reset(seq, records)
        self.resyncs += 1

    def held_blocks(self, since: int, frames_after: int) -> HeldBlocks:
        """The committed seq, the newest frames committed and the hash chain's block hashes from
        ``since`` on (``runtime/held.py``): what a sequencer repairing its log checks against."""
        c = self.committer
        hashes = {s: cm.block_hash for s, cm in c.commitments.items()}
        return held_blocks(
            "committer", "committer", c.seq, self.recent, since, frames_after, hashes
        )

    def withheld(self, seq: int) -> bool:
        """True when the commitment of block ``seq`` must not be published: the signature audit
        failed at or before it."""
        failed = self.audit.failed_at if self.audit is not None else None
        return failed is not None and seq >= failed

    async def _audit(self) -> None:
        """Audit committed blocks in seq order from the sequencer's WAL (bounded range reads), at
        the committer's pace: behind the commitments, never in anyone's way."""
        audit, reader = self.audit, self.txlog
        assert audit is not None and reader is not None
        while True:
            if audit.next_seq is None:
                self._committed.clear()
                if audit.next_seq is None:
                    await self._committed.wait()
                continue
            if self.committer.seq - audit.seq < self.audit_read_records and self.audit_linger_s:
                # keeping up: let the blocks of the next few ms gather, one read for all of them
                await asyncio.sleep(self.audit_linger_s)
            want = min(self.audit_read_records, max(1, self.committer.seq - audit.seq))
            self.audit_reads += 1
            reply = decode_wal_read_reply(
                await reader.submit(encode_wal_read_request(audit.seq + 1, want))
            )
            if not reply.records or reply.records[0][0] != audit.seq + 1:
                # the WAL was pruned past it (a long pause): pass what it no longer holds
                until = reply.records[0][0] - 1 if reply.records else reply.first_held - 1
                while audit.next_seq is not None and audit.seq < until:
                    audit.skip(audit.seq + 1, "the sequencer's WAL no longer holds it")
                if not reply.records:
                    await asyncio.sleep(self.retry_s)
                continue
            for seq, record in reply.records:
                if seq != audit.next_seq:
                    break
                audit.audit(seq, record)
                await asyncio.sleep(0)  # one block at a time: the follower keeps committing

    async def _follow(self) -> None:
        retry = Reconnect("committer", self.retry_s)
        while True:
            c = self.committer
            before = c.seq
            try:
                async for seq, frame in follow(self.source, c.seq, c.last_hash, block_digest):
                    if c.apply(frame) is not None:
                        self.recent.add(seq, frame)
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
        self,
        delta_target: str,
        holder_name: str,
        namespace: str,
        data_plane_secret: str = "",
        txlog_target: str = "",
        chain_id: int = DEFAULT_CHAIN_ID,
        bundle: Any = None,
        gc_spec: Any = None,
    ) -> None:
        """``txlog_target``: the sequencer's tx log; with it the committer also audits every
        executed tx's signature (``actors/audit.py``); without it, no audit. ``bundle``: its
        planned slot (pinned after the boot), None when unplaced."""
        from .snapshot import ONE_ATTEMPT
        from .transport import block_source, tx_channel

        self.delta_target = delta_target
        self.holder_name = holder_name
        self.namespace = namespace
        self.runtime = ActorRuntime(bundle, gc_spec, nice=None)
        self.metrics = Recorder("committer", "committer")
        source = block_source(
            delta_target, name="committer", secret=data_plane_secret, backoff=ONE_ATTEMPT
        )
        txlog = tx_channel(txlog_target, secret=data_plane_secret) if txlog_target else None
        self.follower = CommitterFollower(
            source,
            self._fetch,
            self.metrics,
            exit_process,
            txlog=txlog,
            audit=SignatureAudit(chain_id) if txlog is not None else None,
        )
        self.metrics.gauge("raydex_block_seq", lambda: self.follower.committer.seq)
        audit = self.follower.audit
        if audit is not None:
            m = self.metrics
            m.counter_fn("raydex_signature_audit_txs_total", lambda: audit.audited_txs)
            m.counter_fn("raydex_signature_audit_failures_total", lambda: audit.failed_txs)
            m.counter_fn(
                "raydex_signature_audit_wal_reads_total", lambda: self.follower.audit_reads
            )
            m.counter_fn(
                "raydex_signature_audit_skipped_blocks_total", lambda: audit.skipped_blocks
            )
            m.gauge(
                "raydex_signature_audit_lag_blocks",
                lambda: max(0, self.follower.committer.seq - audit.seq),
            )
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
        self.runtime.after_boot(self.metrics, live=self.live)  # GC, placement; flush task
        self.follower.start()
        watch = PrimaryWatch(self._follow_primary, self.delta_target, namespace=self.namespace)
        self.follower.supervisor.start("primary-watch", watch.run)

    async def _follow_primary(self, primary: PrimaryTargets) -> None:
        """A standby took over: the block stream and the tx log go to it."""
        from .transport import retarget

        await retarget(self.follower.source, primary.blocks)
        if self.follower.txlog is not None:
            await retarget(self.follower.txlog, primary.txlog)

    async def held_blocks(self, since: int, frames_after: int) -> HeldBlocks:
        """:meth:`CommitterFollower.held_blocks`, answered at once."""
        return self.follower.held_blocks(since, frames_after)

    async def commitment(self, seq: int) -> dict[str, Any] | None:
        """Block ``seq``'s commitment; None when unknown or withheld (a failed signature audit)."""
        c = self.committer.commitments.get(seq)
        return None if c is None or self.follower.withheld(seq) else _as_json(c)

    async def latest(self, limit: int = 10) -> list[dict[str, Any]]:
        f = self.follower
        items = [c for c in f.committer.commitments.values() if not f.withheld(c.seq)]
        return [_as_json(c) for c in reversed(items[-limit:])]

    async def status(self) -> dict[str, Any]:
        f = self.follower
        return {
            "seq": self.committer.seq,
            "chain": self.committer.chain.hex(),
            "resyncs": f.resyncs,
            "divergences": f.divergences,
            "loop_restarts": f.supervisor.restarts("committer"),
            "signature_audit": (
                {**f.audit.status(), "wal_reads": f.audit_reads} if f.audit is not None else None
            ),
            **self.runtime.status(),
            "repr": self.live(),
        }

    def __repr__(self) -> str:
        """What Ray records when ``__init__`` returns: the fixed facts of :meth:`live` and where
        the live ones are (``actors/runtime/shell.py``)."""
        return self.live(fixed=True)

    def live(self, fixed: bool = False) -> str:
        """Role, deployment/name, the committed seq, the head of the hash chain, placement."""
        c = self.committer
        return self.runtime.describe(
            "committer",
            {
                "seq": c.seq,
                "chain": c.chain.hex()[:8] if c.seq else None,
                "follows": self.delta_target,
                "audit": "on" if self.follower.audit is not None else "off",
            },
            fixed=fixed,
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
