"""Takeover on the local Ray: a primary with a standby (replicated durability), the arbiter and
a snapshot holder following the primary; the primary is killed for good; the standby takes over
when its lease lapses, with every acknowledged block and the same state hash, in epoch 2; the
holder finds the new primary through the arbiter and follows it; the old primary, started again
on its own log, is refused (fenced). The takeover time is printed (a figure, not a bound)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import ray

from raydex.actors.local import eth_market
from raydex.actors.runtime import DEPLOYMENT_ENV
from raydex.actors.sequencer.arbiter import ARBITER_NAME, ArbiterActor
from raydex.actors.sequencer.service import SequencerActor, SequencerConfig
from raydex.actors.sequencer.standby import StandbyActor
from raydex.actors.snapshot import SnapshotActor, SnapshotConfig
from raydex.actors.transport import target_of
from raydex.codecs import Deposit, RegisterApiKey, ResultCode, SetMarkPrice, generate_key

_, PUB = generate_key()
NS = "raydex-takeover-test"


def status_when(actor: Any, check: Any, what: str) -> dict[str, Any]:
    for _ in range(600):  # bounded: each step takes seconds at most
        st: dict[str, Any] = ray.get(actor.status.remote(), timeout=30)
        if check(st):
            return st
        time.sleep(0.05)
    raise AssertionError(f"never: {what}")


def test_the_standby_takes_over_a_lost_primary_and_the_old_primary_is_fenced(
    ray_session: None, tmp_path: Path
) -> None:
    env = {"env_vars": {DEPLOYMENT_ENV: NS}}
    opts = {"namespace": NS, "num_cpus": 0, "runtime_env": env}
    arbiter = (
        ray.remote(ArbiterActor).options(name=ARBITER_NAME, **opts).remote(f"{NS}/{tmp_path.name}")
    )
    scfg = SequencerConfig(
        wal_dir=str(tmp_path / "b" / "wal"), snapshot_dir=str(tmp_path / "b" / "snap"),
        data_plane="tcp",
    )  # fmt: skip
    standby_cls = ray.remote(max_restarts=0, max_task_retries=0)(StandbyActor)
    standby = standby_cls.options(name="standby", **opts).remote(scfg, None, None, "primary")
    port = status_when(standby, lambda s: s.get("replication_port"), "standby serving")[
        "replication_port"
    ]
    pcfg = SequencerConfig(
        wal_dir=str(tmp_path / "a" / "wal"), snapshot_dir=str(tmp_path / "a" / "snap"),
        data_plane="tcp", durability="replicated",
        standby_target=target_of("tcp", "127.0.0.1", port), standby_name="standby",
    )  # fmt: skip
    primary_cls = ray.remote(max_restarts=0, max_task_retries=0)(SequencerActor)
    primary = primary_cls.options(name="primary", **opts).remote(pcfg)
    again: Any = None
    holder: Any = None
    try:
        ops = [eth_market(), RegisterApiKey(1, 0, PUB), Deposit(1, 10**9)]
        assert {o.code for o in ray.get(primary.operator.remote(ops), timeout=60)} == {
            ResultCode.OK
        }
        acked = [ray.get(primary.operator.remote([SetMarkPrice(0, p)]), timeout=30)[0]
                 for p in (300_100, 300_200, 300_300)]  # fmt: skip
        started = ray.get(primary.start.remote(), timeout=30)
        txlog = target_of("tcp", "127.0.0.1", started["txlog_port"])
        holder_cls = ray.remote(max_restarts=0, max_task_retries=0)(SnapshotActor)
        hcfg = SnapshotConfig(dir=str(tmp_path / "a" / "snap"))
        holder = holder_cls.options(name="snapshot", **opts).remote(hcfg, txlog, txlog)
        ray.get(holder.start.remote(), timeout=60)
        before = ray.get(primary.state_hash.remote(), timeout=30)
        status_when(holder, lambda s: s["seq"] == 4, "the holder at seq 4")
        st = status_when(primary, lambda s: s["replication"]["in_sync"], "standby in sync")
        assert st["epoch"] == 1 and st["replication"]["acked_seq"] == before["seq"] == 4
        assert ray.get(arbiter.view.remote())["in_sync"]

        t0 = time.monotonic()
        ray.kill(primary, no_restart=True)  # the primary's host is gone
        st = status_when(standby, lambda s: s.get("role") == "primary", "the takeover")
        took = time.monotonic() - t0
        print(f"\ntakeover: {took:.2f} s from the kill to serving (lease 3 s)")
        assert st["epoch"] == 2 and st["seq"] == before["seq"]
        assert max(o.seq for o in acked) <= st["seq"]
        assert ray.get(standby.state_hash.remote(), timeout=30) == before
        out = ray.get(standby.operator.remote([SetMarkPrice(0, 300_400)]), timeout=30)
        assert out[0].code == ResultCode.OK and out[0].seq == 5
        # the holder found the new primary through the arbiter and follows it
        held = status_when(holder, lambda s: s["seq"] == 5, "the holder following the new primary")
        assert held["state_hash"] == ray.get(standby.state_hash.remote(), timeout=30)["state_hash"]
        view = ray.get(arbiter.status.remote())
        assert (view["epoch"], view["primary"]) == (2, "standby")
        assert view["repr"].startswith("arbiter epoch=2 primary=standby")

        # the old primary comes back on its own log: it may not sequence
        again = primary_cls.options(name="primary", **opts).remote(pcfg)
        st = status_when(again, lambda s: s["refused"], "the old primary refused")
        assert "fenced" in st["refused"] and "'standby' is the primary of epoch 2" in st["refused"]
        assert st["seq"] == 0 and st["data_port"] == 0  # nothing recovered, nothing served
    finally:
        for actor in (again, holder, primary, standby, arbiter):
            if actor is not None:
                ray.kill(actor, no_restart=True)
