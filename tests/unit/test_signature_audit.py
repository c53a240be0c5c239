"""The committer's signature audit: every executed user tx is re-verified off the hot path against
the key the engine held when it ran; a forged tx that a trusting sequencer executed is found,
named, and the commitments from its block on are withheld."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from eth_account import Account as EthAccount
from eth_account.messages import encode_defunct
from kit.faults import free_ports, until

from raydex.actors.audit import SignatureAudit
from raydex.actors.committer import CommitterFollower
from raydex.actors.local import eth_market
from raydex.actors.sequencer import BlockProducer, SequencerConfig, SequencerService, Wal
from raydex.actors.snapshot import ONE_ATTEMPT
from raydex.actors.transport import GrpcBlockSource, GrpcTxChannel
from raydex.codecs import (
    ChangePubKey,
    CreateOrder,
    Deposit,
    L1Deposit,
    RegisterApiKey,
    ResultCode,
    Verifier,
    decode_block,
    generate_key,
    sign_tx,
)
from raydex.codecs.signing import change_pub_key_message
from raydex.engine import Engine

NS = 1_700_000_000_000_000_000
FAR = 4_000_000_000_000
SEED, PUB = generate_key()
SEED2, PUB2 = generate_key()
ETH = eth_market()
SECRET = "s" * 64
OWNER = EthAccount.from_key("0x" + "21" * 32)
L1 = bytes.fromhex(OWNER.address[2:])


def order(account: int, nonce: int, price: int, is_ask: int, key: int = 0) -> CreateOrder:
    tx = CreateOrder(
        account, key, 0, nonce + 1, 100, price, is_ask, 0, 1, 0, 0, -1, FAR, nonce, bytes(80)
    )
    return sign_tx(tx, SEED2 if key else SEED)


def trusting_producer(tmp: Path) -> BlockProducer:
    """A sequencer core that trusts its replicas (no signature check of its own)."""
    p = BlockProducer(Engine(), Wal(tmp / "wal"), Verifier())
    p.verify_signatures = False
    return p


def audit_blocks(p: BlockProducer, audit: SignatureAudit, blocks: list[list[object]]) -> list[int]:
    """Submit each list of txs as one block, then audit every block; the failures' seqs."""
    failed: list[int] = []
    closed = []
    for i, txs in enumerate(blocks):
        p.submit(txs, NS + i * 1_000_000, operator=i == 0)
        block = p.close_block()
        assert block is not None
        audit.note_block(block.seq, decode_block(block.frame).events)
        closed.append(block)
    for block in closed:
        failed += [f.seq for f in audit.audit(block.seq, block.wal_record)]
    return failed


def setup_block() -> list[object]:
    """Accounts 1 and 2 with key 0; account 3 created by an L1 deposit (it has an L1 address)."""
    ops: list[object] = [ETH]
    for a in (1, 2):
        ops += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    return [*ops, L1Deposit(L1, 10**12)]


def change_key(account: int, slot: int, nonce: int) -> ChangePubKey:
    """Lighter's ChangePubKey of ``slot`` to PUB2: signed by the new key, L1Sig by the owner."""
    text = change_pub_key_message(PUB2, nonce, account, slot)
    l1_sig = bytes(OWNER.sign_message(encode_defunct(text=text)).signature)
    return sign_tx(ChangePubKey(account, slot, PUB2, l1_sig, FAR, nonce, bytes(80)), SEED2)


def test_honest_blocks_pass_including_a_key_changed_earlier_in_the_same_block(
    tmp_path: Path,
) -> None:
    p = trusting_producer(tmp_path)
    audit = SignatureAudit()
    blocks: list[list[object]] = [
        setup_block(),
        [order(1, 0, 300_000, 1), order(2, 0, 299_000, 0)],
        # key 3 of account 3 exists only after the ChangePubKey before it in this block
        [change_key(3, 3, 0), order(3, 1, 300_100, 1, key=3), order(2, 1, 299_100, 0)],
    ]
    assert audit_blocks(p, audit, blocks) == []
    assert audit.seq == 3 and audit.failed_at is None
    assert audit.audited_txs == 5 and audit.audited_blocks == 3
    assert audit.keys[(3, 3)] == PUB2


