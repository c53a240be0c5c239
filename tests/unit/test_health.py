"""The deployment's health verdict (``raydex status``'s exit status, the monitor's metrics), judged
from facts as Ray and the actors report them; no Ray needed."""

from __future__ import annotations

from typing import Any

import pytest

from raydex.cluster.bundle import BundlePlacement
from raydex.cluster.control.health import (
    BROKEN,
    DEGRADED,
    HEALTHY,
    Facts,
    RestartWindow,
    assess,
)
from raydex.cluster.control.monitor import Exported, export
from raydex.cluster.control.record import ActorEntry
from raydex.observability.metrics import LocalSink


def bundle(role: Any, group: str, index: int, host: str) -> BundlePlacement:
    return BundlePlacement(role, group, index, host, 0, (index,), 1.0, False, True, False)


def placed(role: Any, group: str, index: int, host: str) -> ActorEntry:
    return ActorEntry(role, group, index, f"pg{index}", bundle(role, group, index, host))


PLANNED = {
    "raydex-sequencer": placed("sequencer", "sequencer", 0, "head"),
    "raydex-snapshot": placed("snapshot", "snapshot", 0, "head"),
    "raydex-committer": placed("committer", "committer", 0, "head"),
    "raydex-replica-public-0": placed("replica", "public", 0, "w1"),
    "raydex-replica-public-1": placed("replica", "public", 1, "w2"),
    "raydex-monitor": ActorEntry("monitor"),
}
NODES = {"n-head": "head", "n-w1": "w1", "n-w2": "w2"}
AUDIT = {"seq": 9, "pending_blocks": 0, "skipped_blocks": 0, "failed_at": None, "failed_txs": 0,
         "audited_txs": 5, "failures": []}  # fmt: skip


def healthy_facts(**changes: Any) -> dict[str, Any]:
    table = {
        n: {"state": "ALIVE", "num_restarts": 0, "node_id": f"n-{e.host or 'head'}"}
        for n, e in PLANNED.items()
    }
    statuses: dict[str, dict[str, Any]] = {n: {"seq": 9} for n in PLANNED}
    statuses["raydex-committer"]["signature_audit"] = dict(AUDIT)
    for n in PLANNED:
        if n.startswith("raydex-replica-"):
            statuses[n]["sequencer"] = {"reachable": True, "for_s": 30.0, "cause": ""}
    return {"planned": PLANNED, "table": table, "live_nodes": dict(NODES),
            "statuses": statuses, **changes}  # fmt: skip


def verdict(**changes: Any) -> Any:
    return assess(Facts(**healthy_facts(**changes)))


def test_a_deployment_with_every_planned_actor_alive_is_healthy() -> None:
    h = verdict()
    assert h.code == HEALTHY and h.problems == ()
    assert {a.state for a in h.actors} == {"alive"}
    assert h.line().startswith("HEALTHY: 6 actors alive on 3 hosts")


def test_a_dead_host_makes_its_actors_host_down_and_the_verdict_degraded() -> None:
    f = healthy_facts()
    del f["live_nodes"]["n-w2"]
    h = assess(Facts(**f))
    assert h.code == DEGRADED
    assert h.hosts == {"head": True, "w1": True, "w2": False}
    down = {a.name: a.state for a in h.actors if not a.ok}
    assert down == {"raydex-replica-public-1": "host down"}
    assert "host w2 is down" in h.line()


@pytest.mark.parametrize(
    ("state", "expected"),
    [("RESTARTING", "restarting"), ("DEAD", "dead"), ("PENDING_CREATION", "restarting")],
)
def test_an_actor_ray_is_restarting_or_lost_is_named_and_degrades(
    state: str, expected: str
) -> None:
    f = healthy_facts()
    f["table"]["raydex-sequencer"] = {"state": state, "num_restarts": 7, "node_id": "n-head"}
    h = assess(Facts(**f))
    (bad,) = [a for a in h.actors if not a.ok]
    assert (bad.name, bad.state, bad.restarts, h.code) == ("raydex-sequencer", expected, 7,
                                                           DEGRADED)  # fmt: skip


def test_an_actor_that_does_not_answer_in_time_is_unreachable() -> None:
    f = healthy_facts()
    f["statuses"]["raydex-snapshot"] = {"error": "no answer within 3 s"}
    (bad,) = [a for a in assess(Facts(**f)).actors if not a.ok]
    assert (bad.state, bad.detail) == ("unreachable", "no answer within 3 s")


def test_a_planned_actor_ray_does_not_know_is_missing() -> None:
    f = healthy_facts()
    del f["table"]["raydex-replica-public-0"]
    (bad,) = [a for a in assess(Facts(**f)).actors if not a.ok]
    assert (bad.name, bad.state) == ("raydex-replica-public-0", "missing")


def test_a_replica_whose_block_stream_is_down_says_it_cannot_reach_the_sequencer() -> None:
    f = healthy_facts()
    f["statuses"]["raydex-replica-public-0"]["sequencer"] = {
        "reachable": False, "for_s": 12.5, "cause": "[Errno 111] Connection refused"}  # fmt: skip
    h = assess(Facts(**f))
    (bad,) = [a for a in h.actors if not a.ok]
    assert bad.state == "no sequencer" and "Connection refused" in bad.detail
    assert h.code == DEGRADED


