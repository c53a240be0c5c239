"""The ``raydex`` command line (console script ``raydex = raydex.cluster.cli:main``).

Subcommands (every one of them works; nothing here is a placeholder):

- ``raydex demo [--seconds S] [--traders N] [--replicas R] [--spec PATH] [--json]``: the whole
  exchange on an embedded local Ray, a short signed REST + WebSocket load, and its report
  (``observability.demo``). ``raydex demo --engine [--commands N]`` runs only the engine over the
  generated workload (no Ray) and summarizes it.
- ``raydex up [--spec raydex.yaml] [--address ADDR]``: start a local Ray head advertising this
  host (``ray start --head`` with ``raydex node-args``) unless ``--address`` names a cluster, then
  deploy. ``raydex deploy SPEC``: reconcile a running cluster with SPEC (scale replicas live).
  ``raydex status [--json]``: every actor's status and placement. ``raydex down [--stop-ray]``.
- ``raydex bench engine [--commands N] [--seed S] [--json]``: the engine benchmark
  (``observability.bench_engine``; 1,000,000 commands by default).
- ``raydex bench codecs [--json]``: the codec benchmark (``observability.bench_codecs``).
- ``raydex bench transport [--json]``: the data-plane benchmark (``observability.bench_transport``;
  starts and stops a local Ray unless one is up). Delegated whole to that module's ``main``.
- ``raydex node-args [--role R] [--root PATH] [--host H]``: the ``ray start`` flags for this host
  (``cluster.topology``). Delegated whole to that module's ``main``.

With ``--json`` a command prints exactly one JSON object on stdout (diagnostics go to stderr).
Exit status: 0 on success, 1 when the engine's self-validation fails, 2 on bad arguments.

Heavy modules are imported inside the handlers, so ``raydex --help`` stays fast. A new subcommand
is one ``_add_*`` function registering its parser and handler.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]

#: Subcommands whose module parses its own arguments: argv prefix -> module with ``main(argv)``.
_DELEGATED: dict[tuple[str, ...], str] = {
    ("node-args",): "raydex.cluster.topology",
    ("bench", "transport"): "raydex.observability.bench_transport",
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
        from raydex.observability import bench_engine

        report = bench_engine.demo(commands=args.commands, seed=args.seed, json_out=args.json)
        return 0 if report["valid"] else 1
    from raydex.observability import demo

    result = demo.run(
        spec_path=args.spec,
        seconds=args.seconds,
        traders=args.traders,
        replicas=args.replicas,
        json_out=args.json,
    )
    return 0 if result["replica_state_hashes_equal"] and result["nonce_gaps"] == 0 else 1


def _connect(address: str | None) -> None:
    import ray

    ray.init(address=address or "auto", log_to_driver=False)


def _up(args: argparse.Namespace) -> int:
    import subprocess

    from . import deploy
    from .spec import load_spec
    from .topology import node_args, read_topology

    spec = load_spec(args.spec)
    if args.address is None:
        flags = node_args(read_topology(), "head")
        subprocess.run(["ray", "start", "--head", "--disable-usage-stats", *flags], check=True)
    _connect(args.address)
    result = deploy.deploy(spec, bind="127.0.0.1" if args.address is None else "0.0.0.0")
    print(f"raydex is up: replicas {', '.join(result.replicas)} on port {result.http_port}; "
          f"sequencer {result.sequencer_target}")  # fmt: skip
    return 0


def _deploy(args: argparse.Namespace) -> int:
    from . import deploy
    from .spec import load_spec

    spec = load_spec(args.spec)
    _connect(args.address)
    result = deploy.deploy(spec, bind=args.bind)
    print(f"created: {list(result.created)}  removed: {list(result.removed)}  "
          f"replicas: {list(result.replicas)}")  # fmt: skip
    return 0


def _status(args: argparse.Namespace) -> int:
    import json

    from . import deploy

    _connect(args.address)
    st = deploy.status()
    if args.json:
        print(json.dumps(st, default=str))
        return 0
    for name, s in st.items():
        keys = ("seq", "state_hash", "port", "placement", "error")
        print(name, {k: s[k] for k in keys if k in s})
    return 0


def _down(args: argparse.Namespace) -> int:
    import subprocess

    from . import deploy

    _connect(args.address)
    print("stopped:", ", ".join(deploy.down()) or "nothing")
    if args.stop_ray:
        import ray

        ray.shutdown()
        subprocess.run(["ray", "stop"], check=False)
    return 0


def _add_ops(sub: Any) -> None:
    up = sub.add_parser("up", help="start a local Ray head (or join --address) and deploy")
    up.add_argument("--spec", default="raydex.yaml", help="deploy spec (raydex.yaml)")
    up.add_argument("--address", default=None, help="an existing Ray cluster to deploy on")
    up.set_defaults(handler=_up)
    d = sub.add_parser("deploy", help="reconcile the running cluster with a deploy spec")
    d.add_argument("spec", help="deploy spec, e.g. raydex.yaml")
    d.add_argument("--address", default=None, help="Ray address (default: auto)")
    d.add_argument("--bind", default="0.0.0.0", help="listen address of the servers (0.0.0.0)")
    d.set_defaults(handler=_deploy)
    st = sub.add_parser("status", help="status and placement of every raydex actor")
    st.add_argument("--address", default=None, help="Ray address (default: auto)")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    st.set_defaults(handler=_status)
    dn = sub.add_parser("down", help="stop every raydex actor")
    dn.add_argument("--address", default=None, help="Ray address (default: auto)")
    dn.add_argument("--stop-ray", action="store_true", help="also `ray stop` this host")
    dn.set_defaults(handler=_down)


def _bench_engine(args: argparse.Namespace) -> int:
    from raydex.observability import bench_engine

    report = bench_engine.run(commands=args.commands, seed=args.seed, json_out=args.json)
    return 0 if report["valid"] else 1


def _bench_codecs(args: argparse.Namespace) -> int:
    from raydex.observability import bench_codecs

    bench_codecs.run(json_out=args.json)
    return 0


def _add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole exchange on an embedded Ray under a short signed load",
        description="Deploy the stack on an embedded local Ray, drive signed REST and WebSocket "
        "load, report, stop. --engine: only the engine over the generated workload (no Ray).",
    )
    p.add_argument("--spec", default="raydex.yaml", help="deploy spec (raydex.yaml)")
    p.add_argument("--seconds", type=float, default=10.0, help="load duration (10)")
    p.add_argument("--traders", type=_positive, default=24, help="signing traders (24)")
    p.add_argument("--replicas", type=_positive, default=2, help="API replicas (2)")
    p.add_argument("--engine", action="store_true", help="engine only, no Ray")
    p.add_argument("--commands", type=_positive, default=200_000, help="--engine: stream size")
    p.add_argument("--seed", type=int, default=1, help="--engine: workload seed (1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_demo)


def _add_bench(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmarks (engine, codecs, transport)")
    bench = p.add_subparsers(dest="bench", metavar="{engine,codecs,transport}", required=True)
    e = bench.add_parser(
        "engine",
        help="the engine over the realistic workload, beside a bare book",
        description="Time the engine per command on one core over the generated workload, and "
        "the same order stream through a bare price-time book.",
    )
    e.add_argument("--commands", type=_positive, default=1_000_000, help="stream size (1,000,000)")
    e.add_argument("--seed", type=int, default=1, help="workload seed (1)")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.set_defaults(handler=_bench_engine)
    c = bench.add_parser(
        "codecs",
        help="block encode/decode: construct, compiled, hot codec, struct floor, msgpack, pickle",
    )
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(handler=_bench_codecs)
    # Listed for --help; main() hands its arguments to the module before parsing.
    bench.add_parser("transport", help="blocks actor to actor: gRPC vs Ray calls (starts Ray)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raydex",
        description="raydex: a low-latency perpetual-futures exchange stack on Ray.",
    )
    sub = parser.add_subparsers(
        dest="command", metavar="{demo,up,deploy,status,down,bench,node-args}", required=True
    )
    _add_demo(sub)
    _add_ops(sub)
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
