"""The sequencer's core: execute txs into the open block, close blocks, recover after a crash.

This is the part of the sequencer that is not Ray: it is driven by the actor shell
(``actors/sequencer.py``) and tested directly.

Block life cycle (LMAX-style: work once per block, at the end of the block):

    submit(txs) ─► verify signature ─► engine.execute ─► events + TxExecuted appended to the block
    close_block() ─► WAL append (+fsync) ─► encode delta frame ─► outcomes released to submitters

Invariants:
- Outcomes of a block are handed out only after its WAL record is durable: no acknowledged tx is
  ever lost. Every tx the engine executed is in the WAL (a tx rejected before the engine, e.g. a bad
  signature, changed nothing and is not).
- All txs of one block execute with the same ``now_ms`` (the block's timestamp), which is stored in
  the WAL record, so replay is exact.
- Block ``seq`` is contiguous from 1; ``height`` is the number of txs the engine executed so far
  (the logged ones), so a block rebuilt from the WAL carries the same height.

Cost: per tx one dict lookup for the key, one Ed25519 verify (~70 µs, cached key objects) for user
txs, the engine's execute, one sha256 for the tx hash; per block one WAL write (+fsync), one
``encode_block``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from raydex.codecs import (
    OPERATOR_TX_TYPES,
    CreateOrder,
    OrderUpdated,
    ResultCode,
    TxExecuted,
    TxOutcome,
    Verifier,
    encode_block,
    encode_tx,
    encode_wal_record,
    is_signed_type,
    tx_hash,
    tx_type_of,
)
from raydex.engine import Engine

from ..snapshot.store import load_engine_snapshot
from .wal import Wal, WalError

_OK = int(ResultCode.OK)
_OPERATOR_ONLY = int(ResultCode.OPERATOR_ONLY)
_API_KEY_NOT_FOUND = int(ResultCode.API_KEY_NOT_FOUND)
_INVALID_SIGNATURE = int(ResultCode.INVALID_SIGNATURE)
_UNSUPPORTED = int(ResultCode.UNSUPPORTED_TX_TYPE)


class ClosedBlock(NamedTuple):
    seq: int
    height: int
    timestamp_ns: int
    #: the encoded delta block (codecs/_block.py) for the snapshot holder and the replicas
    frame: bytes
    #: the txs the engine executed, as tagged wire frames (what the WAL holds)
    tx_frames: list[bytes]
    #: the block's WAL record (``codecs.encode_wal_record``): the tx-log stream the holder replays
    wal_record: bytes
    outcomes: list[TxOutcome]
    tx_count: int
    event_count: int


class BlockProducer:
    """Executes txs into the open block and closes blocks (see module docstring)."""

    def __init__(
        self, engine: Engine, wal: Wal | None, verifier: Verifier, seq: int = 0, height: int = 0
    ) -> None:
        self.engine = engine
        self.wal = wal
        self.verifier = verifier
        #: Re-verify user signatures here (defence in depth: a replica is then never trusted with
        #: a forged tx). False trusts the replicas' dry-run, which verified every tx already:
        #: ~70 µs of CPU less per tx on the sequencer; only for replicas in the same trust domain.
        self.verify_signatures = True
        self.seq = seq
        self.height = height
        self._events: list[Any] = []
        self._frames: list[bytes] = []
        self._outcomes: list[TxOutcome] = []
        self._ts_ns = 0
        self._scratch: list[Any] = []
        #: blocks rebuilt by :meth:`recover` for re-serving (empty otherwise)
        self.recovered_blocks: deque[ClosedBlock] = deque()

    @property
    def open_txs(self) -> int:
        return len(self._outcomes)

    def submit(
        self, txs: Iterable[Any], now_ns: int, operator: bool = False, replay: bool = False
    ) -> range:
        """Execute ``txs`` into the open block (opening it at ``now_ns`` if none is open).

        Returns the positions of their outcomes in the block being built; they are valid once
        :meth:`close_block` returns that block. ``replay``: txs read back from the WAL, which
        were authorized when they were logged (no operator or signature check again).
        """
        if not self._outcomes:
            self._ts_ns = now_ns
        now_ms = self._ts_ns // 1_000_000
        engine = self.engine
        events = self._events
        scratch = self._scratch
        seq = self.seq + 1
        first = len(self._outcomes)
        for tx in txs:
            frame = encode_tx(tx)
            h = tx_hash(tx)
            ttype = tx_type_of(type(tx))
            code = _OK if replay else self._authorize(tx, ttype, operator)
            order_index = 0
            if code == _OK:
                scratch.clear()
                code = engine.execute(tx, now_ms, scratch)
                self._frames.append(frame)
                if type(tx) is CreateOrder:
                    for ev in scratch:
                        if type(ev) is OrderUpdated and ev.account_index == tx.account_index:
                            order_index = ev.order_index
                            break
            account = getattr(tx, "account_index", 0)
            api_key = getattr(tx, "api_key_index", 0)
            nonce = getattr(tx, "nonce", 0)
            events.append(TxExecuted(h, ttype, account, api_key, nonce, code))
            if code == _OK or scratch:
                events.extend(scratch)
            scratch.clear()
            self._outcomes.append(TxOutcome(h, code, order_index, seq))
        return range(first, len(self._outcomes))

    def _authorize(self, tx: Any, ttype: int, operator: bool) -> int:
        if ttype in OPERATOR_TX_TYPES:
            return _OK if operator else _OPERATOR_ONLY
        if not is_signed_type(type(tx)):
            return _UNSUPPORTED
        key_index = tx.api_key_index
        pk = self.engine.pub_key(tx.account_index, key_index)
        if pk is None:
            return _API_KEY_NOT_FOUND
        if self.verify_signatures and not self.verifier.verify(tx, pk):
            return _INVALID_SIGNATURE
        return _OK

    def close_block(self, write_wal: bool = True) -> ClosedBlock | None:
        """Encode the open block and (``write_wal``) make it durable; None when no tx is open.

        With ``write_wal=False`` the caller owns durability: it must write ``wal_record`` (e.g.
        through the journal) before releasing any outcome of the block."""
        if not self._outcomes:
            return None
        seq = self.seq + 1
        frames, self._frames = self._frames, []
        record = encode_wal_record(seq, self._ts_ns, frames)
        if write_wal and self.wal is not None:
            self.wal.append_record(seq, record)
        outcomes, self._outcomes = self._outcomes, []
        events, self._events = self._events, []
        height = self.height + len(frames)  # txs the engine executed (= logged)
        frame = encode_block(seq, height, self._ts_ns, events)
        self.seq = seq
        self.height = height
        return ClosedBlock(
            seq, height, self._ts_ns, frame, frames, record, outcomes, len(outcomes), len(events)
        )

    # ---- recovery -------------------------------------------------------------------------------

    @classmethod
    def recover(
        cls, snapshot_dir: Path, wal: Wal, verifier: Verifier, keep_blocks: int = 0
    ) -> tuple[BlockProducer, int]:
        """Newest snapshot + every WAL block after it -> the state the sequencer had before it
        stopped. Returns the producer and the number of blocks replayed.

        The WAL blocks are re-executed through :meth:`submit` / :meth:`close_block`, so each one's
        delta frame and WAL record are rebuilt exactly as they were first published (except the
        ``TxExecuted`` of txs refused before the engine, which were never logged); the last
        ``keep_blocks`` of them are left in ``recovered_blocks`` for the caller to re-serve:
        followers that were behind the crash catch up from them instead of finding a gap."""
        engine, seq, height = load_engine_snapshot(snapshot_dir)
        producer = cls(engine, wal, verifier, seq=seq, height=height)
        kept: deque[ClosedBlock] = deque(maxlen=max(keep_blocks, 0))
        replayed = 0
        for block in wal.replay(after_seq=seq):
            if block.seq != producer.seq + 1:
                raise WalError(f"WAL block {block.seq} does not follow {producer.seq}")
            producer.submit(block.txs, block.timestamp_ns, replay=True)
            closed = producer.close_block(write_wal=False)
            if closed is None:  # its txs were all refused before the engine: an empty block
                producer.seq = block.seq
                ts = block.timestamp_ns
                h = producer.height
                frame = encode_block(block.seq, h, ts, [])
                closed = ClosedBlock(
                    block.seq, h, ts, frame, [], encode_wal_record(block.seq, ts, []), [], 0, 0
                )
            if keep_blocks:
                kept.append(closed)
            replayed += 1
        wal.release_recovered()
        producer.recovered_blocks = kept
        return producer, replayed
