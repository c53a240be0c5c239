"""raydex on a cluster of network namespaces (``tests/kit/netns.py``), as an operator drives it.

Every ``raydex`` command runs on the head host by path (``NetnsCluster.raydex``); what the command
does not print comes from ``tests/kit/cluster_probe.py``, a short-lived driver run on the head
(placement groups, operator deposits). The test process reaches the replicas over the bridge.

- ``write_spec``: the repository's raydex.yaml with the cluster's folders, one market, the replica
  group on the workers (``edit`` changes the tree further: another engineer's test adds its keys);
- ``deploy``, ``status`` (exit code and ``--json``), ``healthy`` (status 0 with every replica
  caught up and hashed), ``until`` (a check polled to a deadline);
- ``replicas``, ``where`` (replica -> host, cores, pid), ``raydex_groups`` (placement groups of
  the deployment);
- ``fund``, ``send``, ``recent``, ``trade_across`` (a maker through one host, a taker through
  another, both hosts listing the same trades), ``next_nonce``;
- with a standby (issue 37's host-loss test): ``standby_spec`` (primary on one worker, standby on
  the other, holder and committer on the head), ``primary`` (the arbiter's, from the verdict),
  ``caught_up`` (every replica at the primary's seq, one state hash), ``SignedLoad`` (signed
  orders sent without pause from a thread, every answer kept with its tx hash) and ``lookup``
  (a tx hash on a replica: executed, failed or unknown).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yaml

from raydex.actors.local import Trader
from raydex.codecs import tx_hash_of, tx_to_json_str

from .netns import NetnsCluster

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "kit" / "cluster_probe.py"
HTTP = 8080
REPLICA_PREFIX = "raydex-replica-"
T = TypeVar("T")

#: the last verdict ``healthy`` saw, for a failure's message
LAST: dict[str, Any] = {}


def until(what: str, check: Callable[[], T | None], seconds: float = 120.0) -> T:
    """``check()`` every second until it returns something true; AssertionError naming ``what``
    (and the last status verdict seen) past ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1.0)
    raise AssertionError(f"not within {seconds:g}s: {what} (last verdict: {LAST})")


def write_spec(
    c: NetnsCluster,
    per_numa: int,
    hosts: tuple[str, ...] = ("host-b", "host-c"),
    edit: Callable[[dict[str, Any]], None] | None = None,
    name: str = "",
) -> Path:
    """The repository's raydex.yaml with this cluster's folders, one market, and the replicas
    (``per_numa`` per NUMA node) on ``hosts``; realtime off (the machine is shared). Written to
    ``raydex-<name or per_numa>.yaml`` in the cluster's folder."""
    tree = yaml.safe_load((REPO / "raydex.yaml").read_text())
    tree["sequencer"].update(wal_dir=str(c.root / "state" / "wal"), oracle_interval_ms=0,
                             journal_realtime=False)  # fmt: skip
    tree["snapshot"].update(dir=str(c.root / "state" / "snapshots"), every_blocks=20)
    tree["markets"] = tree["markets"][:1]
    (group,) = tree["replica_groups"]
    group.update(replicas_per_numa_node=per_numa, hosts=list(hosts), realtime=False)
    if edit is not None:
        edit(tree)
    path = c.root / f"raydex-{name or per_numa}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def deploy(c: NetnsCluster, per_numa: int) -> str:
    """``raydex deploy`` of ``write_spec(c, per_numa)``; what it printed."""
    return c.raydex("deploy", str(write_spec(c, per_numa)), "--address", c.address).stdout


def status(c: NetnsCluster) -> tuple[int, dict[str, Any]]:
    """``raydex status --json``: its exit code (0, 3 or 4, anything else fails) and its JSON."""
    done = c.raydex("status", "--json", "--address", c.address, check=False)
    assert done.returncode in (0, 3, 4), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


def replicas(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: a for n, a in st["actors"].items() if n.startswith(REPLICA_PREFIX)}


def where(st: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...], int]]:
    """replica -> (host, pinned cores, pid)."""
    hosts = st["health"]["actors"]
    return {n: (hosts[n]["host"], tuple(a["placement"]["cpus"]), a["pid"])
            for n, a in replicas(st).items()}  # fmt: skip


