"""The ``raydex`` command line (console script ``raydex = raydex.cluster.cli:main``).

Subcommands (``raydex <command> --help`` for each one's flags; README.md has the table):

- ``demo`` (``observability/loadtest/demo.py``; ``--engine``: the engine alone, no Ray) and
  ``loadtest`` (``observability/loadtest/``; ``--sweep``, ``--ab``, ``--profile``);
- ``up``, ``deploy``, ``status``, ``deposit``, ``down`` (``cluster/control/``): ``up`` starts a
  local Ray head recorded in a state file (``cluster/control/head.py``) unless ``--address`` names
  a cluster, then deploys; ``down --stop-ray`` stops only that head, never another Ray (no
  ``ray stop``);
- ``grafana install`` (``observability/grafana.py``);
- ``bench engine|codecs|signatures|apply|transport|dataplane|flood|wal|sequencer|replication``
  (``observability/bench/``; the last seven delegated whole to their module's ``main``);
- ``node-args`` (``cluster/topology.py``).

Control commands connect to ``--address``, else ``RAY_ADDRESS``, else the head ``raydex up``
recorded, else Ray's ``auto`` lookup. With ``--json`` a command prints exactly one JSON object on
stdout (diagnostics go to stderr). Exit status: 0 on success, 1 when the engine's self-validation
fails or ``raydex deploy`` refuses or cannot place its plan (rolled back), 2 on bad arguments;
``raydex status``: 3 when it finds a state divergence or a failed signature audit, 4 when the
deployment is degraded (an actor or host down, restarting or unreachable, unaudited blocks).

Heavy modules are imported inside the handlers, so ``raydex --help`` stays fast. A new subcommand
is one ``_add_*`` function registering its parser and handler.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]

#: Subcommands whose module parses its own arguments: argv prefix -> module with ``main(argv)``.
_DELEGATED: dict[tuple[str, ...], str] = {
    ("node-args",): "raydex.cluster.topology",
    ("bench", "transport"): "raydex.observability.bench.transport",
    ("bench", "apply"): "raydex.observability.bench.apply",
    ("bench", "dataplane"): "raydex.observability.bench.dataplane",
    ("bench", "flood"): "raydex.observability.bench.flood",
    ("bench", "wal"): "raydex.observability.bench.wal",
    ("bench", "sequencer"): "raydex.observability.bench.sequencer",
    ("bench", "replication"): "raydex.observability.bench.replication",
}


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {value}")
    return value


def _demo(args: argparse.Namespace) -> int:
    if args.engine:
        from raydex.observability.bench import engine as bench_engine

        report = bench_engine.demo(commands=args.commands, seed=args.seed, json_out=args.json)
        return 0 if report["valid"] else 1
    from raydex.observability.loadtest import demo

    result = demo.run(
        spec_path=args.spec,
        seconds=args.seconds,
        traders=args.traders,
        replicas=args.replicas,
        json_out=args.json,
        tps=args.tps,
    )
    return 0 if result["replica_state_hashes_equal"] and result["nonce_gaps"] == 0 else 1


def _loadtest(args: argparse.Namespace) -> int:
    import json

    from raydex.observability.loadtest import run as loadtest

    try:
        ab = loadtest.parse_ab(args.ab) if args.ab else None
    except loadtest.AbError as exc:
        print(f"raydex loadtest: {exc}", file=sys.stderr)
        return 2
    opts = loadtest.LoadtestOptions(
        tps=args.tps, seconds=args.seconds, accounts=args.accounts, markets=args.markets,
        replicas=args.replicas, clients=args.clients, ab=ab, spec_path=args.spec,
        out_dir=args.out, json_out=args.json_out, address=args.address,
        sample_every=args.sample_every, seed=args.seed, quiet=args.quiet,
        profile=args.profile, resync=not args.no_resync, generator_cpus=args.generator_cpus,
        impolite=args.impolite, capacity=args.capacity,
    )  # fmt: skip
    if args.sweep is not None:
        return _sweep(args, opts)
    try:
        report = loadtest.run(opts)
    except loadtest.OptionError as exc:
        print(f"raydex loadtest: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("raydex loadtest: interrupted; the deployment was torn down", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(report, default=str))
    else:
        print(Path(report["files"]["markdown"]).read_text())
    return 0


def _sweep(args: argparse.Namespace, opts: Any) -> int:
    import json

    from raydex.observability.loadtest import run as loadtest
    from raydex.observability.loadtest import sweep

    try:
        rates = sweep.parse_rates(args.sweep)
        doc = sweep.sweep(opts, rates)
    except (ValueError, loadtest.OptionError) as exc:
        print(f"raydex loadtest: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("raydex loadtest: interrupted; the deployment was torn down", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(doc, default=str))
    else:
        print(Path(doc["files"]["markdown"]).read_text())
    return 0


def _add_loadtest(sub: Any) -> None:
    p = sub.add_parser(
        "loadtest",
        help="an isolated, instrumented deployment under open-loop signed load; reports",
        description="Deploy an isolated stack (own Ray namespace and ports), sign the load up "
        "front, drive it open-loop over REST and WebSocket, and write report.md, report.json "
        "and PNG plots into --out. --ab runs two replica groups side by side.",
    )
    p.add_argument("--tps", type=float, default=300.0, help="planned signed tx/s (300)")
    p.add_argument("--seconds", type=float, default=30.0, help="timed window (30)")
    p.add_argument("--accounts", type=_positive, default=200, help="synthetic accounts (200)")
    p.add_argument("--markets", type=_positive, default=4, help="markets from the spec (4)")
    p.add_argument("--replicas", type=_positive, default=None,
                   help="replicas per group (the spec's: 1 per NUMA node)")  # fmt: skip
    p.add_argument("--clients", type=_positive, default=8, help="client lanes, WS and REST (8)")
    p.add_argument("--ab", nargs="+", default=None, metavar="NAME=SETTINGS",
                   help="two groups, e.g. pinned=pin:on,unpinned=pin:off "
                   "(settings: pin, gc, realtime, busy, huge, replicas, cpus, door; "
                   "join with +)")  # fmt: skip
    p.add_argument("--spec", default="raydex.yaml", help="base deploy spec (raydex.yaml)")
    p.add_argument("--out", default=None, help="output folder (loadtest-out/<time>)")
    p.add_argument("--json-out", default=None, help="also write the JSON report here")
    p.add_argument("--address", default=None, help="a Ray cluster (default: embedded local Ray)")
    p.add_argument("--sample-every", type=int, default=100, help="trace 1 in N requests (100)")
    p.add_argument("--seed", type=int, default=1, help="workload seed (1)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    p.add_argument("--profile", action="store_true",
                   help="also record a py-spy profile per role (raydex[profile])")  # fmt: skip
    p.add_argument("--sweep", default=None, metavar="RATES",
                   help="a capacity sweep instead of one run: one loadtest per offered rate, "
                   "e.g. 1000,2000,3000 or 1000:5000:1000 (start:stop:step); sweep.md/json/png "
                   "in --out")  # fmt: skip
    p.add_argument("--generator-cpus", default="auto", metavar="any|auto|CPUS",
                   help="where the generator runs in the window: auto (off the replicas' cores "
                   "when they are pinned and others remain; default), any (where the kernel "
                   "puts it), or a list like 1,3")  # fmt: skip
    p.add_argument("--no-resync", action="store_true",
                   help="after a rejection keep sending the planned nonces (no nextNonce "
                   "re-sync; the account's later txs then fail INVALID_NONCE)")  # fmt: skip
    p.add_argument("--impolite", action="store_true",
                   help="clients that do not bound their in-flight requests (a flood): every tx "
                   "over REST at its planned time, SkipNonce-signed; the report reads the run "
                   "against the overload goals")  # fmt: skip
    p.add_argument("--capacity", type=float, default=None, metavar="TPS",
                   help="with --impolite: the capacity the goals are read against (default: "
                   "half of --tps)")  # fmt: skip
    p.set_defaults(handler=_loadtest)


def _resolve_address(address: str | None) -> str | None:
    """Where the control commands connect: ``--address``; else ``RAY_ADDRESS`` or Ray's local
    lookup (``auto``) ... unless a head started by ``raydex up`` runs, which is then used (with
    its auth mode). Call before importing Ray: Ray reads ``RAY_AUTH_MODE`` when imported."""
    from ..control.head import read_record, running

    if address or os.environ.get("RAY_ADDRESS"):
        return address
    head = read_record()
    if head is not None and running(head):
        os.environ.setdefault("RAY_AUTH_MODE", head.auth_mode)
        return head.address
    return None


def job_metadata(**facts: str) -> dict[str, str]:
    """What Ray's Jobs page shows of this driver (its metadata; ``job_name`` is the key Ray's own
    job supervisor uses): the raydex command it ran, e.g. ``raydex status --json``, or the
    ``job_name`` of ``facts`` (what a deploying driver does: :func:`deploy_job_name`). Ray marks
    every driver job SUCCEEDED once the driver disconnects, whatever its exit status (its job record
    has no exit status; only jobs submitted through the Jobs API, ``ray job submit``, can show
    FAILED), so the command's outcome is its exit status and output, not this row."""
    args = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))
    return {"job_name": args or "raydex", "raydex_command": args, **facts}


