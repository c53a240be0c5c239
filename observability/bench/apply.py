"""``raydex bench apply``: the API replica's hot apply path on a realistic block stream.

Timed per block, as the replica's apply loop runs it: ``decode_block`` of the frame, the cache
update (``ReplicaState.apply_block``) and the fan-out (``Fanout.publish``: one encode per channel
per block, queued to every subscriber). ``ns_per_delta`` is the three together per event (the goal
is <= 254 ns, what nautilus-trader's Rust L2 book costs per delta called from Python), with each
step apart and per-block percentiles; ``ledger_ns_per_delta`` is the per-account history fold run
after the fan-out, off the latency path.

The stream: the ``raydex bench engine`` workload run through the sequencer's own
``BlockProducer`` in blocks of ``block_txs`` txs; ``warmup`` commands fill the books, the replica
boots from the engine's records there, and the next ``commands`` are the measured blocks. The
subscribers (no sockets; queues emptied after each block): two on ``order_book`` and one on
``trade`` of every market, ``market_stats/all``, ``height``, and ``account_all`` of ``--watched``
accounts (40; 0: none); ``--account-channels all`` subscribes them to every account channel.

Timing: the thread's CPU time around each step (other processes do not inflate it; what they do to
the caches still shows), GC off; ``--repeat`` reports the median run. ``--evict-mb N`` writes N MiB
before each block, untimed: the caches as the processes sharing a replica's core leave them.
``--huge-pages on`` (the default, as a deployed replica) puts the arenas on 2 MiB pages first
(glibc's heap only with ``GLIBC_TUNABLES`` set before start); ``off`` keeps 4 KiB pages.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import mmap
import statistics
import time
from collections.abc import Sequence
from typing import Any

from raydex.actors.replica import ApiConfig, Fanout, ReplicaState
from raydex.actors.replica.ws import Client
from raydex.actors.sequencer import BlockProducer
from raydex.cluster import hugepages
from raydex.codecs import Verifier, decode_block
from raydex.engine import Engine
from raydex.observability.hist import Histogram
from raydex.observability.loadtest.workload import MARKETS, Workload, WorkloadConfig

#: the goal, ns per delta (docs/performance.md)
GOAL_NS = 254


def reference_loop_ns(n: int = 200_000, rounds: int = 5) -> float:
    """CPU ns of one iteration of ``for i in range(n): d[i] = i`` (the best of ``rounds``): how
    fast this interpreter on this machine is right now (~40-50 ns on a quiet desktop core). The
    result's ``ns_per_delta_in_reference_loops`` divides by it, so runs on a busy or slow shared
    host compare with each other."""
    best = float("inf")
    for _ in range(rounds):
        d: dict[int, int] = {}
        t0 = time.thread_time_ns()
        for i in range(n):
            d[i] = i
        best = min(best, (time.thread_time_ns() - t0) / n)
    return best


def build_stream(
    commands: int, warmup: int, block_txs: int, seed: int, accounts: int
) -> tuple[Engine, int, int, list[bytes], list[Any]]:
    """(engine at the boot point, its seq, height, measured block frames, boot records)."""
    wl = Workload(
        WorkloadConfig(seed=seed, commands=warmup + commands, accounts=accounts, chunk_size=65_536)
    )
    producer = BlockProducer(Engine(), None, Verifier())
    setup = wl.setup()
    _blocks(producer, setup.commands, setup.now_ms, 1000)
    frames: list[bytes] = []
    boot: tuple[int, int, list[Any]] | None = None
    done = 0
    for chunk in wl.chunks():
        cmds, times = chunk.commands, chunk.now_ms
        if boot is None and done + len(cmds) > warmup:
            cut = warmup - done
            _blocks(producer, cmds[:cut], times[:cut], block_txs)
            boot = (producer.seq, producer.height, list(producer.engine.records()))
            frames += _blocks(producer, cmds[cut:], times[cut:], block_txs)
        elif boot is None:
            _blocks(producer, cmds, times, block_txs)
        else:
            frames += _blocks(producer, cmds, times, block_txs)
        done += len(cmds)
    assert boot is not None
    seq, height, records = boot
    return producer.engine, seq, height, frames, records


def _blocks(
    producer: BlockProducer, cmds: Sequence[Any], times: Sequence[int], size: int
) -> list[bytes]:
    out = []
    for i in range(0, len(cmds), size):
        producer.submit(cmds[i : i + size], times[i] * 1_000_000, replay=True)
        block = producer.close_block(write_wal=False)
        assert block is not None
        out.append(block.frame)
    return out


#: the account channels ``--account-channels all`` subscribes per watched account
_ALL_ACCOUNT_CHANNELS = (
    "account_all",
    "user_stats",
    "account_all_orders",
    "account_all_trades",
    "account_all_positions",
    "account_all_assets",
    "account_tx",
)


def _subscribe(
    fanout: Fanout, state: ReplicaState, watched: int = 40, account_channels: str = "account_all"
) -> list[Client]:
    clients = []

    def client(*channels: str) -> None:
        c = Client(None, None)  # type: ignore[arg-type]  # never written to: no socket
        fanout.clients.add(c)
        for ch in channels:
            code, why = fanout.subscribe(c, ch)
            assert code == 200, why
        clients.append(c)

    markets = sorted(state.markets)
    for _ in range(2):
        client(*(f"order_book/{m}" for m in markets))
    client(*(f"trade/{m}" for m in markets))
    client("market_stats/all")
    client("height")
    half = watched // 2
    makers = sorted(state.accounts)[1 : 1 + half]
    takers = sorted(state.accounts)[len(state.accounts) - (watched - half) :] if watched else []
    for a in makers + takers:
        if account_channels == "all":
            kinds = [f"{k}/{a}" for k in _ALL_ACCOUNT_CHANNELS]
            client(*kinds, *(f"account_orders/{m}/{a}" for m in markets))
        else:
            client(f"account_all/{a}")
    return clients


def _drain(clients: list[Client]) -> None:
    for c in clients:
        c.queue.clear()
        c.pending.clear()
        c.conflations = 0


def _accept(token: object, account: int) -> tuple[int, str]:
    return 200, ""


def run_once(
    seq: int,
    height: int,
    records: list[Any],
    frames: list[bytes],
    watched: int = 40,
    account_channels: str = "account_all",
    evict_mb: int = 0,
) -> dict[str, Any]:
    """Boot a replica from ``records`` and time every block of ``frames`` through it (with
    ``evict_mb`` MiB written before each block, untimed)."""
    state = ReplicaState.from_records(records, seq, height)
    fanout = Fanout(state, ApiConfig(), authorize=_accept)
    clients = _subscribe(fanout, state, watched, account_channels)
    _drain(clients)
    hist = {k: Histogram() for k in ("decode", "cache_update", "fanout", "apply", "ledger")}
    totals = dict.fromkeys(hist, 0)
    events = 0
    pc = time.thread_time_ns
    # Its own anonymous mapping (4 KiB pages, as another process's memory), not the allocator's
    # heap: a huge-page policy for the replica's heap must not change what the eviction touches.
    evict_len = evict_mb << 20
    evict = mmap.mmap(-1, evict_len) if evict_len else None
    evict_at = ctypes.addressof(ctypes.c_char.from_buffer(evict)) if evict is not None else 0
    gc.collect()
    gc.disable()
    try:
        for i, frame in enumerate(frames):
            if evict_at:
                ctypes.memset(evict_at, i & 0xFF, evict_len)  # other processes' working sets
            t0 = pc()
            block = decode_block(frame)
            t1 = pc()
            applied = state.apply_block(block)
            t2 = pc()
            fanout.publish(applied)
            t3 = pc()
            state.ledger.catch_up()  # after the block's fan-out, as the service schedules it
            state.history.volumes.catch_up()
            state.history.candles.catch_up()
            t4 = pc()
            _drain(clients)
            events += len(block.events)
            for k, dt in (
                ("decode", t1 - t0),
                ("cache_update", t2 - t1),
                ("fanout", t3 - t2),
                ("apply", t3 - t0),
                ("ledger", t4 - t3),
            ):
                hist[k].record(dt)
                totals[k] += dt
    finally:
        gc.enable()
    state.validate()
    levels = [len(b.bids) + len(b.asks) for b in state.books.values()]
    return {
        "events": events,
        "ns_per_delta": {k: round(v / max(events, 1), 1) for k, v in totals.items()},
        "per_block_us": {k: h.summary_us() for k, h in hist.items()},
        "fanout_messages": fanout.messages,
        "book_levels_mean": round(statistics.fmean(levels), 1) if levels else 0,
    }


def run(
    commands: int = 40_000,
    warmup: int = 30_000,
    block_txs: int = 10,
    seed: int = 1,
    accounts: int = 2_000,
    repeat: int = 3,
    json_out: bool = False,
    watched: int = 40,
    account_channels: str = "account_all",
    evict_mb: int = 0,
    huge_pages: bool = True,
) -> dict[str, Any]:
    if huge_pages:
        hugepages.install_arenas()
    t = time.perf_counter()
    _, seq, height, frames, records = build_stream(commands, warmup, block_txs, seed, accounts)
    build_s = time.perf_counter() - t
    ref_before = reference_loop_ns()
    runs = [
        run_once(seq, height, records, frames, watched, account_channels, evict_mb)
        for _ in range(max(1, repeat))
    ]
    ref = min(ref_before, reference_loop_ns())
    runs.sort(key=lambda r: r["ns_per_delta"]["apply"])
    best = runs[len(runs) // 2]
    result: dict[str, Any] = {
        "ns_per_delta": best["ns_per_delta"]["apply"],
        "goal_ns_per_delta": GOAL_NS,
        "reference_loop_ns": round(ref, 1),
        "ns_per_delta_in_reference_loops": round(best["ns_per_delta"]["apply"] / ref, 1),
        "steps_ns_per_delta": {
            k: v for k, v in best["ns_per_delta"].items() if k not in ("apply", "ledger")
        },
        # the per-account history fold, after the block's fan-out (off the latency path)
        "ledger_ns_per_delta": best["ns_per_delta"]["ledger"],
        "per_block_us": best["per_block_us"],
        "blocks": len(frames),
        "block_txs": block_txs,
        "events": best["events"],
        "events_per_block": round(best["events"] / max(len(frames), 1), 1),
        "markets": len(MARKETS),
        "book_levels_mean": best["book_levels_mean"],
        "fanout_messages": best["fanout_messages"],
        "runs_ns_per_delta": [r["ns_per_delta"]["apply"] for r in runs],
        "stream_build_s": round(build_s, 1),
        "commands": commands,
        "warmup": warmup,
        "seed": seed,
        "watched_accounts": watched,
        "account_channels": account_channels,
        "evict_mb": evict_mb,
        "huge_pages": hugepages.report(),
    }
    if json_out:
        print(json.dumps(result))
    else:
        _print(result)
    return result


def _print(r: dict[str, Any]) -> None:
    print(
        f"{r['blocks']:,} blocks of {r['block_txs']} txs ({r['events_per_block']} events each), "
        f"{r['markets']} markets, ~{r['book_levels_mean']} levels per book"
    )
    steps = ", ".join(f"{k} {v}" for k, v in r["steps_ns_per_delta"].items())
    print(f"apply: {r['ns_per_delta']} ns per delta (goal <= {r['goal_ns_per_delta']}): {steps}")
    print(
        f"  = {r['ns_per_delta_in_reference_loops']} reference loop iterations "
        f"({r['reference_loop_ns']} ns each on this host now)"
    )
    for k, s in r["per_block_us"].items():
        print(f"  {k:<13} per block  p50 {s['p50']:>8.1f} us  p99 {s['p99']:>8.1f} us")
    h = r["huge_pages"]
    print(
        f"heap: arenas on huge pages {'yes' if h['arenas'] else 'no'}, glibc's "
        f"{'yes' if h['glibc'] else 'no'} (THP {h['thp']}; {h['huge_page_bytes'] >> 20} MiB on "
        f"huge pages); evicted {r['evict_mb']} MiB before each block"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="raydex bench apply",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--commands", type=int, default=40_000, help="measured commands (40,000)")
    p.add_argument("--warmup", type=int, default=30_000, help="commands before the boot (30,000)")
    p.add_argument("--block-txs", type=int, default=10, help="txs per block (10)")
    p.add_argument("--accounts", type=int, default=2_000, help="workload accounts (2,000)")
    p.add_argument("--seed", type=int, default=1, help="workload seed (1)")
    p.add_argument("--repeat", type=int, default=3, help="runs; the median is reported (3)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--watched", type=int, default=40, help="accounts with subscribers (40)")
    p.add_argument(
        "--account-channels",
        choices=("account_all", "all"),
        default="account_all",
        help="what each watched account is subscribed to (account_all)",
    )
    p.add_argument(
        "--evict-mb",
        type=int,
        default=0,
        help="MiB written before each block, untimed: caches as other processes leave them (0)",
    )
    p.add_argument(
        "--huge-pages",
        choices=("on", "off"),
        default="on",
        help="pymalloc's arenas on 2 MiB pages, as a deployed replica's (on)",
    )
    a = p.parse_args(argv)
    if a.evict_mb < 0:
        p.error("--evict-mb must be >= 0")
    run(
        a.commands,
        a.warmup,
        a.block_txs,
        a.seed,
        a.accounts,
        a.repeat,
        a.json,
        a.watched,
        a.account_channels,
        a.evict_mb,
        a.huge_pages == "on",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
