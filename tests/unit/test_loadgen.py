"""The open-loop load generator: planned times, latency from the planned time when the sender
falls behind, lanes, the signed plan, and ``--ab`` parsing. No Ray: a tiny aiohttp server stands in
for a replica where a server is needed (a real server, not a mock of the client)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from raydex.actors.replica import ApiConfig
from raydex.cluster.control.placement import placement_for
from raydex.cluster.control.spec import GcSpec, ReplicaGroupSpec, load_spec
from raydex.cluster.topology import Topology
from raydex.codecs import SKIP_NONCE_FLAG, ResultCode, Verifier, tx_from_json, tx_type_of
from raydex.observability.loadtest.loadgen import (
    CLIENT_ERROR,
    NO_REPLY,
    Item,
    LaneSpec,
    MarketInfo,
    OpenLoopClock,
    Pacer,
    Recorder,
    assign_endpoints,
    form_encode,
    lane_specs,
    plan_load,
    planned_offsets_ns,
    run_lanes,
)
from raydex.observability.loadtest.run import (
    GC_PRESETS,
    AbError,
    GroupSettings,
    LoadtestOptions,
    OptionError,
    build_spec,
    check_options,
    find_py_spy,
    generator_cpus,
    parse_ab,
    part_key,
    per_host,
    unused_endpoints,
)

# ---- the schedule ------------------------------------------------------------------------------


def test_evenly_spaced_offsets_follow_the_rate() -> None:
    assert planned_offsets_ns(4, 1000) == [0, 1_000_000, 2_000_000, 3_000_000]


def test_poisson_offsets_keep_the_mean_rate_and_never_go_back() -> None:
    offs = planned_offsets_ns(20_000, 1000, random.Random(1))
    assert offs == sorted(offs)
    mean_gap = offs[-1] / (len(offs) - 1)
    assert 0.95e6 < mean_gap < 1.05e6


def test_a_rate_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="tps"):
        planned_offsets_ns(1, 0)


def test_the_clock_gives_a_batch_the_room_of_its_transactions() -> None:
    clock = OpenLoopClock(100)  # 10 ms per tx
    assert [clock.take(1), clock.take(3), clock.take(1)] == [0, 10_000_000, 40_000_000]
    assert clock.txs == 5


@given(st.lists(st.integers(1, 50), min_size=1, max_size=200), st.floats(1, 100_000))
def test_planned_times_never_decrease_and_match_the_rate(sizes: list[int], tps: float) -> None:
    clock = OpenLoopClock(tps)
    times = [clock.take(k) for k in sizes]
    assert times == sorted(times)
    assert abs(clock.now_ns - sum(sizes) * 1e9 / tps) <= 1


def test_the_pacer_never_wakes_a_send_early_and_lanes_share_a_tick() -> None:
    """Nine lanes due within one tick share one timer; each wakes at or after its planned time;
    a time already past is no wait at all."""

    async def main() -> tuple[list[tuple[int, int]], Pacer, object]:
        pacer = Pacer(tick_ns=1_000_000)
        tick = pacer.tick_ns
        base = (time.monotonic_ns() // tick + 30) * tick  # a tick boundary 30 ms ahead
        woke: list[tuple[int, int]] = []

        async def lane(at: int) -> None:
            due = pacer.until(at)
            assert due is not None
            await due
            woke.append((at, time.monotonic_ns()))

        await asyncio.gather(*(lane(base + 1 + k * 100_000) for k in range(9)))
        past = pacer.until(time.monotonic_ns() - 1)
        return woke, pacer, past

    woke, pacer, past = asyncio.run(main())
    assert len(woke) == 9
    assert all(at <= now for at, now in woke)  # never early
    assert (pacer.waits, pacer.timers) == (9, 1)  # one timer for the nine
    assert past is None


def test_a_lane_cancelled_while_paced_does_not_cancel_the_others_on_its_tick() -> None:
    async def main() -> tuple[bool, bool, int]:
        pacer = Pacer(tick_ns=1_000_000)
        at = (time.monotonic_ns() // pacer.tick_ns + 20) * pacer.tick_ns + 1

        async def lane() -> None:
            due = pacer.until(at)
            assert due is not None
            await due

        gone, stays = asyncio.create_task(lane()), asyncio.create_task(lane())
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.wait([gone, stays])
        return gone.cancelled(), stays.cancelled(), pacer.timers

    gone, stays, timers = asyncio.run(main())
    assert gone and not stays and timers == 1


@given(st.lists(st.integers(0, 3_000_000), min_size=1, max_size=40))
def test_paced_sends_keep_their_planned_order_and_are_never_early(offsets: list[int]) -> None:
    async def main() -> list[tuple[int, int]]:
        pacer = Pacer(tick_ns=500_000)
        t0 = time.monotonic_ns()
        sent: list[tuple[int, int]] = []
        for at in sorted(offsets):  # one lane: its plan, in order
            due = pacer.until(t0 + at)
            if due is not None:
                await due
            sent.append((t0 + at, time.monotonic_ns()))
        return sent

    sent = asyncio.run(main())
    assert [at for at, _ in sent] == sorted(t0 for t0, _ in sent)
    assert all(at <= now for at, now in sent)


# ---- latency counts from the planned time ------------------------------------------------------


def test_latency_counts_from_the_planned_time_not_from_the_late_send() -> None:
    rec = Recorder()
    t0 = 10_000_000_000
    planned = t0 + 1_000_000_000
    sent = planned + 40_000_000  # the sender fell 40 ms behind
    done = sent + 2_000_000  # the server took 2 ms
    rec.sent_at(planned, sent, 1)
    rec.finished(planned, done, t0, ("CREATE_ORDER",), (200,))
    assert rec.latency.percentile(1.0) == pytest.approx(42_000_000, rel=0.01)
    assert rec.send_lag.percentile(1.0) == pytest.approx(40_000_000, rel=0.01)
    assert rec.by_type["CREATE_ORDER"].total == 1
    assert len(rec.per_second) == 2 and rec.per_second[1].total == 1


def test_answers_are_binned_by_the_second_they_were_answered_not_the_one_planned() -> None:
    """A backlog answered late shows up in the seconds it was answered: three txs planned in
    second 0, answered in seconds 0, 2 and 2 (the old report counted all three in second 0)."""
    rec = Recorder()
    t0, s = 5_000_000_000, 1_000_000_000
    rec.finished(t0, t0 + s // 10, t0, ("A",), (200,))
    rec.finished(t0 + s // 2, t0 + 2 * s + 1, t0, ("B", "C"), (200, int(ResultCode.INVALID_NONCE)))
    assert [h.total for h in rec.per_second] == [1, 0, 2]
    assert rec.ok_per_second == [1, 0, 1]
    assert rec.per_second[2].max >= 1_500_000_000  # their latency still counts from the plan


def test_errors_split_into_intended_and_real() -> None:
    rec = Recorder()
    nonce, not_active = int(ResultCode.INVALID_NONCE), int(ResultCode.NOT_ACTIVE_LIMIT_ORDER)
    rec.finished(0, 1, 0, ("A", "B", "C", "D"), (200, nonce, not_active, 200))
    assert rec.errors(intended=False) == {"INVALID_NONCE": 1}
    assert rec.errors(intended=True) == {"NOT_ACTIVE_LIMIT_ORDER": 1}
    assert rec.errors() == {"INVALID_NONCE": 1, "NOT_ACTIVE_LIMIT_ORDER": 1}
    assert rec.done == 4
    rec.finished(0, 1, 0, ("E", "F"), (NO_REPLY, CLIENT_ERROR))
    assert rec.errors(intended=False) == {"CLIENT_ERROR": 1, "INVALID_NONCE": 1, "NO_REPLY": 1}


class _SlowReplica:
    """A real HTTP server answering sendTx after ``delay_s``; remembers arrival order."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.arrivals: list[str] = []

    async def send_tx(self, request: web.Request) -> web.Response:
        form = await request.post()
        self.arrivals.append(str(form["tx_info"]))
        await asyncio.sleep(self.delay_s)
        return web.json_response({"code": 200})


