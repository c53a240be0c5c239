"""The signature audit: every executed user tx's signature checked again, off the hot path.

Each signature is verified once on the hot path, by the replica's dry-run, and a deployed sequencer
trusts the deployment's replicas (``SequencerConfig.verify_signatures``). The audit checks that
trust afterwards, as Lighter's prover does: the committer reads every block's WAL record (the
signed txs exactly as executed), re-verifies each against the API key the engine held at that
point, and checks that the published tx hash is the hash of those bytes. A mismatch is an alarm
(``raydex_signature_audit_failures_total``, an error naming the block, the tx and the account) and
the committer publishes no commitment from that block on.

::

    committer: block frame ──► Committer.apply (commitment) ──► SignatureAudit.note_block
                                                  (per tx: TxExecuted + the key changes it made)
    audit loop: WAL range read (tx log) ──► SignatureAudit.audit(seq, record)
                  per executed tx: key at that point ─► hash ─► verify ─► apply its key changes

Invariants:
- Blocks are audited in seq order, each once; the key table is the engine's as of the last audited
  block (a snapshot's ``ApiKeyRecord`` rows, then each block's ``ApiKeyChanged`` in tx order).
- The audit may lag the commitments; at most ``max_pending`` blocks wait. Beyond that, or when the
  WAL no longer holds a block, the oldest are passed unaudited (their key changes applied) and
  counted in ``skipped_blocks``: never silently.
- Txs refused before the engine and operator commands (Ray control plane only) are not audited;
  nor is a block whose WAL record the sequencer restored from its followers (a damaged tail: the
  record holds the block's events, not its signed txs): it is counted in ``skipped_blocks``.

Cost: one message hash and one verify per executed user tx, in the committer's process.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from raydex.codecs import (
    DEFAULT_CHAIN_ID,
    OPERATOR_TX_TYPES,
    ApiKeyChanged,
    ApiKeyRecord,
    ResultCode,
    TxExecuted,
    Verifier,
    decode_wal_record,
    is_signed_type,
    signer_key,
    tx_hash_of,
    tx_type_of,
)

log = logging.getLogger(__name__)

_API_KEY_NOT_FOUND = int(ResultCode.API_KEY_NOT_FOUND)


class AuditFailure(NamedTuple):
    """One executed tx the audit could not vouch for."""

    seq: int
    position: int
    tx_hash: str
    account_index: int
    api_key_index: int
    reason: str


class _TxSummary(NamedTuple):
    executed: TxExecuted
    key_changes: tuple[ApiKeyChanged, ...]


class SignatureAudit:
    """Re-verification of executed txs, block by block (see module docstring). Ray-free."""

    def __init__(
        self, chain_id: int = DEFAULT_CHAIN_ID, max_pending: int = 50_000, keep_failures: int = 100
    ) -> None:
        self.verifier = Verifier(chain_id)
        self.max_pending = max_pending
        self.keep_failures = keep_failures
        #: audited through this seq (the key table is as of this block)
        self.seq = 0
        #: the snapshot seq this audit started from (0: the first block): what came before was
        #: for the committer that ran before this one, not passed unaudited by this one
        self.from_seq = 0
        self.keys: dict[tuple[int, int], bytes] = {}
        self._pending: OrderedDict[int, tuple[_TxSummary, ...]] = OrderedDict()
        self.audited_txs = 0
        self.audited_blocks = 0
        self.skipped_blocks = 0
        self.failed_txs = 0
        #: the first block with a failure (commitments from it on are withheld); None: none yet
        self.failed_at: int | None = None
        self.failures: list[AuditFailure] = []

    # ---- state -----------------------------------------------------------------------------

    def reset(self, seq: int, records: Iterable[Any]) -> None:
        """Start over at snapshot ``seq`` with its ``ApiKeyRecord`` rows (a committer rebuild).
        A failure already found stays: a rebuild never clears an alarm."""
        self.seq = seq
        self.keys = {
            (r.account_index, r.api_key_index): r.pub_key
            for r in records
            if type(r) is ApiKeyRecord
        }
        self._pending.clear()

    @property
    def pending(self) -> int:
        """Blocks committed but not audited yet."""
        return len(self._pending)

    @property
    def next_seq(self) -> int | None:
        """The block the audit needs next (None when it is not committed yet)."""
        return self.seq + 1 if (self.seq + 1) in self._pending else None

    def note_block(self, seq: int, events: Sequence[Any]) -> None:
        """Remember block ``seq``'s tx outcomes and key changes until it is audited (called by
        the committer for each block it commits, in seq order)."""
        if seq <= self.seq or seq in self._pending:
            return
        txs: list[_TxSummary] = []
        executed: TxExecuted | None = None
        changes: list[ApiKeyChanged] = []
        for ev in events:
            t = type(ev)
            if t is TxExecuted:
                if executed is not None:
                    txs.append(_TxSummary(executed, tuple(changes)))
                    changes.clear()
                executed = ev
            elif t is ApiKeyChanged:
                changes.append(ev)
        if executed is not None:
            txs.append(_TxSummary(executed, tuple(changes)))
        self._pending[seq] = tuple(txs)
        while len(self._pending) > self.max_pending:
            self.skip(self.seq + 1, "the audit is more than max_pending blocks behind")

    def skip(self, seq: int, why: str) -> None:
        """Pass block ``seq`` (the next one) unaudited: its key changes are applied, nothing is
        verified. Used when the WAL no longer holds it or the audit fell too far behind."""
        if seq != self.seq + 1:
            raise ValueError(f"audit: block {seq} does not follow {self.seq}")
        summary = self._pending.pop(seq, ())
        for s in summary:
            self._apply_key_changes(s.key_changes)
        self.seq = seq
        self.skipped_blocks += 1
        if self.skipped_blocks == 1 or self.skipped_blocks % 1000 == 0:
            log.warning("signature audit: block %d passed unaudited (%s)", seq, why)

    def _apply_key_changes(self, changes: Iterable[ApiKeyChanged]) -> None:
        for kc in changes:
            self.keys[(kc.account_index, kc.api_key_index)] = kc.pub_key

    # ---- the check ---------------------------------------------------------------------------

    def audit(self, seq: int, record: bytes) -> list[AuditFailure]:
        """Check block ``seq`` (the next one) against its WAL record; returns its failures."""
        if seq != self.seq + 1:
            raise ValueError(f"audit: block {seq} does not follow {self.seq}")
        if seq not in self._pending:
            raise ValueError(f"audit: block {seq} was not committed yet")
        block = decode_wal_record(record)
        if block.restored is not None:  # taken back from the followers: no signed txs to check
            self.skip(seq, "its WAL record was restored from the followers' copy of the block")
            return []
        summary = self._pending.pop(seq)
        refused = {pos for pos, _ in block.refused}
        txs = iter(block.txs)
        failures: list[AuditFailure] = []
        for pos, s in enumerate(summary):
            if pos in refused:
                continue
            tx = next(txs, None)
            if tx is None:
                failures.append(self._failure(seq, pos, s.executed, "no tx in the WAL record"))
                break
            reason = self._check(tx, s.executed)
            if reason is not None:
                failures.append(self._failure(seq, pos, s.executed, reason))
            self._apply_key_changes(s.key_changes)
        if next(txs, None) is not None:
            failures.append(
                AuditFailure(
                    seq, len(summary), "", 0, 0, "the WAL record holds more txs than the block"
                )
            )
        self.seq = seq
        self.audited_blocks += 1
        if failures:
            self.failed_txs += len(failures)
            if self.failed_at is None:
                self.failed_at = seq
            room = self.keep_failures - len(self.failures)
            self.failures.extend(failures[: max(room, 0)])
            for f in failures[:10]:
                log.error(
                    "SIGNATURE AUDIT FAILED at block %d, tx %d (%s) of account %d key %d: %s;"
                    " commitments from block %d on are withheld",
                    *f,
                    self.failed_at,
                )
        return failures

    def _check(self, tx: Any, executed: TxExecuted) -> str | None:
        cls = type(tx)
        ttype = tx_type_of(cls)
        if ttype != executed.tx_type:
            return f"tx type {ttype} in the WAL, {executed.tx_type} in the block"
        hm = tx_hash_of(tx, self.verifier.chain_id)
        if hm != executed.tx_hash:
            return "the published tx hash is not the hash of the logged tx"
        if ttype in OPERATOR_TX_TYPES or not is_signed_type(cls):
            return None
        self.audited_txs += 1
        pk = signer_key(tx, self.keys.get((tx.account_index, tx.api_key_index)))
        if pk is None:
            return "no API key registered for the signer"
        if not self.verifier.verify(tx, pk, hm):
            return "signature does not verify under the registered API key"
        return None

    def _failure(self, seq: int, pos: int, ex: TxExecuted, reason: str) -> AuditFailure:
        return AuditFailure(seq, pos, ex.tx_hash.hex(), ex.account_index, ex.api_key_index, reason)

    def status(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "from_seq": self.from_seq,
            "pending_blocks": self.pending,
            "audited_txs": self.audited_txs,
            "audited_blocks": self.audited_blocks,
            "skipped_blocks": self.skipped_blocks,
            "failed_txs": self.failed_txs,
            "failed_at": self.failed_at,
            "failures": [f._asdict() for f in self.failures[:10]],
        }
