"""The sequencer's core: execute txs into the open block, close blocks, recover after a crash.

Not Ray: driven by the block loop (``service.py``) and tested directly.

    submit(txs) ─► verify signature ─► engine.execute_into ─► TxExecuted + events, as block bytes
    close_block() ─► WAL record ─► header + those bytes ─► outcomes released once durable

Invariants:
- Outcomes of a block are handed out only after its WAL record is durable. Every tx the engine
  executed is in the WAL, and so is the ``TxExecuted`` of each tx refused before the engine, at
  its position: a block rebuilt from the WAL (:meth:`recover`) is byte-identical to the one first
  published, which followers rely on (``actors/snapshot/follow.py``).
- All txs of a block execute at the block's ``now_ms``, stored in its record, so replay is exact.
- ``seq`` is contiguous from 1; ``height`` counts the txs the engine executed.
- Recovery starts from the newest snapshot that verifies and that the WAL continues (its
  ``record_crc`` equals the WAL's record at its seq), else an older one, else seq 0; each skipped
  snapshot is logged.

Cost per tx: a key lookup, a signature check for user txs when ``verify_signatures`` (~35 µs in
C), the engine's execute, one sha256; per block one WAL record and its header.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from raydex.codecs import (
    OPERATOR_TX_TYPES,
    SKIP_NONCE_FLAG,
    ChangePubKey,
    CreateOrder,
    Refusal,
    ResultCode,
    Transfer,
    TxExecuted,
    TxOutcome,
    Verifier,
    WalBlock,
    decode_block_of,
    encode_block,
    encode_block_body,
    encode_restored_wal_record,
    encode_tx,
    encode_wal_record,
    is_signed_type,
    l1_signer,
    peek_block_header,
    signer_key,
    transfer_l1_signer,
    tx_hash_of,
    tx_type_of,
    wal_record_crc,
)
from raydex.engine import Engine

from ..snapshot.store import LoadedSnapshot, fold_frame, load_newest_snapshot
from .wal import Wal, WalError

_OK = int(ResultCode.OK)
_OPERATOR_ONLY = int(ResultCode.OPERATOR_ONLY)
_API_KEY_NOT_FOUND = int(ResultCode.API_KEY_NOT_FOUND)
_INVALID_SIGNATURE = int(ResultCode.INVALID_SIGNATURE)
_UNSUPPORTED = int(ResultCode.UNSUPPORTED_TX_TYPE)
_INVALID_L1_SIGNATURE = int(ResultCode.INVALID_L1_SIGNATURE)
_NONCE_MASK = SKIP_NONCE_FLAG - 1
#: the events a restored block's outcomes are read from
_EXECUTED: frozenset[type] = frozenset({TxExecuted})


#: a signature checked ahead of execution: (the key it was checked against, valid), or None
#: (not a signed user tx, or no key registered)
Checked = tuple[bytes, bool] | None


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
        #: one signature check less per tx on the sequencer; only for replicas in the same trust
        #: domain (the committer audits every signature afterwards).
        self.verify_signatures = True
        self.seq = seq
        self.height = height
        #: the epoch written into each block's WAL record (the arbiter's; 0: layout 2, no arbiter)
        self.epoch = 0
        self._frames: list[bytes] = []
        self._refused: list[Refusal] = []
        self._outcomes: list[TxOutcome] = []
        self._ts_ns = 0
        #: blocks rebuilt by :meth:`recover` for re-serving (empty otherwise)
        self.recovered_blocks: deque[ClosedBlock] = deque()
        #: the snapshot :meth:`recover` started from (None when built directly)
        self.recovered_from: LoadedSnapshot | None = None

    @property
    def open_txs(self) -> int:
        return len(self._outcomes)

    def submit(
        self,
        txs: Iterable[Any],
        now_ns: int,
        operator: bool = False,
        replay: bool = False,
        checked: Sequence[Checked] | None = None,
        verify: bool | None = None,
    ) -> range:
        """Execute ``txs`` into the open block (opening it at ``now_ns`` if none is open).

        Returns the positions of their outcomes in the block being built; they are valid once
        :meth:`close_block` returns that block. ``replay``: txs read back from the WAL, which
        were authorized when they were logged (no operator or signature check again).
        ``checked``: :meth:`check_signature` of each tx, done ahead (off the critical section);
        a result is used only if the tx's key is still the one it was checked against.
        ``verify``: check user signatures (None: ``verify_signatures``).
        """
        verify = self.verify_signatures if verify is None else verify
        if not self._outcomes:
            self._ts_ns = now_ns
        now_ms = self._ts_ns // 1_000_000
        engine = self.engine
        deltas = engine.deltas  # the open block's body: each tx's TxExecuted, then its events
        seq = self.seq + 1
        chain_id = self.verifier.chain_id
        first = len(self._outcomes)
        for i, tx in enumerate(txs):
            frame = encode_tx(tx)
            h = tx_hash_of(tx, chain_id)
            ttype = tx_type_of(type(tx))
            code = (
                _OK
                if replay
                else self._authorize(
                    tx, ttype, operator, checked[i] if checked else None, h, verify
                )
            )
            order_index = 0
            account = getattr(tx, "account_index", 0)
            api_key = getattr(tx, "api_key_index", 0)
            nonce = getattr(tx, "nonce", 0) & _NONCE_MASK  # without the SkipNonce flag
            if code != _OK:  # logged too, so the block rebuilt from the WAL is the same bytes
                executed = TxExecuted(h, ttype, account, api_key, nonce, code)
                deltas.event(executed)
                self._refused.append((len(self._outcomes), executed))
            else:
                # written before the tx runs (its events follow it); its code set after
                at = deltas.tx_executed(h, ttype, account, api_key, nonce, 0)
                last_order = engine.last_order_index
                code = engine.execute_into(tx, now_ms)
                deltas.set_code(at, code)
                self._frames.append(frame)
                if type(tx) is CreateOrder and engine.last_order_index != last_order:
                    order_index = engine.last_order_index  # the order it made
            self._outcomes.append(TxOutcome(h, code, order_index, seq))
        return range(first, len(self._outcomes))

    def _authorize(
        self, tx: Any, ttype: int, operator: bool, checked: Checked, hm: bytes, verify: bool
    ) -> int:
        if ttype in OPERATOR_TX_TYPES:
            return _OK if operator else _OPERATOR_ONLY
        if not is_signed_type(type(tx)):
            return _UNSUPPORTED
        key_index = tx.api_key_index
        pk = signer_key(tx, self.engine.pub_key(tx.account_index, key_index))
        if pk is None:
            return _API_KEY_NOT_FOUND
        if type(tx) is ChangePubKey:  # Lighter's: authorised by the account's L1 address
            l1 = self.engine.l1_address(tx.account_index)
            if l1 is None or l1_signer(tx) != l1:
                return _INVALID_L1_SIGNATURE
        elif type(tx) is Transfer and not self._transfer_authorized(tx):
            return _INVALID_L1_SIGNATURE
        if verify:
            valid = checked[1] if checked is not None and checked[0] == pk else None
            if valid is None:
                valid = self.verifier.verify(tx, pk, hm)
            if not valid:
                return _INVALID_SIGNATURE
        return _OK

    def _transfer_authorized(self, tx: Transfer) -> bool:
        """A transfer to another master's account (an existing one) from an account with an L1
        address carries that address's ``L1Sig`` (``engine._accounts.transfer``)."""
        eng = self.engine
        to_master = eng.master_index(tx.to_account_index)
        if to_master is None or to_master == eng.master_index(tx.account_index):
            return True
        l1 = eng.l1_address(tx.account_index)
        return l1 is None or transfer_l1_signer(tx, self.verifier.chain_id) == l1

    def check_signature(self, tx: Any) -> Checked:
        """``tx``'s signature checked against its key as the engine holds it now, for
        :meth:`submit`'s ``checked``; None for operator commands, unsigned types, unknown keys."""
        cls = type(tx)
        if tx_type_of(cls) in OPERATOR_TX_TYPES or not is_signed_type(cls):
            return None
        pk = signer_key(tx, self.engine.pub_key(tx.account_index, tx.api_key_index))
        if pk is None:
            return None
        return pk, self.verifier.verify(tx, pk)

    def close_block(self, write_wal: bool = True, epoch: int | None = None) -> ClosedBlock | None:
        """Encode the open block and (``write_wal``) make it durable; None when no tx is open.
        Its WAL record carries ``epoch`` (None: :attr:`epoch`; a replayed block: its own).

        With ``write_wal=False`` the caller owns durability: it must write ``wal_record`` (e.g.
        through the journal) before releasing any outcome of the block."""
        if not self._outcomes:
            return None
        seq = self.seq + 1
        frames, self._frames = self._frames, []
        refused, self._refused = self._refused, []
        record = encode_wal_record(
            seq, self._ts_ns, frames, refused, self.epoch if epoch is None else epoch
        )
        if write_wal and self.wal is not None:
            self.wal.append_record(seq, record)
        outcomes, self._outcomes = self._outcomes, []
        count, body = self.engine.take_deltas()
        height = self.height + len(frames)  # txs the engine executed (= logged)
        frame = encode_block_body(seq, height, self._ts_ns, count, body)
        self.seq = seq
        self.height = height
        return ClosedBlock(
            seq, height, self._ts_ns, frame, frames, record, outcomes, len(outcomes), count
        )

    def replay(self, block: WalBlock) -> ClosedBlock:
        """Rebuild logged block ``block`` (the next seq): its txs re-executed, its refusals
        re-stamped at their positions; the result is the block as first published. A restored
        record (a block taken back from the followers) is folded in instead (:meth:`restore`)."""
        if block.seq != self.seq + 1:
            raise WalError(f"WAL block {block.seq} does not follow {self.seq}")
        if block.restored is not None:
            return self.restore(block.restored, block.origin_crc, block.epoch)
        ts = block.timestamp_ns
        if not block.refused:
            self.submit(block.txs, ts, replay=True)
        else:
            refused = dict(block.refused)
            txs = iter(block.txs)
            for pos in range(len(block.txs) + len(refused)):
                ev = refused.get(pos)
                if ev is None:
                    self.submit((next(txs),), ts, replay=True)
                else:
                    self._stamp_refused(ev, ts)
        closed = self.close_block(write_wal=False, epoch=block.epoch)
        if closed is None:  # an empty record (never written by this version): an empty block
            self.seq = block.seq
            h = self.height
            frame = encode_block(block.seq, h, ts, [])
            closed = ClosedBlock(
                block.seq,
                h,
                ts,
                frame,
                [],
                encode_wal_record(block.seq, ts, [], (), block.epoch),
                [],
                0,
                0,
            )
        return closed

    def restore(self, frame: bytes, origin_crc: int, epoch: int | None = None) -> ClosedBlock:
        """Take block ``frame`` (the next seq, as first published; its WAL record lost) into the
        state by folding its events (``snapshot.fold_frame``: O(state), no tx is executed); the
        block with its restored WAL record (``codecs.encode_restored_wal_record``, identity
        ``origin_crc``), which the caller writes unless it was read from the WAL. Its outcomes
        are its ``TxExecuted`` events (no order index)."""
        header = peek_block_header(frame)
        if header.seq != self.seq + 1:
            raise WalError(f"restored block {header.seq} does not follow {self.seq}")
        if self._outcomes:
            raise WalError("a block is open: restore only during recovery")
        self.engine = fold_frame(self.engine, frame)
        seq = header.seq
        outcomes = [
            TxOutcome(ev.tx_hash, ev.code, 0, seq)
            for ev in decode_block_of(frame, _EXECUTED).events
            if type(ev) is TxExecuted
        ]
        record = encode_restored_wal_record(
            seq, header.timestamp_ns, origin_crc, frame, self.epoch if epoch is None else epoch
        )
        self.seq, self.height = seq, header.height
        return ClosedBlock(
            seq, header.height, header.timestamp_ns, frame, [], record, outcomes,
            len(outcomes), header.count,
        )  # fmt: skip

    def _stamp_refused(self, ev: TxExecuted, now_ns: int) -> None:
        if not self._outcomes:
            self._ts_ns = now_ns
        self._refused.append((len(self._outcomes), ev))
        self.engine.deltas.event(ev)
        self._outcomes.append(TxOutcome(ev.tx_hash, ev.code, 0, self.seq + 1))

    # ---- recovery -------------------------------------------------------------------------------

    @classmethod
    def recover(
        cls,
        snapshot_dir: Path,
        wal: Wal,
        verifier: Verifier,
        keep_blocks: int = 0,
        digests: dict[int, bytes] | None = None,
    ) -> tuple[BlockProducer, int]:
        """The newest usable snapshot + every WAL block after it -> the state the sequencer had
        before it stopped. Returns the producer and the number of blocks replayed.

        The WAL blocks are rebuilt through :meth:`replay`, so each one's delta frame and WAL
        record are exactly those first published; the last ``keep_blocks`` of them are left in
        ``recovered_blocks`` for the caller to re-serve: followers that were behind the crash
        catch up from them instead of finding a gap. ``digests``, when given, receives the
        sha256 of every rebuilt block's frame by seq (what the start checks against the
        followers, ``repair.py``). Raises WalError when no snapshot (nor seq 0) can be continued
        by the WAL."""
        loaded = load_newest_snapshot(snapshot_dir, usable=lambda s, m: _wal_gap(wal, s, m))
        if loaded.path is None and (reason := _wal_gap(wal, 0, {})) is not None:
            raise WalError(f"no snapshot the WAL continues, and from seq 0: {reason}")
        producer = cls(loaded.engine, wal, verifier, seq=loaded.seq, height=loaded.height)
        kept: deque[ClosedBlock] = deque(maxlen=max(keep_blocks, 0))
        replayed = 0
        for block in wal.replay(after_seq=loaded.seq):
            closed = producer.replay(block)
            if keep_blocks:
                kept.append(closed)
            if digests is not None:
                digests[closed.seq] = hashlib.sha256(closed.frame).digest()
            replayed += 1
        producer.recovered_blocks = kept
        producer.recovered_from = loaded
        return producer, replayed


def _wal_gap(wal: Wal, seq: int, meta: dict[str, Any]) -> str | None:
    """Why the WAL cannot continue a snapshot at ``seq`` (None: it can): it must hold block
    ``seq + 1`` unless it ends at or before ``seq``, and its record at ``seq``, when held, must be
    the one the snapshot was built from (``record_crc``)."""
    first, last = wal.first_seq, wal.last_seq
    if last > seq and (first == 0 or first > seq + 1):
        return f"the WAL holds seqs {first}..{last}, not {seq + 1}"
    want = meta.get("record_crc")
    if want is not None and first <= seq <= last:
        held = wal.read_records(seq, seq, 1, 1)
        if held and held[0][0] == seq and wal_record_crc(held[0][1]) != int(want):
            return f"the WAL's block {seq} is not the one the snapshot was built from"
    return None