def test_a_rest_lane_spreads_its_accounts_over_its_connections() -> None:
    """A lane's accounts share a residue modulo the lane count (8 lanes: accounts 3, 11, 19,
    ...); with as many connections they must still use all of them, since the server answers a
    connection's requests one at a time."""

    async def main() -> set[int]:
        ports: set[int] = set()

        async def send_tx(request: web.Request) -> web.Response:
            assert request.transport is not None
            ports.add(request.transport.get_extra_info("peername")[1])
            return web.json_response({"code": 200})

        app = web.Application()
        app.router.add_post("/api/v1/sendTx", send_tx)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        items = [_item(0, 3 + 8 * k, f"tx{k}") for k in range(8)]
        try:
            await run_lanes(
                [LaneSpec(3, "g", port, "rest")],
                [dataclasses.replace(it, lane=3) for it in items],
                {"g": Recorder("g")},
                time.monotonic_ns(),
                asyncio.Event(),
                rest_connections=8,
            )
        finally:
            await runner.cleanup()
        return ports

    assert len(asyncio.run(main())) == 8


def _item(at_ns: int, account: int, tag: str) -> Item:
    body = form_encode({"tx_type": 14, "tx_info": tag})
    return Item(at_ns, 0, account, ("CREATE_ORDER",), "sendTx", body, "", False)


