"""``raydex loadtest``: an isolated, instrumented deployment under open-loop signed load, reported.

::

    plan_load (sign everything)  ─►  ray.init (embedded, or --address)  ─►  deploy(namespace
    "raydex-loadtest-<pid>", free ports, InstrumentedReplicaActor)  ─►  operator: keys + deposits
        │
        ├── lanes (WS / REST) ──► group A port ─► replicas A ─┐
        ├── lanes (WS / REST) ──► group B port ─► replicas B ─┴─► sequencer ─► blocks to all
        ├── order_book watchers per group (busiest markets): freshness, begin_nonce chain
        └── progress line every second (achieved tx/s, errors, p99 so far)
    ─► loadtest_stats() per replica + sequencer status ─► report.json / report.md / *.png
    ─► down(namespace), ray.shutdown()   (also on Ctrl-C / SIGTERM)

A/B (``--ab NAME=SETTINGS,NAME=SETTINGS``): two replica groups, each on its own HTTP port, fed
the same traffic mix (lanes alternate between the groups, so each group gets half the requests
of every kind) at the same time; every metric is reported per group with B's difference from A
in percent. SETTINGS is ``key:value`` joined by ``+``: ``pin:on|off``,
``gc:tuned|scheduled|default``, ``realtime:on|off``, ``busy:on|off`` (the replicas'
``busy_poll``), ``huge:on|off`` (the replicas' heap on huge pages), ``replicas:N``, ``cpus:N``,
``door:off|SECONDS`` (the overload door's ``admission_max_delay_s``). ``parse_ab`` rejects
anything else with a message naming the group and the setting.

Isolation: its own Ray namespace, its own ports (free ones), its own WAL and snapshot folders
under the output folder; nothing of a running ``raydex`` deployment is touched. With
``--address`` the stack runs on that cluster and the lanes are spread over every replica endpoint
of each group, on any host (``replica_endpoints``: the node IP of each serving replica and its
port), so the command may run on any host that reaches them; the report adds the outcomes per
host (``per_host``). The CPU ledger, memory and profiles cover the actors on this driver's node
(``actor_roles``): another host's pids mean nothing in this machine's ``/proc``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from raydex.cluster.control.deploy import free_port
from raydex.cluster.control.spec import DeploySpec, GcSpec, ReplicaGroupSpec
from raydex.cluster.pinning import pin_all_threads

from ..hist import Histogram
from .ledger import CpuSample, Rss, WindowSampler, build_ledger, memory_by_role, ray_session_of
from .loadgen import (
    BookWatch,
    Endpoint,
    Item,
    LaneSpec,
    LoadPlan,
    MarketInfo,
    Recorder,
    assign_endpoints,
    lane_specs,
    plan_load,
    run_lanes,
    watch_books,
)
from .profile import finish_profiles, start_profiles
from .report import GroupData, build_report, write_report
from .roles import RoleFollower, actor_roles, role_of_actor

__all__ = [
    "AbError",
    "GroupSettings",
    "LoadtestOptions",
    "OptionError",
    "actor_roles",
    "build_spec",
    "check_options",
    "find_py_spy",
    "parse_ab",
    "role_of_actor",
    "run",
]

#: GC presets of ``gc:``: tuned is raydex.yaml's replica policy (each scheduled full collection
#: freezes its survivors), scheduled the same without freezing, default is CPython's.
#: how long after the window the report waits for the committer to reach the sequencer (s)
CATCH_UP_TIMEOUT_S = 60.0

GC_PRESETS: dict[str, GcSpec] = {
    "tuned": GcSpec((50_000, 20, 100), True, True, 2.0, True, 1800),
    "scheduled": GcSpec((50_000, 20, 100), True, True, 30.0),
    "default": GcSpec(),
}
_ONOFF = {"on": True, "off": False, "true": True, "false": False}


class AbError(ValueError):
    """An ``--ab`` value that cannot be used; the message says which part and why."""


class OptionError(ValueError):
    """Options that cannot make a loadtest (checked before anything starts)."""


@dataclasses.dataclass(frozen=True, slots=True)
class GroupSettings:
    name: str
    text: str = ""
    pin: bool | None = None
    gc: str | None = None
    realtime: bool | None = None
    replicas: int | None = None
    cpus: int | None = None
    #: the overload door's ``admission_max_delay_s`` (0: no door)
    door: float | None = None
    #: the replicas' ``busy_poll``
    busy: bool | None = None
    #: the replicas' ``huge_pages``
    huge: bool | None = None

    def apply(self, base: ReplicaGroupSpec, replicas: int | None, port: int) -> ReplicaGroupSpec:
        """``base`` with these settings; ``replicas`` None keeps the base's count (the spec's
        ``replicas_per_numa_node`` or ``replicas``; one per NUMA node if it sets neither)."""
        replica = base.replica
        if self.door is not None:
            api = dataclasses.replace(replica.api, admission_max_delay_s=self.door)
            replica = dataclasses.replace(replica, api=api)
        if self.busy is not None:
            replica = dataclasses.replace(replica, busy_poll=self.busy)
        count = self.replicas or replicas
        per_node = base.replicas_per_numa_node
        if count is None and per_node is None and base.replicas is None:
            per_node = 1
        return dataclasses.replace(
            base,
            name=self.name,
            replicas=count if count is not None else base.replicas,
            replicas_per_numa_node=None if count is not None else per_node,
            pin=base.pin if self.pin is None else self.pin,
            realtime=base.realtime if self.realtime is None else self.realtime,
            huge_pages=base.huge_pages if self.huge is None else self.huge,
            gc=base.gc if self.gc is None else GC_PRESETS[self.gc],
            cpus_per_replica=self.cpus or base.cpus_per_replica,
            http_port=port,
            replica=replica,
        )


def _parse_group(part: str) -> GroupSettings:
    name, eq, settings = part.partition("=")
    name = name.strip()
    if not eq or not name:
        raise AbError(f"--ab: expected NAME=SETTINGS, got {part!r}")
    if not name.replace("-", "").replace("_", "").isalnum() or not name.isascii():
        raise AbError(f"--ab: group name {name!r} must be letters, digits, '-' or '_'")
    fields: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in settings.split("+"))):
        key, colon, value = item.partition(":")
        if not colon:
            raise AbError(f"--ab: group {name!r}: expected key:value, got {item!r}")
        if key in fields:
            raise AbError(f"--ab: group {name!r}: {key!r} given twice")
        if key in ("pin", "realtime", "busy", "huge"):
            if value not in _ONOFF:
                raise AbError(f"--ab: group {name!r}: {key} must be on or off, got {value!r}")
            fields[key] = _ONOFF[value]
        elif key == "gc":
            if value not in GC_PRESETS:
                raise AbError(f"--ab: group {name!r}: gc must be one of "
                              f"{', '.join(GC_PRESETS)}, got {value!r}")  # fmt: skip
            fields[key] = value
        elif key in ("replicas", "cpus"):
            if not value.isdigit() or int(value) < 1:
                raise AbError(f"--ab: group {name!r}: {key} must be an integer >= 1, got {value!r}")
            fields[key] = int(value)
        elif key == "door":
            fields[key] = _door(name, value)
        else:
            raise AbError(
                f"--ab: group {name!r}: unknown setting {key!r} "
                "(known: pin, gc, realtime, busy, huge, replicas, cpus, door)"
            )
    if not fields:
        raise AbError(f"--ab: group {name!r} has no settings (e.g. {name}=pin:on)")
    return GroupSettings(name=name.lower().replace("_", "-"), text=settings.strip(), **fields)


def _door(group: str, value: str) -> float:
    """``door:off`` or ``door:SECONDS`` (the overload door's ``admission_max_delay_s``)."""
    if value == "off":
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < 5:
        raise AbError(f"--ab: group {group!r}: door must be off or seconds in [0, 5), "
                      f"got {value!r}")  # fmt: skip
    return seconds


def parse_ab(text: str | Sequence[str]) -> tuple[GroupSettings, GroupSettings]:
    """``"a=pin:on,b=pin:off"`` (or the two parts as a list) -> the two groups' settings."""
    parts = [text] if isinstance(text, str) else list(text)
    groups = [_parse_group(p) for chunk in parts for p in chunk.split(",") if p.strip()]
    if len(groups) != 2:
        raise AbError(f"--ab: expected exactly two groups, got {len(groups)}")
    a, b = groups
    if a.name == b.name:
        raise AbError(f"--ab: the two groups need different names, both are {a.name!r}")
    if dataclasses.replace(a, name="", text="") == dataclasses.replace(b, name="", text=""):
        raise AbError(f"--ab: groups {a.name!r} and {b.name!r} have the same settings")
    return a, b


@dataclasses.dataclass(frozen=True, slots=True)
class LoadtestOptions:
    tps: float = 300.0
    seconds: float = 30.0
    accounts: int = 200
    markets: int = 4
    #: replicas per group; None: the spec's count (raydex.yaml: one per NUMA node)
    replicas: int | None = None
    clients: int = 8
    ab: tuple[GroupSettings, GroupSettings] | None = None
    spec_path: str = "raydex.yaml"
    out_dir: str | None = None
    json_out: str | None = None
    address: str | None = None
    sample_every: int = 100
    seed: int = 1
    quiet: bool = False
    #: py-spy profile per role over the window (speedscope JSON in the report folder)
    profile: bool = False
    #: after a rejection, re-sync the account's nonce from the server (a real client); False
    #: sends the plan's nonces regardless (every later tx of the account then fails)
    resync: bool = True
    #: where the generator runs during the window: "auto" (off the replicas' cores when they
    #: are pinned and this host has others), "any" (wherever the kernel puts it), or "1,3"
    generator_cpus: str = "auto"
    #: impolite clients (loadgen.py): every tx over REST at its planned time, in flight
    #: unbounded, signed with SkipNonce; the report gets an ``overload`` section
    impolite: bool = False
    #: the stack's capacity (tx/s) the overload targets are read against; None: half the
    #: offered rate (a run at the issue's "2x capacity"), said so in the report
    capacity: float | None = None


def check_options(opts: LoadtestOptions) -> None:
    """Raise OptionError for options no run can satisfy (before signing or starting Ray)."""
    groups = 1 if opts.ab is None else 2
    if opts.tps <= 0 or opts.seconds <= 0:
        raise OptionError("--tps and --seconds must be > 0")
    if opts.accounts < 6:
        raise OptionError("--accounts must be >= 6 (makers, levered accounts and takers)")
    if opts.clients < 2 * groups:
        raise OptionError(f"--clients must be >= {2 * groups} (a WS and a REST lane per group)")
    if opts.sample_every < 0:
        raise OptionError("--sample-every must be >= 0 (0: no spans)")
    if opts.profile:
        find_py_spy()
    if opts.generator_cpus not in ("auto", "any"):
        parse_cpus(opts.generator_cpus)
    if opts.capacity is not None and (not opts.impolite or opts.capacity <= 0):
        raise OptionError("--capacity needs --impolite and must be > 0")


def parse_cpus(text: str) -> frozenset[int]:
    """``--generator-cpus 1,3``: CPUs this process may run on, else OptionError."""
    allowed = os.sched_getaffinity(0)
    try:
        cpus = frozenset(int(c) for c in text.split(","))
    except ValueError:
        cpus = frozenset()
    if not cpus or not cpus <= allowed:
        raise OptionError(f"--generator-cpus must be auto, any or CPUs of {sorted(allowed)} "
                          f"joined by commas, got {text!r}")  # fmt: skip
    return cpus


def generator_cpus(choice: str, roles: dict[int, str], local: bool) -> frozenset[int] | None:
    """The CPUs the generator keeps to during the window (None: it floats).

    ``auto``: every CPU this process may use but the replicas' (their pinned affinities, read
    from ``roles``' pids), when the deployment is local (``roles`` pids are of this host) and
    such CPUs remain. A floating generator tends to run where the replica that answered it runs
    (the kernel places a woken task near its waker), so it takes that core's time: on a 2-core
    host, once the replica's own cost per tx had come down, ``auto`` achieved more in every
    alternated pair at 5,000 offered (docs/performance.md), hence the default; a client does not
    run on the replica's core in production either."""
    if choice == "any":
        return None
    if choice != "auto":
        return parse_cpus(choice)
    if not local:
        return None
    mine = os.sched_getaffinity(0)
    taken: set[int] = set()
    for pid, role in roles.items():
        if role.startswith("replica "):
            try:
                taken |= os.sched_getaffinity(pid)
            except OSError:  # gone, or not ours to read: nothing to keep off
                return None
    rest = frozenset(mine - taken)
    return rest if taken and rest else None


def find_py_spy() -> str:
    """The py-spy executable (next to this interpreter, else on PATH), or OptionError saying
    how to install it."""
    here = Path(sys.executable).with_name("py-spy")
    found = str(here) if here.exists() else shutil.which("py-spy")
    if found is None:
        raise OptionError(
            "--profile needs py-spy, which is not installed: pip install 'raydex[profile]' "
            "(or pip install py-spy)"
        )
    return found


def build_spec(base: DeploySpec, opts: LoadtestOptions, work: Path) -> DeploySpec:
    """The isolated deployment: base spec's markets (first ``--markets``), free ports, WAL and
    snapshots under ``work``, one group (or the two A/B groups) on their own ports."""
    if not 1 <= opts.markets <= len(base.markets):
        raise OptionError(f"--markets must be in 1..{len(base.markets)} (markets in the spec)")
    template = base.replica_groups[0] if base.replica_groups else ReplicaGroupSpec("main")
    if opts.ab is None:
        settings: Sequence[GroupSettings] = [GroupSettings("main")]
    else:
        settings = opts.ab
    # each port distinct from the others and from the base spec's (none is bound before deploy)
    taken = {base.ports.http, base.ports.data, base.ports.data + 1}

    def pick(pair: bool = False) -> int:
        port: int = free_port(pair=pair, avoid=taken)
        taken.update((port, port + 1) if pair else (port,))
        return port

    data, http = pick(pair=True), pick()
    groups = tuple(s.apply(template, opts.replicas, pick()) for s in settings)
    replace, seq, snap = dataclasses.replace, base.sequencer, base.snapshot
    return dataclasses.replace(
        base,
        markets=base.markets[: opts.markets],
        sequencer=replace(base.sequencer, config=replace(seq.config, wal_dir=str(work / "wal"))),
        snapshot=replace(base.snapshot, config=replace(snap.config, dir=str(work / "snapshots"))),
        ports=dataclasses.replace(base.ports, http=http, data=data),
        replica_groups=groups,
    )


class _Progress:
    def __init__(self, recs: Sequence[Recorder], planned: int, quiet: bool) -> None:
        self.recs = recs
        self.planned = planned
        self.quiet = quiet

    async def run(self, t0: int, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(1.0)
            self.line(t0)

    def line(self, t0: int) -> None:
        if self.quiet:
            return
        el = max(1e-9, (time.monotonic_ns() - t0) / 1e9)
        done = sum(r.done for r in self.recs)
        errs = sum(sum(r.errors(intended=False).values()) for r in self.recs)
        p99 = max((r.latency.percentile(0.99) for r in self.recs), default=0) / 1e6
        sent = sum(r.sent for r in self.recs)
        print(f"[{el:5.1f}s] sent {sent:,}/{self.planned:,}  answered {done:,}  "
              f"{done / el:,.0f} tx/s  errors {errs}  p99 {p99:,.1f} ms",
              file=sys.stderr, flush=True)  # fmt: skip


class _ClientTracer:
    """Client spans for sampled REST requests: from the planned time to the answer."""

    def __init__(self, path: Path) -> None:
        from ..tracing import file_tracer

        self.tracer, self.provider = file_tracer(path, "raydex-loadgen")
        self.open: dict[int, Any] = {}
        self.mono_to_wall = time.time_ns() - time.monotonic_ns()

    def hook(self, item: Item, planned: int, sent: int, done: int) -> dict[str, str]:
        from ..tracing import inject_headers

        if not done:
            span = self.tracer.start_span("client.send", start_time=planned + self.mono_to_wall)
            span.set_attribute("raydex.types", ",".join(item.types))
            span.set_attribute("raydex.send_lag_us", (sent - planned) // 1000)
            self.open[id(item)] = span
            return inject_headers(span)
        span = self.open.pop(id(item), None)
        if span is not None:
            span.end(end_time=done + self.mono_to_wall)
        return {}


def _nothing() -> None:
    return None


def _install_signals() -> Callable[[], None]:
    """SIGINT (Ctrl-C) and SIGTERM raise KeyboardInterrupt, so the ``finally`` blocks tear the
    deployment down. Installed after ``ray.init``, whose own SIGTERM handler would end the process
    at once and leave the teardown undone."""

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {sig: signal.signal(sig, _raise) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)

    return restore


def _job_config(namespace: str, opts: LoadtestOptions) -> Any:
    """The loadtest's row in Ray's Jobs page names it (metadata ``job_name``): which deployment
    it made and at what rate. Ray shows every driver SUCCEEDED once it disconnects; the run's
    verdict is the command's exit status and report.json."""
    from ray.job_config import JobConfig

    name = f"raydex loadtest {namespace} ({opts.tps:g} tx/s for {opts.seconds:g} s)"
    return JobConfig(metadata={"job_name": name, "raydex_deployment": namespace})


def _say(opts: LoadtestOptions, text: str) -> None:
    if not opts.quiet:
        print(text, file=sys.stderr, flush=True)


def run(opts: LoadtestOptions) -> dict[str, Any]:
    """Plan, deploy, drive, collect, report, tear down; returns the JSON report."""
    import ray

    from raydex.cluster.control import deploy as dep
    from raydex.cluster.control.spec import load_spec
    from raydex.cluster.topology import init_kwargs, read_topology

    from .instrument import Instrumentation, InstrumentedReplicaActor

    check_options(opts)
    out = Path(opts.out_dir or f"loadtest-out/{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    # The deployment is isolated: never resume a WAL or snapshots left by an earlier run here.
    shutil.rmtree(out / "state", ignore_errors=True)
    spec = build_spec(load_spec(opts.spec_path), opts, out / "state")
    namespace = f"raydex-loadtest-{os.getpid()}"
    group_ports = [(g.name, g.http_port or spec.ports.http) for g in spec.replica_groups]
    lanes = lane_specs(opts.clients, group_ports, impolite=opts.impolite)
    markets = [MarketInfo.of(m) for m in spec.markets]
    _say(opts, f"loadtest: signing {int(opts.tps * opts.seconds):,} txs before the window")
    plan = plan_load(markets, opts.accounts, opts.tps, opts.seconds, lanes, seed=opts.seed,
                     sample_every=opts.sample_every,
                     progress=None if opts.quiet else lambda s: _say(opts, s),
                     skip_nonce=opts.impolite)  # fmt: skip
    started_ray = False
    topology = read_topology()
    t_boot = time.monotonic()
    restore: Callable[[], None] = _nothing
    try:
        if opts.address is None:
            ray.init(address="local", include_dashboard=False, log_to_driver=False,
                     job_config=_job_config(namespace, opts),
                     **init_kwargs(topology, host="loadtest-host"))  # fmt: skip
            started_ray = True
        else:
            ray.init(address=opts.address, log_to_driver=False,
                     job_config=_job_config(namespace, opts))  # fmt: skip
        restore = _install_signals()
        try:
            dep.deploy(
                spec,
                namespace=namespace,
                bind="127.0.0.1" if opts.address is None else "0.0.0.0",
                topologies={"loadtest-host": topology} if opts.address is None else None,
                replica_class=InstrumentedReplicaActor,
                replica_kwargs={"instrumentation": Instrumentation(str(out))},
                monitor=False,  # its polling would show in the CPU ledger; nothing reads it
            )
            seq = ray.get_actor(dep.SEQUENCER, namespace=namespace)
            for i in range(0, len(plan.setup_ops), 4000):
                ray.get(seq.operator.remote(plan.setup_ops[i : i + 4000]), timeout=120)
            ready = dep.wait_ready(namespace, timeout_s=60)
            if opts.address is not None:  # the replicas of every host, wherever this runs
                endpoints = replica_endpoints(ready)
                lanes = assign_endpoints(lanes, endpoints)
                idle = unused_endpoints(lanes, endpoints)
                if idle:
                    _say(opts, f"loadtest: no lane for {', '.join(idle)}: --clients "
                               f"{opts.clients} is fewer than 2 per endpoint")  # fmt: skip
            boot_s = time.monotonic() - t_boot
            _say(opts, f"loadtest: stack up in {boot_s:.1f} s (namespace {namespace}); "
                       f"{len(lanes)} lanes, groups {[g for g, _ in group_ports]}")  # fmt: skip
            reps = _replicas(namespace)
            roles = {**actor_roles(namespace), os.getpid(): "loadgen"}
            ray.get([a.loadtest_stats.remote(reset=True) for a in reps.values()], timeout=30)
            gen_cpus = generator_cpus(opts.generator_cpus, roles, local=opts.address is None)
            own_cpus = os.sched_getaffinity(0)
            if gen_cpus is not None:
                pin_all_threads(gen_cpus)
                _say(opts, f"loadtest: the generator keeps to CPUs {sorted(gen_cpus)}")
            try:
                win = _drive(opts, plan, lanes, group_ports, out, roles,
                             spec.replica_groups[0].api.ws_max_inflight_txs,
                             namespace)  # fmt: skip
            finally:
                if gen_cpus is not None:
                    pin_all_threads(own_cpus)
            committer = committer_catch_up(namespace)
            stats = dict(zip(reps, ray.get([a.loadtest_stats.remote() for a in reps.values()],
                                           timeout=60), strict=True))  # fmt: skip
            try:
                final = dep.wait_ready(namespace, timeout_s=30)
            except TimeoutError:
                final = dep.status(namespace)
            seq_status = final.get(dep.SEQUENCER, {})
            hashes = {k: v.get("state_hash") for k, v in final.items() if k in reps}
            # each replica's per-account ledger against its budget (a soak: still filling?)
            ledgers = {k: v["ledger"] for k, v in final.items() if k in reps and "ledger" in v}
        finally:
            _say(opts, f"loadtest: tearing down namespace {namespace}")
            try:
                dep.down(namespace)
            finally:
                if started_ray:
                    ray.shutdown()
                shutil.rmtree(out / "state", ignore_errors=True)  # its WAL and snapshots
    finally:
        restore()
    recs, books, elapsed, cpu_s = win.recs, win.books, win.elapsed_s, win.loadgen_cpu_s
    hosts = per_host(win.parts, lanes, elapsed) if opts.address is not None else {}
    groups = []
    for g in spec.replica_groups:
        mine = {k: v for k, v in stats.items() if k.startswith(dep.replica_name(g.name, 0)[:-1])}
        text = next((s.text for s in (opts.ab or ()) if s.name == g.name), "")
        groups.append(GroupData(g.name, text, recs[g.name], books[g.name], mine, elapsed))
    cpus = os.cpu_count() or 1
    run_facts = {
        "tps": opts.tps, "seconds": opts.seconds, "accounts": opts.accounts,
        "markets": opts.markets, "replicas": opts.replicas, "clients": opts.clients,
        "ab": None if opts.ab is None else [s.name + "=" + s.text for s in opts.ab],
        "boot_s": round(boot_s, 1), "sign_s": round(plan.sign_s, 1),
        "planned": len(plan.items), "planned_txs": sum(len(i.types) for i in plan.items),
        "mix": dict(plan.mix), "elapsed_s": round(elapsed, 2),
        "busiest_markets": plan.busiest_markets, "cpus": cpus,
        "loadgen_cpu_pct_of_core": round(100 * cpu_s / elapsed, 1) if elapsed else 0.0,
        "loadgen_cpu_pct_of_machine": round(100 * cpu_s / elapsed / cpus, 1) if elapsed else 0.0,
        "loadgen_loop_lag_us": win.loop_lag.summary_us(),
        "generator_cpus": "any" if gen_cpus is None else sorted(gen_cpus),
        "impolite": opts.impolite, "capacity": opts.capacity,
        "spans_files": sorted(str(p) for p in out.glob("spans-*.jsonl")),
        "out_dir": str(out),
    }  # fmt: skip
    report = build_report(groups, run_facts, seq_status)
    if win.cpu_before is not None and win.cpu_after is not None:
        led = build_ledger(
            win.cpu_before, win.cpu_after, win.roles, sum(r.committed for r in recs.values()),
            session=ray_session_of(win.cpu_after.procs, win.roles),
        )  # fmt: skip
        report["cpu_ledger"] = led.as_json()
        report["cpu_ledger"]["role_restarts"] = win.role_restarts
        report["cpu_us_per_tx"] = led.us_per_tx()
    if win.memory:
        report["memory_mib"] = memory_by_role(win.memory, win.roles)
    report["replica_ledgers"] = ledgers
    report["hosts"] = hosts
    report["committer"] = committer
    if win.profiles:
        report["profiles"] = win.profiles
    report["replicas"] = sorted(hashes)
    report["replica_state_hashes_equal"] = (
        len(set(hashes.values())) == 1 and None not in hashes.values()
    )
    paths = write_report(groups, report, out, Path(opts.json_out) if opts.json_out else None)
    report["files"] = {k: str(v) for k, v in paths.items()}
    return report


def committer_catch_up(
    namespace: str, timeout_s: float = CATCH_UP_TIMEOUT_S, poll_s: float = 0.1
) -> dict[str, Any]:
    """The committer when the timed window ends: how many blocks its commitments and its
    signature audit were behind the sequencer's seq then, and the seconds until both reached
    that seq (None if not within ``timeout_s``), with the audit's counters after it: whether
    the background work keeps up with the load or only catches up once it stops."""
    import ray

    from raydex.cluster.control import deploy as dep

    seq: Any = ray.get_actor(dep.SEQUENCER, namespace=namespace)
    com: Any = ray.get_actor(dep.COMMITTER, namespace=namespace)
    t0 = time.monotonic()
    first: dict[str, Any] = ray.get(seq.status.remote(), timeout=30)
    target = int(first["seq"])
    out: dict[str, Any] = {"sequencer_seq": target}
    caught: float | None = None
    while True:
        st: dict[str, Any] = ray.get(com.status.remote(), timeout=30)
        audit: dict[str, Any] = st.get("signature_audit") or {}
        done = st["seq"] >= target and (not audit or audit["seq"] >= target)
        if "behind_blocks" not in out:
            out["behind_blocks"] = max(0, target - st["seq"])
            out["audit_behind_blocks"] = max(0, target - audit["seq"]) if audit else None
        if done:
            caught = time.monotonic() - t0
            break
        if time.monotonic() - t0 > timeout_s:
            break
        time.sleep(poll_s)
    out["caught_up_s"] = None if caught is None else round(caught, 2)
    out["resyncs"] = st.get("resyncs", 0)
    if audit:
        for k in ("audited_blocks", "skipped_blocks", "failed_txs"):
            out[f"audit_{k}"] = audit.get(k, 0)
    return out


def _replicas(namespace: str) -> dict[str, Any]:
    import ray

    from raydex.cluster.control import deploy as dep

    names = sorted(n for n in dep.named_actors(namespace) if n.startswith(dep.REPLICA_PREFIX))
    return {n: ray.get_actor(n, namespace=namespace) for n in names}


@dataclasses.dataclass
class _Window:
    """What the timed window measured."""

    recs: dict[str, Recorder]
    books: dict[str, BookWatch]
    elapsed_s: float
    loadgen_cpu_s: float
    cpu_before: CpuSample | None = None
    cpu_after: CpuSample | None = None
    #: each process's resident memory over the window (``WindowSampler.memory``)
    memory: dict[int, Rss] = dataclasses.field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    #: how late the generator's own event loop ran (ns): past a few ms, the latencies measured
    #: from planned times are partly the generator's, not the stack's
    loop_lag: Histogram = dataclasses.field(default_factory=Histogram)
    #: every process that held a role in the window (restarted actors included: roles.py)
    roles: dict[int, str] = dataclasses.field(default_factory=dict)
    #: processes that took over a role inside the window (an actor Ray restarted)
    role_restarts: int = 0
    #: the outcomes per (group, host) (``part_key``), summed into ``recs`` after the window
    parts: dict[str, Recorder] = dataclasses.field(default_factory=dict)


def part_key(lane: LaneSpec) -> str:
    return f"{lane.group}@{lane.label}"


def replica_endpoints(statuses: dict[str, Any]) -> dict[str, list[Endpoint]]:
    """group -> ``(host label, IP, port)`` of its replicas that serve their shared port, from
    ``deploy.status`` (each replica's node is looked up in ``ray.nodes()``); one endpoint per
    (host, port): the replicas of one host share it."""
    import ray

    from raydex.cluster.control import deploy as dep
    from raydex.cluster.topology import HOST_LABEL

    nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}  # type: ignore[no-untyped-call]
    out: dict[str, set[Endpoint]] = {}
    for name, st in statuses.items():
        node = nodes.get((st.get("placement") or {}).get("node_id", ""))
        if not name.startswith(dep.REPLICA_PREFIX) or not st.get("serving") or node is None:
            continue
        group = name.removeprefix(dep.REPLICA_PREFIX).rpartition("-")[0]
        ip = str(node["NodeManagerAddress"])
        label = str(node.get("Labels", {}).get(HOST_LABEL) or ip)
        out.setdefault(group, set()).add((label, ip, int(st["port"])))
    return {g: sorted(e) for g, e in out.items()}


def unused_endpoints(lanes: Sequence[LaneSpec], endpoints: dict[str, list[Endpoint]]) -> list[str]:
    """``group@host:port`` of each endpoint no lane was given (fewer lanes than endpoints)."""
    used = {(ln.group, ln.host, ln.port) for ln in lanes}
    return [f"{g}@{ip}:{port}" for g, eps in endpoints.items() for _, ip, port in eps
            if (g, ip, port) not in used]  # fmt: skip


def per_host(
    parts: dict[str, Recorder], lanes: Sequence[LaneSpec], elapsed_s: float
) -> dict[str, Any]:
    """What each host's replicas answered over the window: endpoints, txs answered and accepted,
    accepted tx/s, latency p50 / p99 (µs from the planned send), and the non-200 answers."""
    out: dict[str, Any] = {}
    for ln in lanes:
        row = out.setdefault(ln.label, {"endpoints": set(), "lanes": 0})
        row["endpoints"].add(f"{ln.host}:{ln.port}")
        row["lanes"] += 1
    for label, row in out.items():
        merged = Recorder(label)
        for key, part in parts.items():
            if key.rpartition("@")[2] == label:
                merged.merge(part)
        ok = merged.codes.get(200, 0)
        lat = merged.latency.summary_us()
        row.update(
            endpoints=sorted(row["endpoints"]), txs=merged.done, accepted=ok,
            accepted_per_s=round(ok / elapsed_s, 1) if elapsed_s else 0.0,
            p50_us=lat.get("p50"), p99_us=lat.get("p99"), errors=merged.errors(),
        )  # fmt: skip
    return dict(sorted(out.items()))


async def _loop_lag(into: Histogram, stop: asyncio.Event, interval_s: float = 0.02) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        into.record(int(max(0.0, loop.time() - due) * 1e9))


def _drive(
    opts: LoadtestOptions,
    plan: LoadPlan,
    lanes: list[LaneSpec],
    group_ports: list[tuple[str, int]],
    out: Path,
    roles: dict[int, str],
    ws_max_inflight: int,
    namespace: str,
) -> _Window:
    items = plan.items
    recs = {g: Recorder(g) for g, _ in group_ports}
    # one recorder per (group, host) while driving; the groups' are their sum (per_host below)
    parts = {part_key(ln): Recorder(ln.group) for ln in lanes}
    books = {g: BookWatch() for g, _ in group_ports}
    win = _Window(recs, books, 0.0, 0.0, roles=dict(roles), parts=parts)
    tracer = _ClientTracer(out / "spans-loadgen.jsonl") if opts.sample_every > 0 else None
    # impolite clients sign with SkipNonce: a refusal leaves a gap, nothing to re-sync
    resync = opts.resync and not opts.impolite
    seeds = {t.account: t.seed for t in plan.traders} if resync else None

    async def main() -> None:
        stop_watch = asyncio.Event()
        stop_load = asyncio.Event()
        readies = [asyncio.Event() for _ in group_ports]
        t_wall_us = time.time_ns() // 1000 + 1_000_000
        first = {ln.group: ln for ln in reversed(lanes)}  # each group's first lane's replica
        watchers = [
            asyncio.ensure_future(
                watch_books(first[g].port, plan.busiest_markets, stop_watch, books[g],
                            t_wall_us, r, host=first[g].host)
            )
            for (g, _), r in zip(group_ports, readies, strict=True)
        ]  # fmt: skip
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), timeout=15)
        t0 = time.monotonic_ns() + 500_000_000
        planned = sum(len(it.types) for it in items)
        progress = _Progress(list(parts.values()), planned, opts.quiet)
        ticker = asyncio.ensure_future(progress.run(t0, stop_load))
        lagger = asyncio.ensure_future(_loop_lag(win.loop_lag, stop_load))
        sampler = WindowSampler(roles)
        follower = RoleFollower(namespace, sampler)
        spies = {}
        if opts.profile:
            spies = await start_profiles(roles, opts.seconds, out, find_py_spy())
        lanes_done = asyncio.ensure_future(
            run_lanes(lanes, items, parts, t0, stop_load,
                      tracer.hook if tracer is not None else None,
                      seeds=seeds, ws_max_inflight=ws_max_inflight, key=part_key)
        )  # fmt: skip
        following = asyncio.ensure_future(follower.run(stop_load))
        try:
            # the window opens at t0: the first planned send
            await asyncio.wait([lanes_done], timeout=max(0.0, (t0 - time.monotonic_ns()) / 1e9))
            sampler.begin()
            cpu0 = time.process_time()
            while not lanes_done.done():
                await asyncio.wait([lanes_done], timeout=1.0)
                sampler.tick()
            await lanes_done
            win.cpu_before, win.cpu_after = sampler.end()
            win.memory = sampler.memory
            win.roles, win.role_restarts = sampler.roles, follower.restarts
        finally:
            stop_load.set()
            if not lanes_done.done():
                lanes_done.cancel()
        for part in parts.values():
            recs[part.name].merge(part)
        win.elapsed_s = (time.monotonic_ns() - t0) / 1e9
        win.loadgen_cpu_s = time.process_time() - cpu0
        progress.line(t0)
        ticker.cancel()
        lagger.cancel()
        await asyncio.gather(following, return_exceptions=True)
        if spies:
            win.profiles = await finish_profiles(spies, grace_s=opts.seconds + 30)
        await asyncio.sleep(0.5)  # the last blocks reach the watchers
        stop_watch.set()
        await asyncio.gather(*watchers, return_exceptions=True)

    # The plan (every signed tx of the window: millions of tracked objects in a long run) is
    # moved out of the collector's reach, as a replica freezes what it loaded at boot: a
    # whole-heap collection would otherwise walk all of it, stalling every lane's sends for as
    # long (the open-loop latency charges that stall to the server).
    gc.collect()
    gc.freeze()
    try:
        asyncio.run(main())
    finally:
        gc.unfreeze()
        if tracer is not None:
            tracer.provider.shutdown()
    return win
