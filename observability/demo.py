"""``make demo``: the whole exchange on an embedded local Ray, a short signed load, a report.

::

    this process ── ray.init (local) ── deploy(raydex.yaml, temp dirs, free ports)
        │   traders: market makers quote and re-quote, takers cross (txs signed up front)
        ├── REST sendTx / sendTxBatch ──► replicas (shared port) ──► sequencer ──► blocks
        ├── WS jsonapi/sendtx ─────────►
        └── WS order_book subscriber: freshness engine→client and replica→client

Everything runs on 127.0.0.1 and stops at the end (actors killed, Ray shut down), also on
Ctrl-C. The report gives txs sent/accepted/rejected by code, achieved rate, freshness p50/p99,
block time and hot-path apply time per block, and each replica's state hash (all equal).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import socket
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from raydex.actors._api_local import FAR_MS
from raydex.codecs import (
    CancelOrder,
    CreateOrder,
    Deposit,
    RegisterApiKey,
    ResultCode,
    TxType,
    tx_to_json_str,
)
from raydex.codecs._signing import generate_key, sign_tx

from .hist import Histogram

NAMESPACE = "raydex-demo"


@dataclasses.dataclass
class Trader:
    account: int
    seed: bytes
    pub: bytes
    nonce: int = 0

    def sign(self, tx: Any) -> Any:
        tx = tx._replace(nonce=self.nonce)
        self.nonce += 1
        return sign_tx(tx, self.seed)


def _free_port(pair: bool = False) -> int:
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if not pair:
            return port
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


def plan_txs(
    markets: list[tuple[int, int]],
    makers: list[Trader],
    takers: list[Trader],
    per_trader: int,
    seed: int,
) -> list[list[Any]]:
    """Per trader, its signed txs in nonce order (signing happens here, before the load)."""
    rng = random.Random(seed)
    plans: list[list[Any]] = []
    for t in makers:
        txs: list[Any] = []
        live: list[tuple[int, int]] = []
        for k in range(per_trader):
            m, mark, lot = markets[k % len(markets)]
            if len(live) >= 4:
                mi, coi = live.pop(0)
                txs.append(t.sign(CancelOrder(t.account, 0, mi, coi, FAR_MS, 0, bytes(64))))
                continue
            is_ask = k % 2
            offset = rng.randint(1, 20) * (1 if is_ask else -1)
            coi = k + 1
            price = mark + offset * max(1, mark // 10_000)
            tx = CreateOrder(
                t.account, 0, m, coi, lot * rng.randint(1, 10), price, is_ask, 0, 1, 0, 0, -1,
                FAR_MS, 0, bytes(64),
            )  # fmt: skip
            txs.append(t.sign(tx))
            live.append((m, coi))
        plans.append(txs)
    for t in takers:
        txs = []
        for _ in range(per_trader):
            m, mark, lot = markets[rng.randrange(len(markets))]
            is_ask = rng.randrange(2)
            worst = mark - mark // 50 if is_ask else mark + mark // 50
            tx = CreateOrder(
                t.account, 0, m, 0, lot * rng.randint(1, 4), worst, is_ask, 1, 0, 0, 0, -1,
                FAR_MS, 0, bytes(64),
            )  # fmt: skip
            txs.append(t.sign(tx))
        plans.append(txs)
    return plans


class Load:
    """Drives the planned txs: each trader's txs in order, traders concurrently, split between
    REST (single and batch) and WebSocket; records codes and latency."""

    def __init__(self, port: int, plans: list[list[Any]], seconds: float) -> None:
        self.port = port
        self.plans = plans
        self.seconds = seconds
        self.codes: Counter[int] = Counter()
        self.latency = Histogram()
        self.sent = 0
        self.by_path: Counter[str] = Counter()

    async def _rest(self, http: aiohttp.ClientSession, txs: list[Any]) -> list[int]:
        url = f"http://127.0.0.1:{self.port}/api/v1/"
        if len(txs) == 1:
            form = {"tx_type": str(_tx_type(txs[0])), "tx_info": tx_to_json_str(txs[0])}
            async with http.post(url + "sendTx", data=form) as r:
                return [int((await r.json())["code"])]
        types = [_tx_type(t) for t in txs]
        form = {
            "tx_types": json.dumps(types),
            "tx_infos": json.dumps([tx_to_json_str(t) for t in txs]),
        }
        async with http.post(url + "sendTxBatch", data=form) as r:
            body = await r.json()
            return [int(body["code"])] * len(txs)

    async def _trader(
        self, http: aiohttp.ClientSession, txs: list[Any], lane: int, until: float
    ) -> None:
        ws = None
        if lane == 0:
            ws = await http.ws_connect(f"http://127.0.0.1:{self.port}/stream")
            await ws.receive_json(timeout=10)
        i = 0
        while i < len(txs) and time.monotonic() < until:
            chunk = txs[i : i + (3 if lane == 1 else 1)]
            t0 = time.perf_counter_ns()
            if ws is not None:
                data = {"tx_type": _tx_type(chunk[0]), "tx_info": tx_to_json_str(chunk[0])}
                await ws.send_json({"type": "jsonapi/sendtx", "data": data})
                reply = await ws.receive_json(timeout=10)
                codes = [int(reply.get("code", 0))]
                self.by_path["ws"] += 1
            else:
                codes = await self._rest(http, chunk)
                self.by_path["rest_batch" if len(chunk) > 1 else "rest"] += 1
            self.latency.record(time.perf_counter_ns() - t0)
            self.codes.update(codes)
            self.sent += len(chunk)
            i += len(chunk)
            if codes[0] == ResultCode.INVALID_NONCE:
                break  # this trader's chain is broken; stop it rather than spam rejections
        if ws is not None:
            await ws.close()

    async def run(self) -> float:
        until = time.monotonic() + self.seconds
        t0 = time.monotonic()
        async with aiohttp.ClientSession() as http:
            await asyncio.gather(
                *(self._trader(http, txs, i % 3, until) for i, txs in enumerate(self.plans))
            )
        return time.monotonic() - t0


async def watch_books(port: int, markets: list[int], stop: asyncio.Event) -> dict[str, Any]:
    """Subscribe to every market's order_book; record freshness and the nonce chain."""
    engine, replica = Histogram(), Histogram()
    gaps = 0
    updates = 0
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"http://127.0.0.1:{port}/stream")
        await ws.receive_json(timeout=10)
        for m in markets:
            await ws.send_json({"type": "subscribe", "channel": f"order_book/{m}"})
        last: dict[str, int] = {}
        while not stop.is_set():
            try:
                msg = await ws.receive_json(timeout=0.2)
            except TimeoutError:
                continue
            kind = msg.get("type", "")
            if not kind.endswith("order_book"):
                continue
            now_us = time.time_ns() // 1000
            book = msg["order_book"]
            ch = msg.get("channel", "")
            if kind.startswith("update/"):
                updates += 1
                if last.get(ch) != book["begin_nonce"]:
                    gaps += 1
                if "engine_ts_us" in msg:
                    engine.record(max(0, now_us - msg["engine_ts_us"]) * 1000)
                    replica.record(max(0, now_us - msg["replica_ts_us"]) * 1000)
            last[ch] = book["nonce"]
        await ws.close()
    return {
        "updates": updates,
        "nonce_gaps": gaps,
        "freshness_engine_to_client_us": engine.summary_us(),
        "freshness_replica_to_client_us": replica.summary_us(),
    }