def test_a_forged_tx_the_sequencer_executed_is_found_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = trusting_producer(tmp_path)
    audit = SignatureAudit()
    forged = order(1, 1, 300_000, 0)._replace(price=1)  # signed for another price
    signed_by_another_key = sign_tx(order(2, 1, 299_000, 0), SEED2)
    blocks: list[list[object]] = [
        setup_block(),
        [order(1, 0, 300_000, 1)],
        [forged, signed_by_another_key, order(2, 2, 298_000, 0)],
        [order(1, 2, 300_500, 1)],
    ]
    with caplog.at_level(logging.ERROR):
        failed = audit_blocks(p, audit, blocks)
    assert failed == [3, 3]
    assert audit.failed_at == 3 and audit.failed_txs == 2
    assert [(f.position, f.account_index) for f in audit.failures] == [(0, 1), (1, 2)]
    assert all("does not verify" in f.reason for f in audit.failures)
    assert "SIGNATURE AUDIT FAILED at block 3" in caplog.text
    assert audit.seq == 4  # later blocks are still audited (and pass)


def test_refused_txs_are_skipped_and_a_tampered_wal_record_is_caught(tmp_path: Path) -> None:
    p = trusting_producer(tmp_path)
    audit = SignatureAudit()
    # account 9 has no key: refused before the engine, so in the block but not in the WAL
    p.submit(setup_block(), NS, operator=True)
    b1 = p.close_block()
    p.submit([order(9, 0, 300_000, 1), order(1, 0, 300_000, 1)], NS + 1)
    b2 = p.close_block()
    assert b1 is not None and b2 is not None
    assert [o.code for o in b2.outcomes] == [ResultCode.API_KEY_NOT_FOUND, ResultCode.OK]
    for b in (b1, b2):
        audit.note_block(b.seq, decode_block(b.frame).events)
    assert audit.audit(1, b1.wal_record) == []
    # the WAL record of block 2 with another (validly signed) tx than the one the block reports
    other = Engine()
    q = BlockProducer(other, None, Verifier())
    q.submit(setup_block(), NS, operator=True)
    q.close_block()
    q.submit([order(9, 0, 300_000, 1), order(1, 0, 300_200, 1)], NS + 1)
    tampered = q.close_block()
    assert tampered is not None
    failures = audit.audit(2, tampered.wal_record)
    wrong_hash = "the published tx hash is not the hash of the logged tx"
    assert [f.reason for f in failures] == [wrong_hash]


def test_an_audit_too_far_behind_passes_blocks_unaudited_but_keeps_the_keys(
    tmp_path: Path,
) -> None:
    p = trusting_producer(tmp_path)
    audit = SignatureAudit(max_pending=1)
    blocks: list[list[object]] = [
        setup_block(),
        [change_key(3, 3, 0)],
        [order(3, 1, 300_000, 1, key=3)],
    ]
    closed = []
    for i, txs in enumerate(blocks):
        p.submit(txs, NS + i, operator=i == 0)
        b = p.close_block()
        assert b is not None
        audit.note_block(b.seq, decode_block(b.frame).events)
        closed.append(b)
    assert audit.skipped_blocks == 2 and audit.seq == 2 and audit.keys[(3, 3)] == PUB2
    assert audit.audit(3, closed[2].wal_record) == [] and audit.audited_txs == 1


def test_a_deployment_sequencer_trusts_its_members_and_the_committer_withholds_forged_blocks(
    tmp_path: Path,
) -> None:
    """Real sequencer with a data-plane secret (so it does not verify) and a real committer
    follower auditing through the tx log on loopback."""
    ports = free_ports(2)
    cfg = SequencerConfig(
        wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"),
        data_port=ports[0], txlog_port=ports[1], data_plane_secret=SECRET,
    )  # fmt: skip
    targets = f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"

    async def no_snapshot() -> tuple[int, list[object], bytes | None]:
        raise AssertionError("the committer follows from seq 0 here")

    async def run() -> tuple[dict[str, object], CommitterFollower, bool]:
        svc = SequencerService(cfg)
        await svc.start()
        source = GrpcBlockSource(targets[0], name="committer", secret=SECRET, backoff=ONE_ATTEMPT)
        follower = CommitterFollower(
            source,
            no_snapshot,
            retry_s=0.05,
            txlog=GrpcTxChannel(targets[1], secret=SECRET),
            audit=SignatureAudit(),
        )
        follower.start()
        audit = follower.audit
        assert audit is not None
        try:
            await svc.submit(setup_block(), operator=True)
            for i in range(3):
                await svc.submit([order(1, i, 300_000, 1), order(2, i, 299_000, 0)])
            await until(lambda: audit.seq == 4, "the audit reaches block 4")
            honest = audit.audited_txs == 6 and audit.failed_at is None
            forged = order(1, 3, 300_000, 1)._replace(base_amount=5)
            outcomes = await svc.submit([forged])
            assert outcomes[0].code == ResultCode.OK  # the trusting sequencer executed it
            await svc.submit([order(2, 3, 299_000, 0)])
            await until(lambda: audit.seq == 6, "the audit reaches block 6")
            return svc.status(), follower, honest
        finally:
            await follower.stop()
            await source.close()
            await svc.stop()

    status, follower, honest = asyncio.run(run())
    assert status["verifies_signatures"] is False
    assert honest
    assert follower.audit is not None and follower.audit.failed_at == 5
    assert not follower.withheld(4) and follower.withheld(5) and follower.withheld(6)


