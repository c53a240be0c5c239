"""State checks (``actors/runtime/checks.py``): followers hash their state at the same checkpoint
seqs, in chunks between event-loop turns, and compare.

A block producer runs the engine workload; a replica and the snapshot holder's delta state follow
its blocks. At every checkpoint each hashes what it holds: the hashes equal the engine's digest
at that seq, whatever else the loop applies while hashing, and a replica whose caches were
changed behind the stream's back is found out at the next checkpoint."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from itertools import islice
from typing import Any

import pytest
from kit.workload import Workload

from raydex.actors.replica.cache.state import ReplicaState
from raydex.actors.runtime.checks import StateChecks
from raydex.actors.sequencer import BlockProducer
from raydex.actors.snapshot.deltas import DeltaState
from raydex.codecs import Verifier, decode_block
from raydex.engine import Engine, digest_steps, state_digest


def blocks(
    accounts: int, commands: int, per_block: int, seed: int
) -> Iterator[tuple[int, bytes, bytes]]:
    """(seq, block frame, the engine's digest after it) for a workload run in blocks."""
    wl = Workload(accounts=accounts, markets=2, seed=seed, oracle_every=40, funding_every=300)
    producer = BlockProducer(Engine(), None, Verifier())
    producer.verify_signatures = False
    stream = [*wl.setup(), *islice(wl.commands(commands), commands)]
    for i in range(0, len(stream), per_block):
        chunk = stream[i : i + per_block]
        producer.submit([c for c, _ in chunk], chunk[0][1] * 1_000_000, replay=True)
        block = producer.close_block(write_wal=False)
        assert block is not None
        yield producer.seq, block.frame, state_digest(producer.engine.records())


def drive(steps: Any) -> bytes:
    try:
        while True:
            next(steps)
    except StopIteration as done:
        digest: bytes = done.value
        return digest


def test_the_digest_in_steps_is_the_digest_whatever_the_chunk() -> None:
    frames = list(blocks(accounts=40, commands=600, per_block=30, seed=5))
    records = list(ReplicaState().records())  # an empty state too
    assert drive(digest_steps(records, chunk=1)) == state_digest(records)
    state = ReplicaState()
    for _, frame, _ in frames:
        state.apply_block(frame)
    records = list(state.records())
    want = frames[-1][2]
    for chunk in (1, 7, 64, 2048, 10**6):
        assert drive(digest_steps(records, chunk=chunk)) == want
    with pytest.raises(ValueError):
        next(digest_steps(records, chunk=0))


def test_a_replica_and_the_holder_hash_each_checkpoint_as_the_engine_does() -> None:
    async def run() -> None:
        replica, holder = ReplicaState(), DeltaState()
        r_checks, h_checks = StateChecks(every_blocks=4, keep=3), StateChecks(every_blocks=4)
        want: dict[int, str] = {}
        for seq, frame, digest in blocks(accounts=60, commands=1200, per_block=25, seed=6):
            replica.apply_block(frame)
            holder.apply(decode_block(frame).events)
            if r_checks.due(seq):
                want[seq] = digest.hex()
                r_checks.take(seq, replica.records())
                h_checks.take(seq, holder.records())
            await asyncio.sleep(0)  # one loop turn per block: the hashing interleaves with it
        await r_checks.settled()
        await h_checks.settled()
        assert r_checks.done and len(r_checks.done) <= 3  # the newest `keep`
        for seq, digest in r_checks.done.items():
            assert seq % 4 == 0 and digest == want[seq] == h_checks.done[seq]
        verdict = r_checks.compare("holder", h_checks.done)
        assert verdict is not None and verdict.agrees
        assert verdict.seq == max(r_checks.done)
        assert r_checks.facts() == {
            "check": f"{r_checks.done[verdict.seq][:8]}@{verdict.seq}",
            "agrees": f"holder@{verdict.seq}",
        }
        assert not r_checks.diverged and r_checks.divergences == 0

    asyncio.run(run())


def test_a_replica_whose_caches_were_changed_is_found_out_at_the_next_checkpoint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    after: list[int] = []  # the checkpoints after the change

    async def run() -> StateChecks:
        replica, holder = ReplicaState(), DeltaState()
        r_checks, h_checks = StateChecks(every_blocks=5), StateChecks(every_blocks=5)
        for n, (seq, frame, _) in enumerate(
            blocks(accounts=30, commands=400, per_block=20, seed=7)
        ):
            replica.apply_block(frame)
            holder.apply(decode_block(frame).events)
            if n == 12:  # a bug: an entry no block made (an L1 address of no account)
                replica.l1_addresses[10**6] = b"\x01" * 20
            if r_checks.due(seq):
                if n >= 12:
                    after.append(seq)
                r_checks.take(seq, replica.records())
                h_checks.take(seq, holder.records())
                await r_checks.settled()
                await h_checks.settled()
                verdict = r_checks.compare("holder", h_checks.done)
                assert verdict is not None and verdict.agrees == (n < 12)
                r_checks.compare("holder", h_checks.done)  # asked again: counted once per seq
        return r_checks

    with caplog.at_level(logging.ERROR):
        checks = asyncio.run(run())
    assert len(after) >= 2
    assert checks.diverged and checks.divergences == len(after)
    v = checks.verdict
    assert v is not None and not v.agrees and v.ours != v.theirs
    assert checks.facts()["agrees"] == f"NO:holder@{v.seq}"
    assert "STATE DIVERGED" in caplog.text
    st = checks.status()["state_check"]
    assert st == {"every_blocks": 5, "skipped": 0, "divergences": len(after), "peer": "holder",
                  "seq": v.seq, "agrees": False}  # fmt: skip


def test_checkpoints_after_a_reload_to_an_older_state_are_forgotten_and_bad_input_refused() -> None:
    checks = StateChecks(every_blocks=10)
    for seq in (10, 20, 30):
        checks.take(seq, [])  # no event loop: hashed at once
    assert list(checks.done) == [10, 20, 30]
    checks.forget_after(20)
    assert list(checks.done) == [10, 20] and checks.latest() == (20, checks.done[20])
    assert checks.latest_seq() == 20 and StateChecks(every_blocks=10).latest_seq() == -1
    assert not checks.due(0) and not checks.due(15) and checks.due(40)
    assert checks.compare("holder", {99: "x"}) is None  # nothing in common: no verdict
    with pytest.raises(ValueError):
        StateChecks(every_blocks=0)


def test_a_follower_whose_seq_stands_still_hashes_it_though_it_is_no_checkpoint() -> None:
    async def run() -> None:
        frames = list(blocks(accounts=20, commands=100, per_block=20, seed=8))
        replica = ReplicaState()
        checks = StateChecks(every_blocks=10**6)  # no checkpoint in reach
        for _, frame, _ in frames:  # moving: a new seq at every look, nothing hashed
            replica.apply_block(frame)
            checks.look(replica.seq, replica.records)
        assert not checks.done
        checks.look(replica.seq, replica.records)  # standing still since the last look
        await checks.settled()
        assert checks.done == {replica.seq: frames[-1][2].hex()}
        checks.look(replica.seq, replica.records)  # hashed once per seq
        assert checks._task is not None and checks._task.done()
        # the loop does the same by itself
        other = StateChecks(every_blocks=10**6)
        task = asyncio.get_running_loop().create_task(
            other.run_quiet(lambda: replica.seq, replica.records, interval_s=0.01)
        )
        for _ in range(500):  # bounded
            if other.done:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        assert other.done == checks.done

    asyncio.run(run())