def test_a_restart_loop_degrades_even_while_the_actor_is_up_and_one_restart_does_not() -> None:
    assert verdict(restarts_last_minute={"raydex-sequencer": 2}).code == HEALTHY
    h = verdict(restarts_last_minute={"raydex-sequencer": 3})
    (bad,) = [a for a in h.actors if not a.ok]
    assert bad.state == "restarting" and "restarted 3 times in the last minute" in bad.line()


def test_a_sequencer_that_refuses_to_start_on_its_log_is_broken_and_says_why() -> None:
    """Alive in Ray's table, not serving: its log cannot be used as it is (an operator decides),
    so the verdict is 3, not a restart to wait for."""
    f = healthy_facts()
    why = "damaged WAL record at 00000012.wal offset 4096 (seq 11 before, 13 after)"
    f["statuses"]["raydex-sequencer"]["refused"] = why
    h = assess(Facts(**f))
    (bad,) = [a for a in h.actors if not a.ok]
    assert (bad.name, bad.state) == ("raydex-sequencer", "refused")
    assert h.code == BROKEN and why in h.line()
    f["statuses"]["raydex-sequencer"]["refused"] = None  # the log restored: it starts
    assert assess(Facts(**f)).code == HEALTHY


def test_unaudited_blocks_degrade_and_a_failed_audit_or_a_divergence_is_broken() -> None:
    f = healthy_facts()
    f["statuses"]["raydex-committer"]["signature_audit"]["skipped_blocks"] = 2236
    h = assess(Facts(**f))
    assert (h.code, h.unaudited_blocks) == (DEGRADED, 2236)
    assert "2236 blocks passed the signature audit unaudited" in h.line()

    f = healthy_facts()
    audit = f["statuses"]["raydex-committer"]["signature_audit"]
    failure = {"tx_hash": "ab" * 32, "account_index": 3, "reason": "bad"}
    audit.update(failed_at=7, failed_txs=1, failures=[failure])
    assert assess(Facts(**f)).code == BROKEN

    f = healthy_facts()
    f["statuses"]["raydex-replica-public-0"].update(state_hash="a" * 64, state_hash_seq=9)
    f["statuses"]["raydex-replica-public-1"].update(state_hash="b" * 64, state_hash_seq=9)
    h = assess(Facts(**f))
    assert h.code == BROKEN and h.line().startswith("BROKEN: STATE DIVERGED at seq 9")


def test_restarts_are_counted_in_a_sliding_minute_from_samples_of_rays_total() -> None:
    w = RestartWindow(window_s=60.0)
    w.sample({"a": 5, "b": 0}, now=0.0)  # the first sample counts nothing: history unknown
    assert w.counts(now=0.0) == {"a": 0, "b": 0}
    w.sample({"a": 7, "b": 0}, now=10.0)
    w.sample({"a": 8, "b": 1}, now=40.0)
    assert w.counts(now=40.0) == {"a": 3, "b": 1}
    assert w.counts(now=71.0) == {"a": 1, "b": 1}  # the two at t=10 left the window
    w.sample({"b": 1}, now=72.0)  # a is gone: forgotten
    assert w.counts(now=72.0) == {"b": 1}


def test_the_monitor_exports_the_verdict_one_hot_states_and_hosts_and_zeroes_what_left() -> None:
    sink = LocalSink()
    exported = Exported()
    f = healthy_facts()
    del f["live_nodes"]["n-w2"]
    export(sink, "raydex", assess(Facts(**f)), exported)
    assert sink.value("raydex_health") == DEGRADED
    assert (
        sink.value("raydex_host_up", host="w2") == 0
        and sink.value("raydex_host_up", host="w1") == 1
    )
    rep1 = {"name": "raydex-replica-public-1"}
    assert sink.value("raydex_actor_state", state="host_down", **rep1) == 1
    assert sink.value("raydex_actor_state", state="alive", **rep1) == 0

    planned = {n: e for n, e in PLANNED.items() if n != "raydex-replica-public-1"}
    export(sink, "raydex", verdict(planned=planned), exported)
    assert sink.value("raydex_health") == HEALTHY
    assert sink.value("raydex_actor_state", **rep1) == 0  # every state of the removed replica
    assert "raydex-replica-public-1" not in exported.actors


# ---- replication: a standby in the spec ---------------------------------------------------------

WITH_STANDBY = {
    **PLANNED,
    "raydex-standby": placed("standby", "standby", 0, "w2"),
    "arbiter": ActorEntry("arbiter"),
}