def test_an_audit_that_keeps_up_reads_the_blocks_of_its_linger_in_one_wal_read(
    tmp_path: Path,
) -> None:
    """While the audit is level with the committer it lingers before each WAL read, so blocks
    committed meanwhile come in one range read, not one round trip each; every tx is still
    audited, in order."""
    ports = free_ports(2)
    cfg = SequencerConfig(
        wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"),
        data_port=ports[0], txlog_port=ports[1], data_plane_secret=SECRET,
    )  # fmt: skip
    blocks = 11

    async def no_snapshot() -> tuple[int, list[object], bytes | None]:
        raise AssertionError("the committer follows from seq 0 here")

    async def run() -> tuple[int, int, int, int | None]:
        svc = SequencerService(cfg)
        await svc.start()
        source = GrpcBlockSource(
            f"127.0.0.1:{ports[0]}", name="committer", secret=SECRET, backoff=ONE_ATTEMPT
        )
        follower = CommitterFollower(
            source,
            no_snapshot,
            retry_s=0.05,
            txlog=GrpcTxChannel(f"127.0.0.1:{ports[1]}", secret=SECRET),
            audit=SignatureAudit(),
            audit_linger_s=1.0,
        )
        follower.start()
        audit = follower.audit
        assert audit is not None
        try:
            await svc.submit(setup_block(), operator=True)
            for i in range(blocks - 1):  # one block each: every submit waits for durability
                await svc.submit([order(1, i, 300_000, 1), order(2, i, 299_000, 0)])
            await until(lambda: audit.seq == blocks, f"the audit reaches block {blocks}")
            return audit.audited_blocks, audit.audited_txs, follower.audit_reads, audit.failed_at
        finally:
            await follower.stop()
            await source.close()
            await svc.stop()

    audited_blocks, audited_txs, reads, failed_at = asyncio.run(run())
    assert audited_blocks == blocks and audited_txs == 2 * (blocks - 1) and failed_at is None
    assert 1 <= reads <= blocks // 2  # a read per block would be 11


@pytest.mark.parametrize(
    ("secret", "verify"), [("", None), (SECRET, True)], ids=["no-secret", "forced"]
)
def test_the_sequencer_verifies_itself_without_a_secret_or_when_told(
    tmp_path: Path, secret: str, verify: bool | None
) -> None:
    cfg = SequencerConfig(
        wal_dir=str(tmp_path / "w"), snapshot_dir=str(tmp_path / "s"),
        data_plane_secret=secret, verify_signatures=verify,
    )  # fmt: skip

    async def run() -> tuple[bool, list[int]]:
        svc = SequencerService(cfg)
        await svc.start()
        try:
            await svc.submit(setup_block(), operator=True)
            forged = order(1, 0, 300_000, 1)._replace(base_amount=5)
            checked = await svc.check_signatures([forged])
            codes = [o.code for o in await svc.submit([forged], checked=checked)]
            return bool(svc.status()["verifies_signatures"]), codes
        finally:
            await svc.stop()

    assert asyncio.run(run()) == (True, [ResultCode.INVALID_SIGNATURE])


def test_raydex_status_prints_the_audit_and_flags_a_failure(tmp_path: Path) -> None:
    from raydex.cluster.control.deploy import COMMITTER, audit_line

    p = trusting_producer(tmp_path)
    audit = SignatureAudit()
    assert audit_blocks(p, audit, [setup_block(), [order(1, 0, 300_000, 1)]]) == []
    line, failed = audit_line({COMMITTER: {"signature_audit": audit.status()}}) or ("", True)
    assert not failed and line.startswith("signature audit: 1 txs re-verified through seq 2")
    forged = order(1, 1, 300_000, 1)._replace(base_amount=7)
    assert audit_blocks(p, audit, [[forged]]) == [3]
    line, failed = audit_line({COMMITTER: {"signature_audit": audit.status()}}) or ("", False)
    assert failed and line.startswith("SIGNATURE AUDIT FAILED at seq 3: 1 txs")
    assert audit_line({COMMITTER: {"signature_audit": None}}) is None