def test_an_open_loop_lane_charges_queueing_to_the_request_when_the_server_is_slow() -> None:
    """Four txs of one account planned 1 ms apart against a 50 ms server: each waits for the
    previous (nonce order), so the last is answered ~200 ms after its planned time, and that is
    what is recorded (a closed-loop client would report ~50 ms for every one)."""

    async def main() -> tuple[Recorder, list[str]]:
        srv = _SlowReplica(0.05)
        app = web.Application()
        app.router.add_post("/api/v1/sendTx", srv.send_tx)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        rec = Recorder("g")
        items = [_item(i * 1_000_000, 7, f"tx{i}") for i in range(4)]
        try:
            await run_lanes([LaneSpec(0, "g", port, "rest")], items, {"g": rec},
                            time.monotonic_ns(), asyncio.Event())  # fmt: skip
        finally:
            await runner.cleanup()
        return rec, srv.arrivals

    rec, arrivals = asyncio.run(main())
    assert arrivals == ["tx0", "tx1", "tx2", "tx3"]  # one account's txs stay in nonce order
    assert rec.done == 4 and rec.codes[200] == 4
    # Lower bounds only (the server's sleeps guarantee them; an upper bound would be a wall-clock
    # bound on a shared machine): the 4th waited for the three answers before it, and the first for
    # its own.
    assert rec.latency.max >= 190_000_000
    assert rec.latency.min >= 50_000_000


# ---- lanes and the plan ------------------------------------------------------------------------


def test_lanes_alternate_groups_and_give_every_group_a_ws_and_a_rest_lane() -> None:
    lanes = lane_specs(4, [("a", 1), ("b", 2)])
    assert [(ln.group, ln.kind) for ln in lanes] == [
        ("a", "ws"), ("b", "ws"), ("a", "rest"), ("b", "rest")
    ]  # fmt: skip
    with pytest.raises(ValueError, match="--clients must be >= 4"):
        lane_specs(3, [("a", 1), ("b", 2)])


def test_a_groups_lanes_go_to_its_endpoints_in_pairs_so_every_host_gets_both_kinds() -> None:
    """``--address``: each group's lanes are spread over its replica endpoints (one per host),
    a WS and a REST lane at a time; a group without endpoints keeps its lanes as they were."""
    lanes = lane_specs(10, [("a", 1), ("b", 2)])
    ends = {"a": [("host-b", "10.0.0.3", 81), ("host-c", "10.0.0.4", 81)]}
    moved = assign_endpoints(lanes, ends)
    on_a = [(ln.label, ln.host, ln.port, ln.kind) for ln in moved if ln.group == "a"]
    assert on_a == [
        ("host-b", "10.0.0.3", 81, "ws"), ("host-b", "10.0.0.3", 81, "rest"),
        ("host-c", "10.0.0.4", 81, "ws"), ("host-c", "10.0.0.4", 81, "rest"),
        ("host-b", "10.0.0.3", 81, "ws"),
    ]  # fmt: skip
    assert [ln for ln in moved if ln.group == "b"] == [ln for ln in lanes if ln.group == "b"]
    assert [ln.index for ln in moved] == [ln.index for ln in lanes]
    assert unused_endpoints(moved, ends) == []
    three = {"a": [*ends["a"], ("host-d", "10.0.0.5", 81)]}
    assert unused_endpoints(assign_endpoints(lane_specs(4, [("a", 1)]), three), three) == [
        "a@10.0.0.5:81"]  # fmt: skip