def replicated(
    primary: str = "raydex-sequencer", standby: str = "raydex-standby", **rep: Any
) -> dict[str, Any]:
    """Facts of a deployment with a standby, whole: the shapes the primary's, the standby's and
    the arbiter's ``status()`` give; ``rep`` changes the primary's ``replication``."""
    f = healthy_facts(planned=WITH_STANDBY)
    f["table"].update({n: {"state": "ALIVE", "num_restarts": 0, "node_id": "n-head"}
                       for n in ("raydex-standby", "arbiter")})  # fmt: skip
    f["table"]["raydex-standby"]["node_id"] = "n-w2"
    f["statuses"][primary] = {
        "seq": 9, "epoch": 2, "refused": None,
        "replication": {"durability": "replicated", "standby": "tcp://10.0.0.4:50053",
                        "standby_name": standby, "acked_seq": 9, "lag_blocks": 0,
                        "connected": True, "degraded": False, "in_sync": True,
                        "degradations": 0, "fenced_by": None, "error": None, **rep},
    }  # fmt: skip
    f["statuses"][standby] = {"role": "standby", "epoch": 2, "received_seq": 9,
                              "durable_seq": 9, "failed": None, "refused": None}  # fmt: skip
    f["statuses"]["arbiter"] = {"epoch": 2, "primary": primary, "standby": standby,
                                "in_sync": True, "lease_left_s": 2.5}  # fmt: skip
    return f


def test_a_standby_in_sync_with_the_primary_is_healthy_and_the_verdict_names_both() -> None:
    h = assess(Facts(**replicated()))
    assert h.code == HEALTHY, h.problems
    assert h.replication is not None
    assert (h.replication["primary"], h.replication["standby"], h.replication["epoch"]) == (
        "raydex-sequencer", "raydex-standby", 2)  # fmt: skip
    assert h.as_json()["replication"]["in_sync"] is True
    assert verdict().replication is None  # no standby in the spec: nothing to say


def test_a_primary_degraded_to_local_durability_is_a_replication_alarm() -> None:
    f = replicated(degraded=True, in_sync=False, lag_blocks=40, connected=False,
                   error="ConnectionRefusedError(111)")  # fmt: skip
    f["statuses"]["arbiter"]["in_sync"] = False
    h = assess(Facts(**f))
    assert h.code == DEGRADED
    (line,) = h.problems
    assert line.startswith("replication DEGRADED: the primary raydex-sequencer answers txs on "
                           "its local WAL alone")  # fmt: skip
    assert "raydex-standby" in line and "ConnectionRefusedError" in line


def test_a_standby_catching_up_or_out_of_sync_at_the_arbiter_degrades_until_it_is_in_sync() -> None:
    h = assess(Facts(**replicated(in_sync=False, lag_blocks=12)))
    assert h.code == DEGRADED
    assert h.problems == (
        "replication: the standby raydex-standby is not in sync with the "
        "primary raydex-sequencer (12 blocks behind): it may not take over yet",
    )
    f = replicated()
    f["statuses"]["arbiter"]["in_sync"] = False  # the arbiter's word counts: no takeover
    assert assess(Facts(**f)).code == DEGRADED
    assert assess(Facts(**replicated())).code == HEALTHY


@pytest.mark.parametrize("how", ["missing", "dead", "host down", "failed"])
def test_a_lost_standby_degrades_naming_replication(how: str) -> None:
    """The primary still says in sync for a moment after its standby's host went: the standby's
    own state names replication then."""
    f = replicated()
    if how == "missing":
        del f["table"]["raydex-standby"]
    elif how == "dead":
        f["table"]["raydex-standby"]["state"] = "DEAD"
    elif how == "host down":
        del f["live_nodes"]["n-w2"]
    else:
        f["statuses"]["raydex-standby"]["failed"] = "standby WAL write failed"
        f["statuses"]["raydex-sequencer"]["replication"].update(degraded=True, in_sync=False)
    h = assess(Facts(**f))
    assert h.code == DEGRADED
    named = [p for p in h.problems if p.startswith("replication") and "raydex-standby" in p]
    assert named, h.problems


def test_after_a_takeover_the_standby_is_the_primary_and_the_fenced_old_one_degrades() -> None:
    """The arbiter names raydex-standby the primary of epoch 2: the sequencer's slot is the
    standby's. An old primary back on its host refuses to sequence (fenced): degraded, not
    broken, until ``raydex deploy`` makes it the standby."""
    f = replicated(primary="raydex-standby", standby="raydex-sequencer", degraded=True,
                   in_sync=False, standby_name=None, error=None)  # fmt: skip
    f["statuses"]["raydex-sequencer"] = {
        "seq": 0, "refused": "fenced: 'raydex-standby' is the primary of epoch 2; this sequencer "
        "may not sequence"}  # fmt: skip
    f["statuses"]["arbiter"].update(standby="", in_sync=False)
    h = assess(Facts(**f))
    assert h.code == DEGRADED
    assert h.replication is not None and h.replication["primary"] == "raydex-standby"
    states = {a.name: a.state for a in h.actors if not a.ok}
    assert states == {"raydex-sequencer": "fenced"}
    assert any("DEGRADED: the primary raydex-standby" in p for p in h.problems)
    # the redeploy's standby in the old slot caught up: healthy again
    g = replicated(primary="raydex-standby", standby="raydex-sequencer")
    assert assess(Facts(**g)).code == HEALTHY


def test_local_durability_with_a_standby_planned_says_nothing_of_replication() -> None:
    assert assess(Facts(**replicated(durability="local", in_sync=False))).code == HEALTHY