def primary(st: dict[str, Any]) -> str:
    """The primary sequencer's actor name in a ``status`` JSON (the arbiter's, with a standby)."""
    return str((st["health"].get("replication") or {}).get("primary") or "raydex-sequencer")


def caught_up(st: dict[str, Any]) -> bool:
    """Every replica of a ``status`` JSON at (or past) the primary's seq with its state hashed
    there."""
    seq = st["actors"].get(primary(st), {}).get("seq", -1)
    reps = replicas(st).values()
    hashed = all(r.get("seq", -1) >= seq and r.get("state_hash_seq") == r.get("seq") for r in reps)
    return bool(reps) and hashed


def healthy(c: NetnsCluster) -> dict[str, Any] | None:
    """``raydex status`` when it exits 0 with every replica at the primary's seq, hashed."""
    code, st = status(c)
    LAST.update(code=code, line=st["health"]["line"])
    return st if code == 0 and caught_up(st) else None


def probe(c: NetnsCluster, *args: str) -> Any:
    """``cluster_probe.py ADDRESS ARGS`` on the head: the JSON it printed last."""
    out = c.run(c.labels[0], [sys.executable, str(PROBE), c.address, *args]).stdout
    return json.loads(out.strip().splitlines()[-1])


def raydex_groups(c: NetnsCluster) -> list[dict[str, str]]:
    """The placement groups Ray has not removed whose name is a raydex deployment's."""
    return [g for g in probe(c, "groups") if g["name"].startswith("raydex:")]


def fund(c: NetnsCluster, traders: tuple[Trader, ...], usdc: int = 10**12) -> list[int]:
    """Register each trader's API key and deposit ``usdc`` (the operator's L1 side)."""
    entries = [[t.account, t.api_key, t.pub.hex(), usdc] for t in traders]
    codes: list[int] = probe(c, "fund", json.dumps(entries))
    return codes


async def send(http: aiohttp.ClientSession, ip: str, tx: Any) -> dict[str, Any]:
    form = {"tx_type": "14", "tx_info": tx_to_json_str(tx)}
    async with http.post(f"http://{ip}:{HTTP}/api/v1/sendTx", data=form) as r:
        body: dict[str, Any] = await r.json()
        return body


async def recent(http: aiohttp.ClientSession, ip: str) -> list[dict[str, Any]]:
    async with http.get(f"http://{ip}:{HTTP}/api/v1/recentTrades?market_id=0&limit=100") as r:
        assert r.status == 200, await r.text()
        body: dict[str, Any] = await r.json()
        return list(body["trades"])


def trade_across(
    c: NetnsCluster, maker: Trader, taker: Trader, rounds: int = 3,
    via: tuple[str, str] = ("host-b", "host-c"),
) -> int:  # fmt: skip
    """``rounds`` times: the maker's ask through ``via[0]``, the taker's crossing bid through
    ``via[1]``. Both hosts then list the same trades (waited for: each applies the blocks
    itself); returns how many trades they list."""
    b, cc = c.hosts[via[0]].ip, c.hosts[via[1]].ip

    async def go() -> int:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            for _ in range(rounds):
                ask = await send(http, b, maker.order(330000, 100, is_ask=1))
                assert ask["code"] == 200, ask
                bid = await send(http, cc, taker.order(330000, 100, is_ask=0))
                assert bid["code"] == 200, bid
            for _ in range(60):
                on_b, on_c = await recent(http, b), await recent(http, cc)
                if on_b == on_c and len(on_b) >= rounds:
                    return len(on_b)
                await asyncio.sleep(0.5)
            raise AssertionError(f"{via} list different trades: {on_b} / {on_c}")

    return asyncio.run(go())


def next_nonce(c: NetnsCluster, t: Trader, via: str = "host-b") -> int:
    """The account's next nonce as a replica on ``via`` says."""

    async def go() -> int:
        url = (f"http://{c.hosts[via].ip}:{HTTP}/api/v1/nextNonce"
               f"?account_index={t.account}&api_key_index={t.api_key}")  # fmt: skip
        async with aiohttp.ClientSession() as http, http.get(url) as r:
            body: dict[str, Any] = await r.json()
            return int(body["nonce"])

    return asyncio.run(go())


# ---- a standby: the host-loss test (issue 37) ---------------------------------------------------


