"""The sequencer core executes signed txs into blocks, logs them before answering, and recovers
from the newest snapshot plus the WAL to exactly the state it had."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from raydex.actors.local import eth_market
from raydex.actors.sequencer import BlockProducer, Wal
from raydex.actors.snapshot import newest_snapshot, write_snapshot
from raydex.codecs import (
    CreateOrder,
    Deposit,
    OrderUpdated,
    RegisterApiKey,
    ResultCode,
    SetMarkPrice,
    TxExecuted,
    Verifier,
    decode_block,
    generate_key,
    read_snapshot_ipc,
    sign_tx,
    write_snapshot_ipc,
)
from raydex.engine import Engine

NS = 1_700_000_000_000_000_000
FAR = 2_000_000_000_000
SEED, PUB = generate_key()
ETH = eth_market()  # ETH-PERP: 2 price / 4 size decimals, mark 3000.00


def producer(tmp: Path) -> BlockProducer:
    return BlockProducer(Engine(), Wal(tmp / "wal"), Verifier())


def setup(p: BlockProducer, accounts: range) -> None:
    ops: list[object] = [ETH]
    for a in accounts:
        ops += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    p.submit(ops, NS, operator=True)
    block = p.close_block()
    assert block is not None
    assert {o.code for o in block.outcomes} == {ResultCode.OK}


def order(account: int, nonce: int, price: int, is_ask: int, size: int = 100) -> CreateOrder:
    tx = CreateOrder(
        account, 0, 0, nonce + 1, size, price, is_ask, 0, 1, 0, 0, -1, FAR, nonce, bytes(80)
    )
    return sign_tx(tx, SEED)


def test_a_block_reports_each_tx_and_carries_its_events(tmp_path: Path) -> None:
    p = producer(tmp_path)
    setup(p, range(1, 3))
    at = p.submit([order(1, 0, 300_100, 1), order(2, 0, 300_100, 0)], NS + 1_000)
    block = p.close_block()
    assert block is not None and block.seq == 2 and list(at) == [0, 1]
    assert [o.code for o in block.outcomes] == [200, 200]
    assert block.outcomes[0].order_index >= 1 << 48
    decoded = decode_block(block.frame)
    assert decoded.seq == 2 and decoded.height == block.height
    executed = [e for e in decoded.events if isinstance(e, TxExecuted)]
    assert [e.tx_hash for e in executed] == [o.tx_hash for o in block.outcomes]
    assert any(isinstance(e, OrderUpdated) for e in decoded.events)


def test_bad_signatures_and_operator_commands_from_users_change_nothing(tmp_path: Path) -> None:
    p = producer(tmp_path)
    setup(p, range(1, 2))
    before = p.engine.state_hash()
    forged = order(1, 0, 300_000, 0)._replace(price=1)
    p.submit([forged, Deposit(1, 5)], NS + 1)
    block = p.close_block()
    assert block is not None
    assert [o.code for o in block.outcomes] == [
        ResultCode.INVALID_SIGNATURE,
        ResultCode.OPERATOR_ONLY,
    ]
    assert block.tx_frames == []
    assert p.engine.state_hash() == before


def test_recovery_from_snapshot_and_wal_reproduces_the_state_hash(tmp_path: Path) -> None:
    p = producer(tmp_path)
    setup(p, range(1, 5))
    nonce = {a: 0 for a in range(1, 5)}
    for step in range(30):
        txs = []
        for a in range(1, 5):
            txs.append(order(a, nonce[a], 300_000 + (step % 7) * 10, (a + step) % 2))
            nonce[a] += 1
        p.submit(txs, NS + step * 1_000_000)
        if step == 3:
            p.submit([SetMarkPrice(0, 300_050)], NS + step * 1_000_000, operator=True)
        p.close_block()
        if step == 12:
            write_snapshot(tmp_path / "snap", p.engine, p.seq, p.height)
    assert p.wal is not None
    p.wal.close()
    expected = (p.engine.state_hash(), p.seq, p.height)
    snap = newest_snapshot(tmp_path / "snap")
    assert snap is not None and snap.name.endswith("14")

    again, replayed = BlockProducer.recover(tmp_path / "snap", Wal(tmp_path / "wal"), Verifier())
    assert (again.engine.state_hash(), again.seq, again.height) == expected
    assert replayed == expected[1] - 14
    again.engine.validate_internal_state()


def test_with_verification_off_the_producer_trusts_the_replicas_dry_run(tmp_path: Path) -> None:
    p = producer(tmp_path)
    setup(p, range(1, 2))
    p.verify_signatures = False
    forged = order(1, 0, 300_000, 0)._replace(sig=bytes(80))
    p.submit([forged], NS + 1)
    block = p.close_block()
    assert block is not None and [o.code for o in block.outcomes] == [ResultCode.OK]


def test_recovery_rebuilds_the_published_blocks_for_followers_behind_the_crash(
    tmp_path: Path,
) -> None:
    p = producer(tmp_path)
    setup(p, range(1, 3))
    published = {}
    for step in range(6):
        forged = order(1, 99, 300_000, 0)._replace(price=7)  # refused before the engine
        txs = (
            [forged]
            if step == 2
            else [order(1, step, 300_000 + step, 1), order(2, step, 299_000, 0)]
        )
        p.submit(txs, NS + step)
        block = p.close_block()
        assert block is not None
        published[block.seq] = block
    assert p.wal is not None
    p.wal.close()

    again, replayed = BlockProducer.recover(
        tmp_path / "snap", Wal(tmp_path / "wal"), Verifier(), keep_blocks=4
    )
    assert replayed == 7 and again.engine.state_hash() == p.engine.state_hash()
    rebuilt = list(again.recovered_blocks)
    assert [b.seq for b in rebuilt] == [4, 5, 6, 7]
    for b in rebuilt:  # byte for byte, also seq 4 which held only a tx refused before the engine
        assert b.wal_record == published[b.seq].wal_record
        assert b.frame == published[b.seq].frame
        assert b.outcomes == published[b.seq].outcomes
    refused = decode_block(rebuilt[0].frame).events
    assert [(e.nonce, e.code) for e in refused] == [(99, ResultCode.INVALID_SIGNATURE)]


def test_refused_txs_between_executed_ones_are_rebuilt_at_their_positions(tmp_path: Path) -> None:
    p = producer(tmp_path)
    setup(p, range(1, 3))
    forged = order(1, 50, 300_000, 0)._replace(price=7)
    txs = [order(1, 0, 300_100, 1), forged, Deposit(2, 5), order(2, 0, 300_100, 0)]
    p.submit(txs, NS + 10)
    block = p.close_block()
    assert block is not None
    assert [o.code for o in block.outcomes] == [200, 21120, ResultCode.OPERATOR_ONLY, 200]
    assert p.wal is not None
    p.wal.close()
    again, _ = BlockProducer.recover(
        tmp_path / "snap", Wal(tmp_path / "wal"), Verifier(), keep_blocks=1
    )
    (rebuilt,) = again.recovered_blocks
    assert rebuilt.frame == block.frame and rebuilt.wal_record == block.wal_record
    assert again.engine.state_hash() == p.engine.state_hash()


def test_recovery_falls_back_to_an_older_snapshot_when_the_newest_is_corrupt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = producer(tmp_path)
    setup(p, range(1, 3))
    for step in range(8):
        p.submit([order(1, step, 300_000 + step, 1), order(2, step, 299_000, 0)], NS + step)
        p.close_block()
        if step in (2, 5):
            write_snapshot(tmp_path / "snap", p.engine, p.seq, p.height)
    assert p.wal is not None
    p.wal.close()
    newest = newest_snapshot(tmp_path / "snap")
    assert newest is not None and newest.name.endswith("7")
    seq, tables = read_snapshot_ipc(newest)  # a snapshot that decodes but is not that state
    col = tables["accounts"].column_names.index("collateral")
    field = tables["accounts"].schema.field(col)
    bumped = pa.array([c.as_py() + 1 for c in tables["accounts"].column(col)], field.type)
    tables["accounts"] = tables["accounts"].set_column(col, field, bumped)
    write_snapshot_ipc(newest, seq, tables)
    with caplog.at_level(logging.WARNING):
        again, replayed = BlockProducer.recover(
            tmp_path / "snap", Wal(tmp_path / "wal"), Verifier()
        )
    assert again.engine.state_hash() == p.engine.state_hash() and again.seq == p.seq
    assert replayed == p.seq - 4  # from the snapshot at seq 4
    assert "snapshot rejected" in caplog.text and str(newest) in caplog.text
    assert "is not meta.json's" in caplog.text  # it decoded: only the state hash told
    assert not newest.exists() and (newest.parent / f".corrupt-{newest.name}").is_dir()


def test_recovery_from_seq_zero_and_the_whole_wal_when_no_snapshot_is_usable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = producer(tmp_path)
    setup(p, range(1, 3))
    p.submit([order(1, 0, 300_000, 1)], NS + 1)
    p.close_block()
    path, _ = write_snapshot(tmp_path / "snap", p.engine, p.seq, p.height)
    meta = path / "meta.json"
    meta.write_text(meta.read_text().replace('"state_hash": "', '"state_hash": "00'))
    assert p.wal is not None
    p.wal.close()
    with caplog.at_level(logging.WARNING):
        again, replayed = BlockProducer.recover(
            tmp_path / "snap", Wal(tmp_path / "wal"), Verifier()
        )
    assert replayed == 2 and again.engine.state_hash() == p.engine.state_hash()
    assert "state hash" in caplog.text and "starting from seq 0 and the whole WAL" in caplog.text


def test_a_snapshot_the_wal_does_not_continue_is_skipped(tmp_path: Path) -> None:
    p = producer(tmp_path)
    setup(p, range(1, 3))
    for step in range(4):
        p.submit([order(1, step, 300_000 + step, 1)], NS + step)
        p.close_block()
        if step == 1:
            write_snapshot(tmp_path / "snap", p.engine, p.seq, p.height, record_crc=12345)
    assert p.wal is not None
    p.wal.close()
    again, replayed = BlockProducer.recover(tmp_path / "snap", Wal(tmp_path / "wal"), Verifier())
    assert replayed == p.seq and again.engine.state_hash() == p.engine.state_hash()