def test_recorders_merged_equal_one_recorder_that_saw_everything() -> None:
    t0, s = 0, 1_000_000_000
    answers = [(t0, t0 + 5_000, ("A",), (200,), 1), (t0, t0 + 2 * s, ("B", "A"), (200, 21104), 1),
               (t0 + s, t0 + s + 9_000, ("C",), (NO_REPLY,), 0)]  # fmt: skip
    whole, one, two = Recorder("g"), Recorder("g"), Recorder("g")
    for k, (planned, done, types, codes, committed) in enumerate(answers):
        for rec in (whole, one if k % 2 else two):
            rec.sent_at(planned, planned + 100, len(types))
            rec.finished(planned, done, t0, types, codes, committed=committed)
    one.merge(two)
    for attr in ("sent", "done", "committed", "codes", "ok_per_second"):
        assert getattr(one, attr) == getattr(whole, attr), attr
    for attr in ("latency", "admitted", "send_lag"):
        assert getattr(one, attr).counts == getattr(whole, attr).counts, attr
    assert {k: h.counts for k, h in one.by_type.items()} == {
        k: h.counts for k, h in whole.by_type.items()}  # fmt: skip
    assert [h.counts for h in one.per_second] == [h.counts for h in whole.per_second]


def test_the_per_host_rows_sum_each_hosts_lanes_over_the_groups() -> None:
    lanes = assign_endpoints(
        lane_specs(8, [("a", 1), ("b", 2)]),
        {"a": [("host-b", "10.0.0.3", 81), ("host-c", "10.0.0.4", 81)],
         "b": [("host-b", "10.0.0.3", 82)]},
    )  # fmt: skip
    parts = {part_key(ln): Recorder(ln.group) for ln in lanes}
    for ln in lanes:  # each lane: one tx accepted, and on host-c one refused
        parts[part_key(ln)].finished(0, 1_000, 0, ("A",), (200,))
        if ln.label == "host-c":
            parts[part_key(ln)].finished(0, 1_000, 0, ("A",), (21104,))
    rows = per_host(parts, lanes, elapsed_s=2.0)
    assert list(rows) == ["host-b", "host-c"]
    assert rows["host-b"]["endpoints"] == ["10.0.0.3:81", "10.0.0.3:82"]
    assert (rows["host-b"]["lanes"], rows["host-b"]["txs"], rows["host-b"]["accepted"]) == (6, 6, 6)
    assert (rows["host-c"]["lanes"], rows["host-c"]["txs"], rows["host-c"]["accepted"]) == (2, 4, 2)
    assert rows["host-c"]["accepted_per_s"] == 1.0
    assert rows["host-c"]["errors"] == {"INVALID_NONCE": 2} and rows["host-b"]["errors"] == {}


def test_form_encoding_equals_the_standard_library() -> None:
    fields = {"tx_type": 14, "tx_info": '{"A":[1,-2],"s":"x y&z=+%/\\\\"}'}
    assert form_encode(fields) == urllib.parse.urlencode(fields).encode()


@pytest.mark.parametrize("impolite", [False, True])
def test_the_plan_signs_every_tx_in_nonce_order_per_account_at_the_planned_rate(
    impolite: bool,
) -> None:
    """Impolite clients' plans carry SkipNonce on every tx (in the JSON as Lighter writes it),
    signed over it, and every lane is an impolite one."""
    spec = load_spec("raydex.yaml")
    markets = [MarketInfo.of(m) for m in spec.markets]
    lanes = lane_specs(4, [("a", 1), ("b", 2)], impolite=impolite)
    assert {ln.kind for ln in lanes} == ({"impolite"} if impolite else {"ws", "rest"})
    plan = plan_load(markets, 40, tps=200, seconds=2, lanes=lanes, seed=3, skip_nonce=impolite)
    flag = SKIP_NONCE_FLAG if impolite else 0
    txs = 0
    nonces: dict[int, int] = {}
    verifier = Verifier()
    keys = {t.account: t.pub for t in plan.traders}
    lane_of: dict[int, int] = {}
    for it in plan.items:
        form = urllib.parse.parse_qs(it.rest_body.decode())
        if "tx_info" in form:
            pairs = [(int(form["tx_type"][0]), form["tx_info"][0])]
        else:
            pairs = list(zip(json.loads(form["tx_types"][0]), json.loads(form["tx_infos"][0]),
                             strict=True))  # fmt: skip
        for ttype, info in pairs:
            tx = tx_from_json(ttype, info)
            assert tx_type_of(type(tx)) == ttype
            assert tx.nonce == nonces.get(tx.account_index, 0) | flag
            assert ('"L2TxAttributes":{"4":1}' in info) is impolite
            nonces[tx.account_index] = (tx.nonce & ~flag) + 1
            assert verifier.verify(tx, keys[tx.account_index])
            txs += 1
        assert lane_of.setdefault(it.account, it.lane) == it.lane  # an account keeps its lane
    assert [it.at_ns for it in plan.items] == sorted(it.at_ns for it in plan.items)
    assert 380 <= txs <= 420  # 200 tx/s for 2 s
    assert plan.mix["requote"] > 0 and plan.mix["ioc"] > 0 and plan.mix["transfer"] > 0


