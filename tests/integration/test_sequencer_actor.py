"""The sequencer as a detached, restartable Ray actor: killed, it comes back with the same state;
a newest snapshot that is corrupt does not keep it down; a log it cannot use is a refused start:
the actor stays up without serving, its status says why, and it serves once the log is restored
(any other failed start ends the actor's process, and Ray restarts it)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import ray

from raydex.actors.local import eth_market
from raydex.actors.sequencer import BlockProducer, Wal
from raydex.actors.sequencer.service import SequencerActor, SequencerConfig
from raydex.actors.snapshot import write_snapshot
from raydex.codecs import (
    Deposit,
    RegisterApiKey,
    ResultCode,
    SetMarkPrice,
    Verifier,
    encode_tx,
    generate_key,
)

_, PUB = generate_key()
ETH = eth_market()  # ETH-PERP: 2 price / 4 size decimals, mark 3000.00


def spawn(cfg: SequencerConfig, name: str, restarts: int = 2) -> Any:
    actor_cls = ray.remote(max_restarts=restarts, max_task_retries=0)(SequencerActor)
    return actor_cls.options(name=name, namespace="raydex-test", num_cpus=0).remote(cfg)


def restarted(actor: Any, old_pid: int) -> dict[str, Any] | None:
    for _ in range(60):  # bounded: a restart takes a few seconds
        try:
            st: dict[str, Any] = ray.get(actor.status.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            st = {}
        if st.get("pid", old_pid) != old_pid:
            return {**st, **ray.get(actor.state_hash.remote(), timeout=30)}
        time.sleep(0.5)
    return None


def test_a_killed_sequencer_is_restarted_by_ray_and_recovers_its_state_hash(
    ray_session: None, tmp_path: Path
) -> None:
    cfg = SequencerConfig(wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"))
    seq = spawn(cfg, "seq-test")
    try:
        ops = [ETH, RegisterApiKey(1, 0, PUB), Deposit(1, 10**9)]
        outcomes = ray.get(seq.operator.remote(ops), timeout=60)
        assert {o.code for o in outcomes} == {ResultCode.OK}
        for price in (300_100, 300_200):
            ray.get(seq.operator.remote([SetMarkPrice(0, price)]), timeout=30)
        before = {**ray.get(seq.status.remote(), timeout=30), **ray.get(seq.state_hash.remote())}
        assert before["seq"] == 3

        ray.kill(seq, no_restart=False)
        after = restarted(seq, before["pid"])
        assert after is not None
        assert after["state_hash"] == before["state_hash"]
        assert after["seq"] == before["seq"] and after["replayed_blocks"] == 3
    finally:
        ray.kill(seq, no_restart=True)


def test_a_corrupt_newest_snapshot_does_not_keep_the_sequencer_down(
    ray_session: None, tmp_path: Path
) -> None:
    cfg = SequencerConfig(wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"))
    seq = spawn(cfg, "seq-test-snap")
    try:
        ray.get(seq.operator.remote([ETH, RegisterApiKey(1, 0, PUB)]), timeout=60)
        ray.get(seq.operator.remote([Deposit(1, 10**9)]), timeout=30)
        before = {**ray.get(seq.status.remote(), timeout=30), **ray.get(seq.state_hash.remote())}
        ray.kill(seq, no_restart=True)
        # the snapshot a holder would have written at seq 2, then damaged on disk
        shutil.copytree(tmp_path / "wal", tmp_path / "copy")
        producer, _ = BlockProducer.recover(tmp_path / "none", Wal(tmp_path / "copy"), Verifier())
        assert producer.seq == 2
        path, _ = write_snapshot(Path(cfg.snapshot_dir), producer.engine, 2, producer.height)
        meta = path / "meta.json"
        meta.write_text(meta.read_text().replace('"state_hash": "', '"state_hash": "ff'))

        seq = spawn(cfg, "seq-test-snap")
        ray.get(seq.start.remote(), timeout=60)  # status answers at once, also while starting
        after = {**ray.get(seq.status.remote(), timeout=60), **ray.get(seq.state_hash.remote())}
        assert after["state_hash"] == before["state_hash"] and after["seq"] == 2
        assert after["replayed_blocks"] == 2  # from seq 0 and the whole WAL
        assert (Path(cfg.snapshot_dir) / f".corrupt-{path.name}").is_dir()
    finally:
        ray.kill(seq, no_restart=True)


def test_a_sequencer_whose_log_cannot_be_used_stays_up_refusing_and_says_why(
    ray_session: None, tmp_path: Path
) -> None:
    wal = Wal(tmp_path / "wal")
    for s in (1, 2, 3):
        wal.append_frames(s, s, [encode_tx(Deposit(1, s))])
    wal.close()
    seg = wal.segments()[-1]
    good = seg.read_bytes()
    data = bytearray(good)
    data[40] ^= 0xFF  # inside block 1, with blocks 2 and 3 intact after it: not a torn tail
    seg.write_bytes(bytes(data))
    cfg = SequencerConfig(
        wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"), repair_timeout_s=1.0
    )
    seq = spawn(cfg, "seq-test-broken", restarts=1)
    try:
        # alive, not serving: its status says why, and it keeps trying
        st: dict[str, Any] = {}
        for _ in range(120):  # bounded
            st = ray.get(seq.status.remote(), timeout=30)
            if st.get("refused_starts", 0) >= 2:
                break
            time.sleep(0.25)
        assert "damaged WAL" in st["refused"] and "refusing to start" in st["refused"]
        assert "state=refused" in st["repr"] and st["data_port"] == 0
        assert seg.read_bytes() == bytes(data)  # and the damaged log was not truncated
        seg.write_bytes(good)  # the operator restores it: the next attempt serves
        started = ray.get(seq.start.remote(), timeout=60)
        assert started["seq"] == 3 and started["data_port"] > 0
        assert ray.get(seq.status.remote(), timeout=30)["refused"] is None
    finally:
        ray.kill(seq, no_restart=True)
