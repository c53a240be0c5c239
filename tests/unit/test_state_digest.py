"""One state hash for every role: the engine's records and a replica's caches hash alike.

A block producer runs the engine workload (makers, takers, cancels, modifies, transfers, oracle
moves with liquidations, funding) in blocks; a replica follows every block and another boots from
a snapshot midway. After every block, ``state_digest`` of the engine's records equals each
replica's ``state_hash()`` at the same seq, and a change a replica alone made shows."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

import pytest
from kit.workload import Workload

from raydex.actors.replica.cache.state import ReplicaState
from raydex.actors.sequencer import BlockProducer
from raydex.codecs import AccountRecord, OrderRecord, Verifier
from raydex.engine import Engine, state_digest


def run_blocks(
    producer: BlockProducer, commands: list[tuple[Any, int]], per_block: int
) -> Iterator[bytes]:
    """Execute ``commands`` in blocks of ``per_block``, yielding each block's frame once closed."""
    for i in range(0, len(commands), per_block):
        chunk = commands[i : i + per_block]
        producer.submit([c for c, _ in chunk], chunk[0][1] * 1_000_000, replay=True)
        block = producer.close_block(write_wal=False)
        assert block is not None
        yield block.frame


@pytest.mark.parametrize("seed", [1, 2])
def test_engine_and_replicas_report_the_same_hash_at_every_seq(seed: int) -> None:
    wl = Workload(accounts=60, markets=2, seed=seed, oracle_every=40, funding_every=300)
    producer = BlockProducer(Engine(), None, Verifier())
    producer.verify_signatures = False
    live = ReplicaState()
    late: ReplicaState | None = None
    for frame in run_blocks(producer, list(wl.setup()), 50):
        live.apply_block(frame)
    stream = list(islice(wl.commands(1500), 1500))
    for n, frame in enumerate(run_blocks(producer, stream, 25)):
        live.apply_block(frame)
        if late is not None:
            late.apply_block(frame)
        if n == 40:
            eng = producer.engine
            late = ReplicaState.from_records(eng.records(), producer.seq, producer.height)
        want = state_digest(producer.engine.records())
        assert live.seq == producer.seq
        assert live.state_hash() == want, f"replica differs at seq {producer.seq}"
        if late is not None:
            assert late.state_hash() == want, f"booted replica differs at seq {producer.seq}"


def test_the_digest_ignores_record_order_and_priority_but_not_state() -> None:
    wl = Workload(accounts=20, markets=1, seed=3)
    producer = BlockProducer(Engine(), None, Verifier())
    producer.verify_signatures = False
    for _ in run_blocks(producer, [*wl.setup(), *islice(wl.commands(400), 400)], 40):
        pass
    records = list(producer.engine.records())
    digest = state_digest(records)
    assert state_digest(reversed(records)) == digest
    reprioritized = [r._replace(priority=r.priority + 7) if type(r) is OrderRecord else r
                     for r in records]  # fmt: skip
    assert state_digest(reprioritized) == digest
    i = next(i for i, r in enumerate(records) if type(r) is AccountRecord)
    richer = list(records)
    richer[i] = records[i]._replace(collateral=records[i].collateral + 1)
    assert state_digest(richer) != digest
    assert records[i].master_index == records[i].account_index  # a master: its own index
    adopted = list(records)
    adopted[i] = records[i]._replace(master_index=records[i].account_index + 1)
    assert state_digest(adopted) != digest
    assert any(type(r) is OrderRecord for r in records)


def test_a_replica_whose_caches_differ_reports_another_hash() -> None:
    wl = Workload(accounts=20, markets=1, seed=4)
    producer = BlockProducer(Engine(), None, Verifier())
    producer.verify_signatures = False
    frames = list(run_blocks(producer, [*wl.setup(), *islice(wl.commands(200), 200)], 20))
    a, b = ReplicaState(), ReplicaState()
    for f in frames:
        a.apply_block(f)
        b.apply_block(f)
    assert a.state_hash() == b.state_hash() == state_digest(producer.engine.records())
    acct = next(iter(b.accounts))
    b.accounts[acct].collateral += 1
    assert b.state_hash() != a.state_hash()