# ---- --ab --------------------------------------------------------------------------------------


def test_ab_settings_parse_into_two_groups() -> None:
    a, b = parse_ab("pinned=pin:on,unpinned=pin:off")
    assert (a.name, a.pin, b.name, b.pin) == ("pinned", True, "unpinned", False)
    a, b = parse_ab(["gc_tuned=gc:tuned+replicas:2", "gc_default=gc:default"])
    assert (a.name, a.gc, a.replicas, b.gc) == ("gc-tuned", "tuned", 2, "default")


def test_ab_settings_apply_onto_the_base_replica_group() -> None:
    a, _ = parse_ab("fast=pin:off+gc:default+cpus:2,slow=pin:on")
    group = a.apply(ReplicaGroupSpec("public", replicas=3, gc=GcSpec((1, 1, 1))), 1, 9000)
    assert (group.name, group.pin, group.cpus_per_replica, group.http_port) == ("fast", False, 2,
                                                                                9000)  # fmt: skip
    assert group.gc == GC_PRESETS["default"] and group.replicas == 1


def test_the_tuned_gc_preset_is_the_replica_policy_raydex_yaml_ships() -> None:
    (group,) = load_spec("raydex.yaml").replica_groups
    assert GC_PRESETS["tuned"] == group.gc


def test_without_replicas_the_loadtest_deploys_the_specs_count(tmp_path: Path) -> None:
    (main,) = build_spec(load_spec("raydex.yaml"), LoadtestOptions(), tmp_path).replica_groups
    assert (main.replicas_per_numa_node, main.replicas) == (1, None)  # raydex.yaml's
    plain = GroupSettings("main")
    assert plain.apply(ReplicaGroupSpec("g", replicas=3), None, 9000).replicas == 3
    bare = plain.apply(ReplicaGroupSpec("g"), None, 9000)  # a spec that sets neither
    assert (bare.replicas_per_numa_node, bare.replicas) == (1, None)
    two = plain.apply(ReplicaGroupSpec("g", replicas_per_numa_node=1), 2, 9000)  # --replicas 2
    assert (two.replicas_per_numa_node, two.replicas) == (None, 2)


def test_ab_door_setting_sets_the_groups_overload_door() -> None:
    a, b = parse_ab("off=door:off,on=door:0.1")
    base = ReplicaGroupSpec("public", replicas=1)
    assert a.apply(base, 1, 9000).api.admission_max_delay_s == 0.0
    assert b.apply(base, 1, 9001).api.admission_max_delay_s == 0.1
    assert base.api.admission_max_delay_s == ApiConfig().admission_max_delay_s


def test_ab_huge_setting_sets_the_groups_heap_pages_and_placement_carries_it() -> None:
    a, b = parse_ab("huge=huge:on,small=huge:off")
    base = ReplicaGroupSpec("public", replicas=1)
    assert base.huge_pages  # the default: the heap on huge pages
    on, off = a.apply(base, 1, 9000), b.apply(base, 1, 9001)
    assert (on.huge_pages, off.huge_pages) == (True, False)
    spec = load_spec("raydex.yaml")
    spec = dataclasses.replace(spec, replica_groups=(on, off))
    groups = {g.name: g for g in placement_for(spec, {"h": Topology.single((0, 1))})}
    assert [b.huge_pages for b in groups["huge"].bundles] == [True]
    assert [b.huge_pages for b in groups["small"].bundles] == [False]
    assert groups["sequencer"].bundles[0].huge_pages  # every role's default


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a=huge:yes,b=huge:off", "huge must be on or off, got 'yes'"),
        ("a=door:fast,b=door:off", "door must be off or seconds in"),
        ("a=door:5,b=door:off", "door must be off or seconds in"),
        ("pinned=pin:on", "exactly two groups"),
        ("a=pin:on,b=pin:on", "same settings"),
        ("a=pin:yes,b=pin:off", "pin must be on or off, got 'yes'"),
        ("a=gc:fast,b=gc:default", "gc must be one of tuned, scheduled, default, got 'fast'"),
        ("a=color:red,b=pin:off", "unknown setting 'color'"),
        ("a=replicas:0,b=pin:off", "replicas must be an integer >= 1"),
        ("a=pin,b=pin:off", "expected key:value, got 'pin'"),
        ("pin:on,b=pin:off", "expected NAME=SETTINGS"),
        ("a=,b=pin:off", "group 'a' has no settings"),
        ("a=pin:on,a=pin:off", "different names"),
        ("a=pin:on+pin:off,b=gc:tuned", "'pin' given twice"),
    ],
)
def test_bad_ab_settings_are_refused_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(AbError, match=message):
        parse_ab(text)