def run(
    spec_path: str = "raydex.yaml", seconds: float = 10.0, traders: int = 24, replicas: int = 2,
    json_out: bool = False,
) -> dict[str, Any]:  # fmt: skip
    import ray

    from raydex.cluster import deploy as dep
    from raydex.cluster.spec import load_spec
    from raydex.cluster.topology import init_kwargs, read_topology

    spec = load_spec(Path(spec_path))
    work = Path(tempfile.mkdtemp(prefix="raydex-demo-"))
    groups = tuple(dataclasses.replace(g, replicas=replicas, replicas_per_numa_node=None)
                   for g in spec.replica_groups[:1])  # fmt: skip
    spec = dataclasses.replace(
        spec,
        sequencer=dataclasses.replace(spec.sequencer, wal_dir=str(work / "wal")),
        snapshot=dataclasses.replace(spec.snapshot, dir=str(work / "snapshots")),
        ports=dataclasses.replace(spec.ports, http=_free_port(), grpc=_free_port(pair=True)),
        replica_groups=groups,
    )
    topology = read_topology()
    t_start = time.monotonic()
    ray.init(address="local", include_dashboard=False, log_to_driver=False,
             **init_kwargs(topology, host="demo-host"))  # fmt: skip
    try:
        deployed = dep.deploy(spec, namespace=NAMESPACE, topologies={"demo-host": topology})
        boot_s = time.monotonic() - t_start
        seq = ray.get_actor(dep.SEQUENCER, namespace=NAMESPACE)
        people = [Trader(i + 1, *generate_key()) for i in range(traders)]
        ops: list[Any] = []
        for t in people:
            ops += [RegisterApiKey(t.account, 0, t.pub), Deposit(t.account, 10**12)]
        ray.get(seq.operator.remote(ops), timeout=60)
        markets = [(m.market_index, m.mark_price, _min_lots(m)) for m in spec.markets]
        makers = people[: traders // 2]
        plans = plan_txs(markets, makers, people[traders // 2 :], per_trader=2_000, seed=1)
        load = Load(spec.ports.http, plans, seconds)

        async def drive() -> tuple[float, dict[str, Any]]:
            stop = asyncio.Event()

            async def timed_load() -> float:
                await asyncio.sleep(0.5)  # let the watcher subscribe first
                elapsed = await load.run()
                await asyncio.sleep(0.5)  # the last blocks reach the watcher
                stop.set()
                return elapsed

            return await asyncio.gather(
                timed_load(), watch_books(spec.ports.http, [m[0] for m in markets], stop)
            )

        elapsed, books = asyncio.run(drive())
        dep.wait_ready(NAMESPACE, timeout_s=30)
        st = dep.status(NAMESPACE)
    finally:
        try:
            dep.down(NAMESPACE)
        finally:
            ray.shutdown()
    reps = {k: v for k, v in st.items() if k.startswith(dep.REPLICA_PREFIX)}
    report = {
        "boot_s": round(boot_s, 1),
        "seconds": round(elapsed, 2),
        "txs_sent": load.sent,
        "accepted": load.codes.get(200, 0),
        "rejected_by_code": {_name(c): n for c, n in load.codes.items() if c != 200},
        "achieved_tps": round(load.sent / elapsed, 1) if elapsed else 0.0,
        "requests_by_path": dict(load.by_path),
        "request_latency_us": load.latency.summary_us(),
        **books,
        "block_time_us": st[dep.SEQUENCER].get("block_time_us", {}),
        "block_txs": st[dep.SEQUENCER].get("block_txs", {}),
        "apply_us_per_replica": {k: v.get("apply_us", {}) for k, v in reps.items()},
        "sequencer_seq": st[dep.SEQUENCER].get("seq"),
        "replica_state_hashes_equal": len({v.get("state_hash") for v in reps.values()}) == 1,
        "replicas": list(deployed.replicas),
    }
    if json_out:
        print(json.dumps(report))
    else:
        print(format_report(report))
    return report


def _min_lots(m: Any) -> int:
    """The smallest order size (lots) meeting both of the market's minimums at its mark."""
    mult = 10 ** (6 - m.price_decimals - m.size_decimals)
    by_quote = -(-m.min_quote_amount // (m.mark_price * mult))
    return max(m.min_base_amount, by_quote, 1)


def _tx_type(tx: Any) -> int:
    return int(TxType.CREATE_ORDER if isinstance(tx, CreateOrder) else TxType.CANCEL_ORDER)


def _name(code: int) -> str:
    try:
        return ResultCode(code).name
    except ValueError:
        return str(code)


def format_report(r: dict[str, Any]) -> str:
    def pct(h: dict[str, Any]) -> str:
        return (
            f"p50 {h.get('p50', 0):,.0f} µs  p99 {h.get('p99', 0):,.0f} µs  (n={h.get('count', 0)})"
        )

    lines = [
        "raydex demo: embedded Ray, sequencer + snapshot holder + committer + "
        f"{len(r['replicas'])} API replicas (boot {r['boot_s']} s)",
        f"  txs sent       {r['txs_sent']:>8,} in {r['seconds']} s = {r['achieved_tps']:,} tx/s "
        f"(REST, REST batch, WS: {r['requests_by_path']})",
        f"  accepted       {r['accepted']:>8,}",
        f"  rejected       {sum(r['rejected_by_code'].values()):>8,}  {r['rejected_by_code']}",
        f"  request        {pct(r['request_latency_us'])}",
        f"  freshness engine→client   {pct(r['freshness_engine_to_client_us'])}",
        f"  freshness replica→client  {pct(r['freshness_replica_to_client_us'])}",
        f"  order_book updates {r['updates']:,}, nonce gaps {r['nonce_gaps']}",
        f"  block time     {pct(r['block_time_us'])}",
        f"  txs per block  p50 {r['block_txs'].get('p50', 0)}  p99 {r['block_txs'].get('p99', 0)}",
    ]
    for name, h in r["apply_us_per_replica"].items():
        lines.append(f"  apply/block    {pct(h)}  [{name}]")
    lines.append(
        f"  final seq {r['sequencer_seq']}; replicas agree on the state hash: "
        f"{r['replica_state_hashes_equal']}"
    )
    return "\n".join(lines)