def standby_spec(c: NetnsCluster, primary_host: str = "host-b", standby_host: str = "host-c",
                 replica_hosts: tuple[str, ...] = ("host-a", "host-c")) -> Path:  # fmt: skip
    """``write_spec`` of a deployment that survives ``primary_host``: the sequencer there, its
    standby on ``standby_host`` (replicated durability, the default with a standby; folders of
    its own), the holder and committer on the head, one replica per NUMA node on
    ``replica_hosts``; the sequencer's and holder's folders are ``write_spec``'s (the same
    exchange)."""
    state = c.root / "state"

    def edit(tree: dict[str, Any]) -> None:
        tree["sequencer"].update(host=primary_host, standby={
            "host": standby_host, "wal_dir": str(state / "wal-standby"),
            "snapshot_dir": str(state / "snapshots-standby")})  # fmt: skip
        tree["snapshot"]["host"] = c.labels[0]
        tree.setdefault("committer", {})["host"] = c.labels[0]
        # the test process is one IP sending without pause: no per-IP or per-account budget
        (group,) = tree["replica_groups"]
        group.setdefault("api", {}).update(
            rate_limit_weight_per_minute=0, rate_limit_txs_per_account_per_minute=0
        )

    return write_spec(c, 1, replica_hosts, edit, name="standby")


@dataclass(frozen=True, slots=True)
class Sent:
    """One signed tx and its answer: when it was sent and answered (monotonic s), the code
    (None: no HTTP answer, ``error`` says why), its tx hash (hex) and the replica's IP."""

    sent: float
    answered: float
    code: int | None
    tx_hash: str
    via: str
    error: str = ""


class SignedLoad:
    """Signed orders without pause from a thread of its own: ``pairs`` of (maker, replica IP)
    and (taker, replica IP); each maker rests asks at one price, each taker sends
    immediate-or-cancel bids twice their size there, so the book stays small. Every answer is
    kept (``sent``). After an answer other than 200 the trader's nonce is read again from its
    replica (the tx may or may not have executed). ``stop`` joins the thread."""

    def __init__(self, pairs: list[tuple[Trader, str, bool]], price: int = 330000) -> None:
        self.pairs = pairs
        self.price = price
        self.sent: list[Sent] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> SignedLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> list[Sent]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=120)
        return self.sent

    def acked(self) -> list[Sent]:
        return [s for s in self.sent if s.code == 200]

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            await asyncio.gather(*(self._trade(http, *p) for p in self.pairs))

    async def _trade(self, http: aiohttp.ClientSession, t: Trader, ip: str, maker: bool) -> None:
        while not self._stop.is_set():
            tx = (t.order(self.price, 100, is_ask=1) if maker
                  else t.order(self.price, 200, is_ask=0, tif=0))  # fmt: skip
            tx_hash = tx_hash_of(tx, 304).hex()
            t0 = time.monotonic()
            try:
                code: int | None = int((await send(http, ip, tx))["code"])
                error = ""
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                code, error = None, repr(exc)
            self.sent.append(Sent(t0, time.monotonic(), code, tx_hash, ip, error))
            if code != 200:
                await asyncio.sleep(0.2)
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, KeyError):
                    url = (f"http://{ip}:{HTTP}/api/v1/nextNonce?account_index={t.account}"
                           f"&api_key_index={t.api_key}")  # fmt: skip
                    async with http.get(url) as r:
                        t.nonce = int((await r.json())["nonce"])


def lookup(ip: str, hashes: list[str]) -> dict[str, int | None]:
    """Each tx hash as the replica at ``ip`` knows it: its status (2 executed, 0 executed and
    failed in its block), None when it knows no such tx (never executed)."""

    async def one(http: aiohttp.ClientSession, h: str) -> int | None:
        async with http.get(f"http://{ip}:{HTTP}/api/v1/tx?by=hash&value={h}") as r:
            body: dict[str, Any] = await r.json()
            if r.status == 404:
                return None
            assert r.status == 200, body
            return int(body["status"])

    async def go() -> dict[str, int | None]:
        limit = asyncio.Semaphore(16)

        async def bounded(http: aiohttp.ClientSession, h: str) -> int | None:
            async with limit:
                return await one(http, h)

        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            got = await asyncio.gather(*(bounded(http, h) for h in hashes))
        return dict(zip(hashes, got, strict=True))

    return asyncio.run(go())
