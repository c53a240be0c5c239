"""Lighter's SkipNonce attribute (``L2TxAttributes {"4": 1}``): the nonce must be strictly greater
than the key's last one and below 2^47 - 1 instead of exactly last + 1, in the engine and in the
replica's dry-run alike (one rule, ``raydex.engine.rules.accepted_nonce``)."""

from __future__ import annotations

from raydex.actors.local import Trader, new_exchange
from raydex.actors.replica.cache.dryrun import dry_run
from raydex.actors.replica.cache.state import ReplicaState
from raydex.codecs import (
    MAX_SKIP_NONCE,
    SKIP_NONCE_FLAG,
    ResultCode,
    TxExecuted,
    decode_block,
    sign_tx,
    tx_from_json,
    tx_to_json,
)
from raydex.engine import state_digest
from raydex.engine.rules import accepted_nonce


def _skip(tx: object, nonce: int, seed: bytes) -> object:
    return sign_tx(tx._replace(nonce=nonce | SKIP_NONCE_FLAG), seed)  # type: ignore[attr-defined]


def test_the_rule_takes_last_plus_one_or_with_skip_nonce_anything_above_the_last() -> None:
    assert accepted_nonce(4, 5) == 5
    assert accepted_nonce(4, 7) == -1  # a gap without the attribute
    assert accepted_nonce(4, 7 | SKIP_NONCE_FLAG) == 7
    assert accepted_nonce(-1, 1_700_000_000_000 | SKIP_NONCE_FLAG) == 1_700_000_000_000
    assert accepted_nonce(7, 7 | SKIP_NONCE_FLAG) == -1  # strictly greater
    assert accepted_nonce(7, 3 | SKIP_NONCE_FLAG) == -1
    assert accepted_nonce(7, MAX_SKIP_NONCE | SKIP_NONCE_FLAG) == -1
    assert accepted_nonce(7, (MAX_SKIP_NONCE - 1) | SKIP_NONCE_FLAG) == MAX_SKIP_NONCE - 1


def test_the_engine_and_the_dry_run_accept_a_ms_time_nonce_with_skip_nonce_and_move_on() -> None:
    a = Trader(1)
    ex = new_exchange([a])
    st = ReplicaState.from_records(ex.producer.engine.records(), ex.producer.seq, 0)
    ex.attach(st)
    first = a.order(300_000, 1, 0)
    ex.run([first])
    t_ms = 1_700_000_000_123
    gap_plain = sign_tx(a.order(299_000, 1, 0)._replace(nonce=t_ms), a.seed)
    assert dry_run(st, gap_plain, 0) == ResultCode.INVALID_NONCE
    jump = _skip(a.order(299_000, 1, 0), t_ms, a.seed)
    assert dry_run(st, jump, 0) == ResultCode.OK
    # through JSON (what a client sends) and back: the same tx, the same signature check
    assert tx_from_json(14, tx_to_json(jump)) == jump
    st.note_sent(jump)
    assert st.next_nonce(1, 0) == t_ms + 1  # the pending nonce proper, without the flag
    block = ex.run([jump])
    assert block.outcomes[0].code == ResultCode.OK
    executed = [e for e in decode_block(block.frame).events if type(e) is TxExecuted]
    assert executed[-1].code == ResultCode.OK and executed[-1].nonce == t_ms
    assert ex.producer.engine.next_nonce(1, 0) == t_ms + 1
    assert st.next_nonce(1, 0) == t_ms + 1 and st.pending_count() == 0
    # the same nonce again, or a lower one, is refused by both
    again = _skip(a.order(298_000, 1, 0), t_ms, a.seed)
    assert dry_run(st, again, 0) == ResultCode.INVALID_NONCE
    assert ex.producer.engine.apply(again, 0).code == ResultCode.INVALID_NONCE
    # and plain last + 1 still works after the jump
    follow = sign_tx(a.order(298_000, 1, 0)._replace(nonce=t_ms + 1), a.seed)
    assert dry_run(st, follow, 0) == ResultCode.OK
    assert st.state_hash() == state_digest(ex.producer.engine.records())
