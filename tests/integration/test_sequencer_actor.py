"""The sequencer as a detached, restartable Ray actor: killed, it comes back with the same state."""

from __future__ import annotations

import time
from pathlib import Path

import ray

from raydex.actors.local import eth_market
from raydex.actors.sequencer.service import SequencerActor, SequencerConfig
from raydex.codecs import Deposit, RegisterApiKey, ResultCode, SetMarkPrice, generate_key

_, PUB = generate_key()
ETH = eth_market()  # ETH-PERP: 2 price / 4 size decimals, mark 3000.00


def test_a_killed_sequencer_is_restarted_by_ray_and_recovers_its_state_hash(
    ray_session: None, tmp_path: Path
) -> None:
    cfg = SequencerConfig(wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"))
    actor_cls = ray.remote(max_restarts=2, max_task_retries=0)(SequencerActor)
    seq = actor_cls.options(name="seq-test", namespace="raydex-test", num_cpus=0).remote(cfg)
    try:
        ops = [ETH, RegisterApiKey(1, 0, PUB), Deposit(1, 10**9)]
        outcomes = ray.get(seq.operator.remote(ops), timeout=60)
        assert {o.code for o in outcomes} == {ResultCode.OK}
        for price in (300_100, 300_200):
            ray.get(seq.operator.remote([SetMarkPrice(0, price)]), timeout=30)
        before = ray.get(seq.status.remote(), timeout=30)
        assert before["seq"] == 3

        ray.kill(seq, no_restart=False)
        after = None
        for _ in range(60):  # bounded: the restart takes a few seconds
            try:
                after = ray.get(seq.status.remote(), timeout=30)
            except ray.exceptions.RayActorError:
                after = None
            if after is not None and after["pid"] != before["pid"]:
                break
            time.sleep(0.5)
        assert after is not None
        assert after["state_hash"] == before["state_hash"]
        assert after["seq"] == before["seq"] and after["replayed_blocks"] == 3
    finally:
        ray.kill(seq, no_restart=True)