def test_an_ab_deployment_gets_its_own_ports_and_folders_per_group(tmp_path: Path) -> None:
    base = load_spec("raydex.yaml")
    ab = parse_ab("pinned=pin:on,unpinned=pin:off")
    spec = build_spec(base, LoadtestOptions(markets=2, replicas=1, ab=ab), tmp_path)
    a, b = spec.replica_groups
    assert (a.name, a.pin, b.name, b.pin) == ("pinned", True, "unpinned", False)
    ports = {a.http_port, b.http_port, spec.ports.http, spec.ports.data, spec.ports.data + 1}
    assert len(ports) == 5 and base.ports.http not in ports
    assert spec.sequencer.wal_dir.startswith(str(tmp_path))
    assert spec.snapshot.dir.startswith(str(tmp_path))
    assert [m.symbol for m in spec.markets] == [m.symbol for m in base.markets[:2]]
    with pytest.raises(OptionError, match=r"--markets must be in 1\.\.4"):
        build_spec(base, LoadtestOptions(markets=9), tmp_path)


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (LoadtestOptions(tps=0), "--tps and --seconds must be > 0"),
        (LoadtestOptions(accounts=3), "--accounts must be >= 6"),
        (LoadtestOptions(clients=1), "--clients must be >= 2"),
        (LoadtestOptions(clients=3, ab=parse_ab("a=pin:on,b=pin:off")), "--clients must be >= 4"),
        (LoadtestOptions(generator_cpus="1-3"), "--generator-cpus must be auto, any or CPUs"),
        (LoadtestOptions(generator_cpus="4096"), "--generator-cpus must be auto, any or CPUs"),
        (LoadtestOptions(capacity=5000), "--capacity needs --impolite"),
        (LoadtestOptions(impolite=True, capacity=0), "--capacity needs --impolite"),
    ],
)
def test_options_no_run_can_satisfy_are_refused_up_front(
    opts: LoadtestOptions, message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        check_options(opts)


def test_the_generator_keeps_off_a_pinned_replicas_core_when_the_host_has_another() -> None:
    """Real processes: a stand-in replica pinned to this process's first CPU (its ledger role
    names it a replica); ``auto`` gives the generator the other CPUs, ``any`` lets it float."""
    import subprocess

    mine = sorted(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.sched_setaffinity(proc.pid, {mine[0]})
        roles = {proc.pid: "replica main-0", os.getpid(): "loadgen"}
        auto = generator_cpus("auto", roles, local=True)
        assert auto == (frozenset(mine[1:]) if len(mine) > 1 else None)
        assert generator_cpus("any", roles, local=True) is None
        assert generator_cpus("auto", roles, local=False) is None  # pids of other hosts
        assert generator_cpus(str(mine[-1]), roles, local=True) == frozenset({mine[-1]})
        # a replica the kernel may put anywhere leaves nothing to keep off
        os.sched_setaffinity(proc.pid, set(mine))
        assert generator_cpus("auto", roles, local=True) is None
    finally:
        proc.kill()
        proc.wait()
    # a replica that is gone: nothing to read, the generator floats
    assert generator_cpus("auto", {proc.pid: "replica main-0"}, local=True) is None


def test_the_cli_exits_2_with_the_reason_on_a_bad_ab(capsys: pytest.CaptureFixture[str]) -> None:
    from raydex.cluster.cli.commands import main

    assert main(["loadtest", "--ab", "a=pin:maybe,b=pin:off"]) == 2
    assert "pin must be on or off, got 'maybe'" in capsys.readouterr().err


def test_profile_without_py_spy_is_refused_with_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(OptionError, match=r"pip install 'raydex\[profile\]'"):
        check_options(LoadtestOptions(profile=True))
    check_options(LoadtestOptions(profile=False))  # nothing to find without --profile


def test_profile_finds_py_spy_where_it_is_installed(tmp_path: Path) -> None:
    exe = Path(find_py_spy())
    assert exe.name == "py-spy" and exe.exists()