def deploy_job_name(command: str, spec_path: str, spec: Any) -> str:
    """The Jobs page name of a deploying driver: what it deploys where, e.g. ``raydex up: deploys
    raydex.yaml into namespace raydex (sequencer, snapshot holder, committer; replica group
    public x2)``. Known from the spec before connecting (a job's metadata is fixed then)."""
    from ..control.deploy import NAMESPACE

    groups = ", ".join(
        f"{g.name} x{g.replicas}"
        if g.replicas is not None
        else f"{g.name} x{g.replicas_per_numa_node} per NUMA node"
        for g in spec.replica_groups
    )
    parts = "sequencer, snapshot holder, committer"
    if groups:
        parts += f"; replica groups {groups}"
    return f"{command}: deploys {os.path.basename(spec_path)} into namespace {NAMESPACE} ({parts})"


@contextlib.contextmanager
def _ray_prints_to_stderr() -> Iterator[None]:
    """While connected, what Ray prints on the driver (a node marked dead, an actor's error) goes
    to stderr, so that a command's stdout stays what it promises (one JSON object, an index).
    Disconnect inside: Ray's printing thread stops with the connection."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _connect(address: str | None, job_name: str | None = None) -> Any:
    import ray
    from ray.job_config import JobConfig

    named = {"job_name": job_name} if job_name else {}
    try:
        return ray.init(address=address or "auto", log_to_driver=False,
                        job_config=JobConfig(metadata=job_metadata(**named)))  # fmt: skip
    except ConnectionError as exc:  # a clear line and exit 2, not a traceback
        print(f"raydex: could not connect to Ray ({exc})", file=sys.stderr)
        if "RAY_AUTH_MODE" not in os.environ:
            print(
                "raydex: if the cluster uses Ray's token authentication (the default for `ray "
                "start` when ~/.ray/auth_token exists), an explicit address (--address, "
                "RAY_ADDRESS) needs RAY_AUTH_MODE=token",
                file=sys.stderr,
            )
        raise SystemExit(2) from None


def _up(args: argparse.Namespace) -> int:
    from ..control import head as local_head

    env = local_head.head_env(os.environ)
    if args.address is None:  # our own head: the driver uses the head's auth mode
        os.environ.setdefault("RAY_AUTH_MODE", env["RAY_AUTH_MODE"])
    from ..control import deploy
    from ..control.spec import load_spec

    spec = load_spec(args.spec)  # a bad spec fails before anything starts
    address = args.address
    if address is None:
        head = local_head.start_head(
            port=args.port, temp_dir=args.temp_dir, dashboard=not args.no_dashboard,
            dashboard_port=args.dashboard_port, dashboard_host=args.dashboard_host,
            extra_args=args.ray_args, env=env,
        )  # fmt: skip
        address = head.address
        print(f"raydex up: started a Ray head (pid {head.pid}, {head.address}; log {head.log}); "
              f"`raydex down --stop-ray` stops it and only it")  # fmt: skip
        _print_dashboard(head.dashboard_url, env, wanted=not args.no_dashboard, log=head.log)
    _connect(address, deploy_job_name("raydex up", args.spec, spec))
    bind = args.bind or ("127.0.0.1" if args.address is None else "0.0.0.0")
    try:
        result = deploy.deploy(spec, bind=bind)
    except Exception:
        if args.address is None:
            print("raydex up: deploy failed; the head keeps running "
                  "(`raydex down --stop-ray` stops it)", file=sys.stderr)  # fmt: skip
        raise
    print(f"raydex is up: replicas {', '.join(result.replicas)} on port {result.http_port}; "
          f"sequencer {result.sequencer_target}")  # fmt: skip
    return 0


def _print_dashboard(url: str | None, env: dict[str, str], *, wanted: bool, log: str) -> None:
    from ..control.head import PASSTHROUGH_ENV

    if url is None:
        print(
            "raydex up: no dashboard (--no-dashboard)"
            if not wanted
            else f"raydex up: the head printed no dashboard URL (it did not start? see {log})"
        )
        return
    profiling = "on" if env.get("RAY_DASHBOARD_ENABLE_PROFILING") == "1" else "off"
    given = [f"{k}={env[k]}" for k in PASSTHROUGH_ENV if env.get(k)]
    unset = "RAY_PROMETHEUS_HOST/RAY_GRAFANA_HOST not set: its Metrics tab will ask for them"
    metrics = ", ".join(given) if given else unset
    print(f"raydex up: dashboard {url} (profiling {profiling}; {metrics})")


def _deploy(args: argparse.Namespace) -> int:
    address = _resolve_address(args.address)
    from ..control import deploy
    from ..control.placement import PlacementError
    from ..control.spec import load_spec

    spec = load_spec(args.spec)
    _connect(address, deploy_job_name("raydex deploy", args.spec, spec))
    try:
        result = deploy.deploy(spec, bind=args.bind)
    except (deploy.DeployRefused, PlacementError) as exc:
        # a refusal or a plan Ray could not place: one clear paragraph, not a traceback
        print(f"raydex deploy: {exc}", file=sys.stderr)
        for note in getattr(exc, "__notes__", ()):
            print(f"raydex deploy: {note}", file=sys.stderr)
        return 1
    for warning in result.warnings:
        print(f"raydex deploy: {warning}", file=sys.stderr)
    print(f"created: {list(result.created)}  removed: {list(result.removed)}  "
          f"replicas: {list(result.replicas)}")  # fmt: skip
    return 0


def _status(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    address = _resolve_address(args.address)
    from ..control import health, view  # not deploy: what creates actors costs seconds to import

    with _ray_prints_to_stderr():
        _connect(address)
        import ray

        # The monitor gathers (it holds every actor's handle: a new driver would spend seconds
        # importing their classes); when it cannot, the actors are asked from here.
        facts: health.Facts
        st: dict[str, Any]
        try:
            monitor = ray.get_actor(view.MONITOR, namespace=view.NAMESPACE)
            facts, st = ray.get(monitor.check.remote(args.timeout), timeout=args.timeout + 5)
        except Exception as exc:  # no monitor, or it did not answer: asked directly, slower
            if not isinstance(exc, ValueError):  # ValueError: there is none (nothing deployed)
                why = type(exc).__name__
                print(f"raydex status: the deployment's monitor did not answer ({why}); "
                      "asking every actor from here", file=sys.stderr)  # fmt: skip
            facts, st = health.gather(timeout_s=args.timeout)
        hosts = view.host_loads(st)
        ray.shutdown()
    verdict = health.assess(facts)
    agree = view.state_agreement({k: v for k, v in st.items() if "error" not in v})
    audit = view.audit_line(st)
    if args.json:
        rows = [{**dataclasses.asdict(h), "oversubscribed": h.oversubscribed, "line": h.line()}
                for h in hosts]  # fmt: skip
        states = [{"seq": a.seq, "hashes": a.hashes, "diverged": a.diverged, "line": a.line()}
                  for a in agree]  # fmt: skip
        print(json.dumps({"actors": st, "hosts": rows, "state": states,
                          "health": verdict.as_json()}, default=str))  # fmt: skip
        return verdict.code
    for actor in verdict.actors:
        s = st.get(actor.name, {})
        print(s.get("repr") or actor.name, {k: s[k] for k in _STATUS_KEYS if k in s})
        print(f"  {actor.line()}")
    for a in agree:
        print(a.line())
    if audit is not None:
        print(audit[0])
    for h in hosts:
        print(h.line())
    for host, up in verdict.hosts.items():
        if not up:
            print(f"host {host}: DOWN (no live Ray node carries its label)")
    print(verdict.line())
    return verdict.code


#: what ``raydex status`` prints per actor besides its repr
_STATUS_KEYS = (
    "seq", "lag", "state_hash_seq", "state_hash", "port", "signatures", "placement", "error",
    "refused", "epoch", "replication", "durable_seq", "primary", "standby", "in_sync",
    "lease_left_s",
)  # fmt: skip


def _down(args: argparse.Namespace) -> int:
    from ..control import head as local_head

    address = _resolve_address(args.address)
    from ..control import deploy

    try:
        _connect(address)
    except ConnectionError as exc:
        if not args.stop_ray:
            raise
        print(f"raydex down: no cluster to stop actors on ({exc})", file=sys.stderr)
    else:
        print("stopped:", ", ".join(deploy.down()) or "nothing")
        import ray

        ray.shutdown()
    if args.stop_ray:
        record = local_head.read_record()
        if record is None:
            print(f"raydex down: no Ray head started by `raydex up` is recorded "
                  f"({local_head.record_path()}); no Ray stopped")  # fmt: skip
            return 0
        done = local_head.stop_head(record)
        print(f"raydex down: stopped the Ray head `raydex up` started (pid {record.pid}, "
              f"{record.address}): {len(done.terminated)} processes"
              + (f", {len(done.killed)} needed SIGKILL" if done.killed else ""))  # fmt: skip
    return 0


def _deposit(args: argparse.Namespace) -> int:
    from raydex.codecs import CodecError, ResultCode, str_to_usdc
    from raydex.codecs.signing import l1_address_text, parse_l1_address

    l1 = parse_l1_address(args.l1_address)
    if l1 is None:
        print("raydex deposit: --l1-address needs 0x + 40 hex digits (not zero)", file=sys.stderr)
        return 2
    try:
        amount = str_to_usdc(args.amount)
    except CodecError as e:
        print(f"raydex deposit: --amount: {e}", file=sys.stderr)
        return 2
    if amount <= 0:
        print("raydex deposit: --amount must be positive", file=sys.stderr)
        return 2
    address = _resolve_address(args.address)
    from ..control import operator

    with _ray_prints_to_stderr():  # stdout carries the index alone, for scripts
        _connect(address)
        code, index = operator.deposit_l1(l1, amount, namespace=args.namespace)
        import ray

        ray.shutdown()
    if index is None:
        print(f"raydex deposit: refused with {ResultCode(code).name} ({code})", file=sys.stderr)
        return 1
    print(index)
    print(f"account {index} ({l1_address_text(l1)}) credited {args.amount} USDC", file=sys.stderr)
    return 0


def _add_ops(sub: Any) -> None:
    up = sub.add_parser(
        "up",
        help="start a local Ray head (or join --address) and deploy",
        description="Start a Ray head on this host (`ray start --head --block` with `raydex "
        "node-args`, from this interpreter's environment, profiling on, RAY_PROMETHEUS_HOST/"
        "RAY_GRAFANA_HOST/RAY_GRAFANA_IFRAME_HOST passed through) and record it so that "
        "`raydex down --stop-ray` stops it and only it; or, with --address, use that cluster. "
        "Then deploy the spec. Flags after -- go to `ray start`.",
    )
    up.add_argument("--spec", default="raydex.yaml", help="deploy spec (raydex.yaml)")
    up.add_argument("--address", default=None, help="an existing Ray cluster to deploy on")
    up.add_argument("--port", type=int, default=6379, help="the head's GCS port (6379)")
    up.add_argument("--temp-dir", default=None, help="the head's Ray temp dir (Ray's default)")
    up.add_argument("--dashboard-port", type=int, default=8265, help="dashboard port (8265)")
    up.add_argument("--dashboard-host", default=None, help="dashboard listen address")
    up.add_argument("--no-dashboard", action="store_true", help="start the head without it")
    up.add_argument("--bind", default=None,
                    help="servers' address (127.0.0.1 on our own head, else 0.0.0.0)")  # fmt: skip
    up.add_argument("ray_args", nargs="*", metavar="-- RAY_START_FLAGS",
                    help="more `ray start` flags, after --")  # fmt: skip
    up.set_defaults(handler=_up)
    d = sub.add_parser("deploy", help="reconcile the running cluster with a deploy spec")
    d.add_argument("spec", help="deploy spec, e.g. raydex.yaml")
    d.add_argument("--address", default=None,
                   help="Ray address (RAY_ADDRESS, the head of `raydex up`, or auto)")  # fmt: skip
    d.add_argument("--bind", default="0.0.0.0", help="listen address of the servers (0.0.0.0)")
    d.set_defaults(handler=_deploy)
    st = sub.add_parser(
        "status",
        help="health, status and placement of every raydex actor, per host; exit 0/3/4",
        description="Every planned actor's state (alive, restarting, unreachable, host down, "
        "missing, ...), state hashes, the signature audit, cores per host. Exit status: 0 "
        "healthy, 3 state diverged or signature audit failed, 4 degraded (an actor or a host "
        "down or restarting, unaudited blocks).",
    )
    st.add_argument("--address", default=None, help="Ray address (as for deploy)")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    st.add_argument("--timeout", type=float, default=3.0,
                    help="seconds to wait for the actors' answers, asked at once (3)")  # fmt: skip
    st.set_defaults(handler=_status)
    dp = sub.add_parser(
        "deposit",
        help="fund the account of an L1 address (created if needed); prints its index",
        description="Lighter's deposit from L1, as the operator: credit --amount USDC to the "
        "account of --l1-address, creating it (the next free index) if the address has none, "
        "through the Ray control plane. Prints the account index on stdout.",
    )
    dp.add_argument("--l1-address", required=True, help="the account's Ethereum address, 0x...")
    dp.add_argument("--amount", required=True, help="USDC, a decimal string (e.g. 1000 or 2.5)")
    dp.add_argument("--address", default=None, help="Ray address (as for deploy)")
    dp.add_argument("--namespace", default="raydex", help="the deployment's Ray namespace")
    dp.set_defaults(handler=_deposit)
    dn = sub.add_parser("down", help="stop every raydex actor")
    dn.add_argument("--address", default=None, help="Ray address (as for deploy)")
    dn.add_argument("--stop-ray", action="store_true",
                    help="also stop the Ray head `raydex up` started (only that one)")  # fmt: skip
    dn.set_defaults(handler=_down)


def _grafana_install(args: argparse.Namespace) -> int:
    from raydex.observability import grafana

    from ..control.head import read_record

    if args.session_dir is not None:
        session = Path(args.session_dir)
    else:
        head = read_record()  # the head `raydex up` started, with its --temp-dir
        session = grafana.default_session_dir(head.temp_dir if head is not None else None)
    try:
        target = grafana.install(session)
    except FileNotFoundError as exc:
        print(f"raydex grafana install: {exc}", file=sys.stderr)
        return 2
    print(f"raydex grafana install: {target} (the 'raydex' dashboard in the 'Ray' folder of the "
          f"Grafana run with {session.resolve() / 'metrics/grafana/grafana.ini'})")  # fmt: skip
    return 0


def _add_grafana(sub: Any) -> None:
    p = sub.add_parser("grafana", help="the raydex Grafana dashboard beside Ray's")
    g = p.add_subparsers(dest="grafana", metavar="{install}", required=True)
    i = g.add_parser(
        "install",
        help="copy the raydex dashboard into the Grafana provisioning of the Ray session",
        description="Copy observability/grafana_dashboard.json into <session>/metrics/grafana/"
        "dashboards, which the Grafana Ray provisions for the session loads (next to Ray's own "
        "dashboards). Default session: the newest one of the head `raydex up` started, else "
        "/tmp/ray/session_latest.",
    )
    i.add_argument("--session-dir", default=None, help="a Ray session folder")
    i.set_defaults(handler=_grafana_install)


def _bench_engine(args: argparse.Namespace) -> int:
    from raydex.observability.bench import engine as bench_engine

    report = bench_engine.run(
        commands=args.commands,
        seed=args.seed,
        json_out=args.json,
        conditional_share=args.conditional_share,
    )
    return 0 if report["valid"] else 1


def _bench_codecs(args: argparse.Namespace) -> int:
    from raydex.observability.bench import codecs as bench_codecs

    bench_codecs.run(json_out=args.json)
    return 0


def _bench_signatures(args: argparse.Namespace) -> int:
    from raydex.observability.bench import signatures as bench_signatures

    bench_signatures.run(json_out=args.json)
    return 0


def _add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole exchange on an embedded Ray under a 20-second loadtest",
        description="Deploy the stack on an embedded local Ray, run a loadtest (signed REST and "
        "WebSocket load), report, stop. --engine: only the engine over the generated workload.",
    )
    p.add_argument("--spec", default="raydex.yaml", help="deploy spec (raydex.yaml)")
    p.add_argument("--seconds", type=float, default=20.0, help="loadtest duration (20)")
    p.add_argument("--tps", type=float, default=300.0, help="planned tx/s (300)")
    p.add_argument("--traders", type=_positive, default=24, help="signing traders (24)")
    p.add_argument("--replicas", type=_positive, default=2, help="API replicas (2)")
    p.add_argument("--engine", action="store_true", help="engine only, no Ray")
    p.add_argument("--commands", type=_positive, default=200_000, help="--engine: stream size")
    p.add_argument("--seed", type=int, default=1, help="--engine: workload seed (1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_demo)


def _add_bench(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmarks (engine, codecs, signatures, apply, transport, dataplane, flood, wal, "
        "sequencer, replication)",
    )
    bench = p.add_subparsers(
        dest="bench",
        metavar="{engine,codecs,signatures,apply,transport,dataplane,flood,wal,sequencer,"
        "replication}",
        required=True,
    )
    e = bench.add_parser(
        "engine",
        help="the engine over the realistic workload, beside a bare book",
        description="Time the engine per command on one core over the generated workload, and "
        "the same order stream through a bare price-time book.",
    )
    e.add_argument("--commands", type=_positive, default=1_000_000, help="stream size (1,000,000)")
    e.add_argument("--seed", type=int, default=1, help="workload seed (1)")
    e.add_argument(
        "--conditional-share",
        type=float,
        default=None,
        help="share of stop-loss / take-profit, grouped and TWAP traffic (0.02; 0: the stream "
        "without them)",
    )
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.set_defaults(handler=_bench_engine)
    c = bench.add_parser(
        "codecs",
        help="block encode/decode: construct, compiled, hot codec, struct floor, msgpack, pickle",
    )
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(handler=_bench_codecs)
    sg = bench.add_parser(
        "signatures",
        help="Lighter signatures: sign/verify in C, pure Python and lighter-sdk's signer",
    )
    sg.add_argument("--json", action="store_true", help="print one JSON object")
    sg.set_defaults(handler=_bench_signatures)
    # Listed for --help; main() hands their arguments to the module before parsing.
    bench.add_parser(
        "apply", help="the replica's apply path (decode, cache update, fan-out): ns per delta"
    )
    bench.add_parser(
        "transport", help="blocks actor to actor: TCP, Unix socket, gRPC, Ray calls (starts Ray)"
    )
    bench.add_parser("dataplane", help="book-update latency under a flood of badly signed batches")
    bench.add_parser(
        "flood", help="connections without credentials: what they hold, and honest clients"
    )
    bench.add_parser("wal", help="the WAL's per-block write and sync: appended vs preallocated")
    bench.add_parser(
        "sequencer",
        help="the sequencer alone on its data plane: the highest rate with block p99 <= 2 ms",
    )
    bench.add_parser(
        "replication", help="per-block answer time, durability local vs replicated (a standby)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raydex",
        description="raydex: a low-latency perpetual-futures exchange stack on Ray.",
    )
    sub = parser.add_subparsers(
        dest="command",
        metavar="{demo,loadtest,up,deploy,status,deposit,down,grafana,bench,node-args}",
        required=True,
    )
    _add_demo(sub)
    _add_loadtest(sub)
    _add_ops(sub)
    _add_grafana(sub)
    _add_bench(sub)
    sub.add_parser("node-args", help="print the `ray start` flags for this host (NUMA, labels)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for prefix, module in _DELEGATED.items():
        if tuple(argv[: len(prefix)]) == prefix:
            delegate: Callable[[list[str]], int] = importlib.import_module(module).main
            return delegate(argv[len(prefix) :])
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except BrokenPipeError:
        # The reader went away (``raydex bench engine | head``): not a failure of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
