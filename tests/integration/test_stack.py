"""The deployed exchange on the session's Ray: sequencer, snapshot holder, committer and replicas
as detached named actors, reached over real HTTP/WebSocket on 127.0.0.1."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray
from kit.faults import flip_in_last_record, newest_segment

from raydex.actors.local import Trader
from raydex.actors.snapshot import ONE_ATTEMPT
from raydex.cluster.control import deploy as dep
from raydex.cluster.control.spec import DeploySpec, load_spec
from raydex.cluster.topology import Topology
from raydex.codecs import ResultCode, tx_hash, tx_to_json_str

NS = "raydex-it"
WAIT = 30.0


def spec_text(tmp: Path, replicas: int, http: int, data: int) -> str:
    return f"""
chain_id: 304
ports: {{http: {http}, data: {data}}}
sequencer: {{wal_dir: {tmp}/wal, wal_fsync: block, cpus: 1, data_plane: tcp}}
snapshot: {{dir: {tmp}/snap, every_blocks: 20, every_seconds: 1.0, check_every_blocks: 4, cpus: 1}}
markets:
  - {{market_index: 0, symbol: ETH, price_decimals: 2, size_decimals: 4, initial_mark: "3000.00",
     taker_fee: 200, liquidation_fee: 5000, max_price_deviation: 5000}}
replica_groups:
  - {{name: api, replicas: {replicas}, cpus_per_replica: 1}}
"""


class Exchange:
    def __init__(self, tmp: Path, topology: Topology, host: str) -> None:
        self.tmp = tmp
        self.http = dep.free_port()
        self.data = dep.free_port(pair=True, avoid={self.http})
        self.tops = {host: topology}
        self.traders = [Trader(i) for i in range(1, 5)]

    def spec(self, replicas: int) -> DeploySpec:
        return load_spec(spec_text(self.tmp, replicas, self.http, self.data))

    def deploy(self, replicas: int) -> dep.DeployResult:
        return dep.deploy(self.spec(replicas), namespace=NS, topologies=self.tops)

    def status(self) -> dict[str, Any]:
        return dep.status(NS)

    def replicas(self) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.status().items() if k.startswith(dep.REPLICA_PREFIX)}

    def fund(self) -> None:
        seq = ray.get_actor(dep.SEQUENCER, namespace=NS)
        ops: list[Any] = []
        for t in self.traders:
            ops += t.setup(10**12)
        outs = ray.get(seq.operator.remote(ops), timeout=WAIT)
        assert {o.code for o in outs} == {200}


@pytest.fixture(scope="module")
def exchange(
    ray_session: None,
    tmp_path_factory: pytest.TempPathFactory,
    session_topology: Topology,
    session_host: str,
) -> Iterator[Exchange]:
    ex = Exchange(tmp_path_factory.mktemp("stack"), session_topology, session_host)
    result = ex.deploy(replicas=2)
    assert set(result.replicas) == {"raydex-replica-api-0", "raydex-replica-api-1"}
    ex.fund()
    try:
        yield ex
    finally:
        dep.down(NS)


async def send(http: aiohttp.ClientSession, port: int, tx: Any) -> dict[str, Any]:
    form = {"tx_type": "14", "tx_info": tx_to_json_str(tx)}
    async with http.post(f"http://127.0.0.1:{port}/api/v1/sendTx", data=form) as r:
        body: dict[str, Any] = await r.json()
        return body


async def nudge(port: int, trader: Trader) -> None:
    """One more block (an ask far above the book, resting): the holder takes a due snapshot
    only when a block arrives."""
    async with aiohttp.ClientSession() as http:
        assert (await send(http, port, trader.order(330_000, 10, is_ask=1)))["code"] == 200
    await asyncio.sleep(0.3)


async def recent_trades(port: int) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/recentTrades?market_id=0&limit=100"
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        body: dict[str, Any] = await r.json()
        return list(body["trades"])


def sequencer_seq() -> int:
    seq: int = ray.get(ray.get_actor(dep.SEQUENCER, namespace=NS).status.remote())["seq"]
    return seq


def replicas_at(ex: Exchange, seq: int, count: int) -> dict[str, Any] | None:
    reps = ex.replicas()
    ok = len(reps) == count and all(v.get("seq", 0) >= seq for v in reps.values())
    return reps if ok else None


def replicas_at_one_seq(ex: Exchange) -> dict[str, Any] | None:
    """Every replica at one seq, each reporting the state hash of that seq (``status`` hashes
    once a replica is quiet)."""
    reps = ex.replicas()
    hashed = all(v.get("state_hash_seq") == v.get("seq") for v in reps.values())
    return reps if hashed and len({v.get("seq") for v in reps.values()}) == 1 else None


def until(cond: Any, what: str, seconds: float = WAIT) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_order_sent_to_one_replica_appears_on_another_replicas_order_book(
    exchange: Exchange,
) -> None:
    reps = exchange.replicas()
    a, b = (reps[n]["direct_port"] for n in sorted(reps)[:2])
    alice, bob = exchange.traders[:2]

    async def run() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"http://127.0.0.1:{b}/stream")
            assert (await ws.receive_json(timeout=WAIT))["type"] == "connected"
            await ws.send_json({"type": "subscribe", "channel": "order_book/0"})
            first = await ws.receive_json(timeout=WAIT)
            chain = [first["order_book"]]
            assert (await send(http, a, alice.order(300_500, 20, is_ask=1)))["code"] == 200
            assert (await send(http, a, bob.order(299_500, 20, is_ask=0)))["code"] == 200
            while len(chain) < 3:
                msg = await ws.receive_json(timeout=WAIT)
                if msg["type"] == "update/order_book":
                    chain.append(msg["order_book"])
            await ws.close()
            return chain

    chain = asyncio.run(run())
    for prev, cur in itertools.pairwise(chain):
        assert cur["begin_nonce"] == prev["nonce"]
    assert {"price": "3005.00", "size": "0.0020"} in chain[1]["asks"]
    assert {"price": "2995.00", "size": "0.0020"} in chain[2]["bids"]
    # verified once, by the replica: the deployed sequencer trusts its members, and the
    # committer re-verified both txs from the WAL off the hot path (actors/audit.py)
    status = ray.get(ray.get_actor(dep.SEQUENCER, namespace=NS).status.remote(), timeout=WAIT)
    assert status["verifies_signatures"] is False
    committer = ray.get_actor(dep.COMMITTER, namespace=NS)

    def audited() -> dict[str, Any] | None:
        audit: dict[str, Any] = ray.get(committer.status.remote(), timeout=WAIT)["signature_audit"]
        return audit if audit["seq"] >= status["seq"] and audit["audited_txs"] >= 2 else None

    audit = until(audited, "the committer's signature audit reaches the sequencer")
    assert audit["failed_txs"] == 0 and audit["failed_at"] is None


def test_the_holder_and_the_replicas_hash_the_same_checkpoints_and_each_replica_says_it_agrees(
    exchange: Exchange,
) -> None:
    reps = exchange.replicas()
    port = reps[sorted(reps)[0]]["direct_port"]
    carol = exchange.traders[2]

    async def orders() -> None:  # one block each at least: past a checkpoint (every 4 blocks)
        async with aiohttp.ClientSession() as http:
            for i in range(6):
                tx = carol.order(250_000 - 100 * i, 10, is_ask=0)
                assert (await send(http, port, tx))["code"] == 200

    asyncio.run(orders())
    last = sequencer_seq()  # then quiet: every follower also hashes this seq

    def agreed() -> dict[str, Any] | None:
        st = exchange.status()
        verdicts = [v.get("state_check", {}) for k, v in st.items()
                    if k.startswith(dep.REPLICA_PREFIX)]  # fmt: skip
        done = len(verdicts) == 2 and all(v.get("seq") == last for v in verdicts)
        return st if done else None

    st = until(agreed, "both replicas compared the quiet exchange's last seq with the holder")
    holder = st[dep.SNAPSHOT]
    replicas = [n for n in st if n.startswith(dep.REPLICA_PREFIX)]
    for name in replicas:
        check = st[name]["state_check"]
        assert check["agrees"] is True and check["peer"] == "holder" and check["divergences"] == 0
        ours = st[name]["state_checks"]
        assert ours[last] == holder["state_checks"][last]
        # every earlier seq both hashed agrees too, among them checkpoints (multiples of 4)
        # passed under traffic (others: earlier quiet moments)
        common = [s for s in ours if s in holder["state_checks"] and s != last]
        assert any(s % 4 == 0 for s in common)
        assert all(ours[s] == holder["state_checks"][s] for s in common)
        # the live line (the actor's log, what the dashboard's Actors page opens) says so
        assert f"agrees=holder@{last}" in st[name]["repr"]
        assert f"check={holder['state_checks'][last][:8]}@{last}" in st[name]["repr"]
    # raydex status compares the newest seq all of them hashed
    found = dep.state_agreement(st)
    assert not any(a.diverged for a in found)
    at_last = next(a for a in found if a.seq == last)
    assert {dep.SNAPSHOT, *replicas} <= set(at_last.hashes)


def test_a_replica_added_by_a_redeploy_boots_from_the_snapshot_and_matches(
    exchange: Exchange,
) -> None:
    # a trade the snapshot the new replica boots from already holds: its tape must show it
    alice, bob = exchange.traders[:2]
    port = exchange.replicas()["raydex-replica-api-0"]["direct_port"]

    async def trade() -> None:
        async with aiohttp.ClientSession() as http:
            assert (await send(http, port, alice.order(300_000, 20, is_ask=1)))["code"] == 200
            assert (await send(http, port, bob.order(300_000, 20, is_ask=0)))["code"] == 200

    asyncio.run(trade())
    traded = sequencer_seq()
    holder = ray.get_actor(dep.SNAPSHOT, namespace=NS)

    def snapshotted() -> bool:
        # the holder snapshots at a block once every_seconds (1 s) passed: give it blocks
        asyncio.run(nudge(port, alice))
        return bool(ray.get(holder.status.remote())["snapshot_seq"] >= traded)

    until(snapshotted, "a snapshot holding the trade")

    result = exchange.deploy(replicas=3)
    assert result.created == ("raydex-replica-api-2",)
    target = sequencer_seq()
    reps = until(lambda: replicas_at(exchange, target, count=3), "three replicas caught up")
    assert reps["raydex-replica-api-2"]["boots"] == 1
    same = until(lambda: replicas_at_one_seq(exchange), "replicas at one seq")
    assert len({v["state_hash"] for v in same.values()}) == 1
    tapes = {n: asyncio.run(recent_trades(r["direct_port"])) for n, r in same.items()}
    assert tapes["raydex-replica-api-0"], "the trade"
    assert all(t == tapes["raydex-replica-api-0"] for t in tapes.values()), tapes

    removed = exchange.deploy(replicas=2)
    assert removed.removed == ("raydex-replica-api-2",)
    assert set(exchange.replicas()) == {"raydex-replica-api-0", "raydex-replica-api-1"}


def test_the_deployed_data_plane_refuses_a_client_without_the_deployments_secret(
    exchange: Exchange,
) -> None:
    """``raydex deploy`` made a secret and handed it to every member (the replicas, the holder,
    the committer follow the streams: they are caught up); a client of the deployment's data
    plane (gRPC or TCP, whichever it serves) that knows the ports and the protocol but not the
    secret reads no block and no tx-log record, and submits no batch."""
    from raydex.actors.transport import (
        NotAMember,
        TxStreamBroken,
        block_source,
        new_secret,
        target_of,
        tx_channel,
    )

    status = ray.get(ray.get_actor(dep.SEQUENCER, namespace=NS).status.remote(), timeout=WAIT)
    assert status["data_plane"]["authenticated"] is True
    plane = status["data_plane"]["plane"]

    unix = status["data_plane"]["unix"]
    if plane == "tcp":  # the same host: its streams are on Unix sockets too, secret and all
        assert unix["blocks"] and unix["txlog"]

    async def stranger(port: int, unix_path: str | None = None) -> tuple[bool, bool]:
        target = target_of(plane, "127.0.0.1", port, unix_path)
        source = block_source(target, name="stranger", secret=new_secret(), backoff=ONE_ATTEMPT)
        channel = tx_channel(target, secret=new_secret())
        try:
            try:
                await anext(source.subscribe(1))
                read_refused = False
            except NotAMember:
                read_refused = True
            try:
                await channel.submit(b"a batch")
                submit_refused = False
            except TxStreamBroken:
                submit_refused = True
            return read_refused, submit_refused
        finally:
            await source.close()
            await channel.close()

    for port, path in (
        (status["data_port"], unix["blocks"]),
        (status["txlog_port"], unix["txlog"]),
    ):
        assert asyncio.run(stranger(port)) == (True, True)
        if path:
            assert asyncio.run(stranger(port, path)) == (True, True)
    snap = ray.get(ray.get_actor(dep.SNAPSHOT, namespace=NS).status.remote(), timeout=WAIT)
    assert snap["seq"] > 0  # the holder, a member, follows the streams
    until(lambda: replicas_at(exchange, sequencer_seq(), count=2), "members caught up")
    if plane == "tcp":  # members on the sequencer's host follow through its Unix socket
        assert all(r["local_data_plane"]["blocks"] for r in exchange.replicas().values())


def test_a_replica_killed_under_load_is_restarted_and_catches_up_with_no_gap(
    exchange: Exchange,
) -> None:
    reps = exchange.replicas()
    names = sorted(reps)
    victim = names[1]
    port = reps[names[0]]["direct_port"]
    old_pid = reps[victim]["pid"]
    carol, dave = exchange.traders[2:]

    async def load(seconds: float) -> int:
        ok = 0
        deadline = time.monotonic() + seconds
        async with aiohttp.ClientSession() as http:
            i = 0
            while time.monotonic() < deadline and i < 400:
                t, side = (carol, 1) if i % 2 else (dave, 0)
                body = await send(http, port, t.order(300_000 + (i % 10) * 10, 5, side))
                ok += body["code"] == 200
                i += 1
        return ok

    async def run() -> int:
        task = asyncio.create_task(load(4.0))
        await asyncio.sleep(1.0)
        ray.kill(ray.get_actor(victim, namespace=NS), no_restart=False)
        return await task

    accepted = asyncio.run(run())
    assert accepted > 0
    target = sequencer_seq()

    def restarted() -> dict[str, Any] | None:
        v = exchange.replicas().get(victim, {})
        return v if v.get("pid", old_pid) != old_pid and v.get("seq", 0) >= target else None

    back = until(restarted, "the restarted replica to catch up")
    other = until(lambda: replicas_at_one_seq(exchange), "both replicas at one seq")
    assert back["boots"] == 1
    assert other[names[0]]["state_hash"] == other[victim]["state_hash"]


def test_the_sequencer_killed_and_restarted_recovers_the_same_state_hash(
    exchange: Exchange,
) -> None:
    seq = ray.get_actor(dep.SEQUENCER, namespace=NS)
    before = {**ray.get(seq.status.remote()), **ray.get(seq.state_hash.remote())}
    ray.kill(seq, no_restart=False)

    def restarted() -> dict[str, Any] | None:
        st = _try_status(seq)
        return st if st is not None and st["pid"] != before["pid"] else None

    after = {**until(restarted, "sequencer restart"), **ray.get(seq.state_hash.remote())}
    assert after["state_hash"] == before["state_hash"] and after["seq"] == before["seq"]
    # and trading continues through a replica that reconnects to the restarted sequencer. The
    # first tx may meet the replica's broken tx stream and get 21822 (outcome unknown): a client
    # then looks the tx up by hash and sends the same signed tx again if it never executed.
    port = next(iter(exchange.replicas().values()))["direct_port"]
    tx = exchange.traders[0].order(301_000, 5, 1)

    async def until_accepted() -> list[int]:
        codes: list[int] = []
        async with aiohttp.ClientSession() as http:
            for _ in range(5):  # bounded
                body = await send(http, port, tx)
                codes.append(body["code"])
                if body["code"] != ResultCode.SEQUENCER_UNAVAILABLE:
                    return codes
                await asyncio.sleep(1.0)
                url = f"http://127.0.0.1:{port}/api/v1/tx?by=hash&value={tx_hash(tx).hex()}"
                async with http.get(url) as r:
                    if (await r.json())["code"] == 200:  # it executed after all
                        return [*codes, 200]
        return codes

    codes = asyncio.run(until_accepted())
    assert codes[-1] == 200, codes
    assert set(codes[:-1]) <= {ResultCode.SEQUENCER_UNAVAILABLE}


def _try_status(actor: Any) -> dict[str, Any] | None:
    try:
        st: dict[str, Any] = ray.get(actor.status.remote(), timeout=10)
        return st
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return None


def test_a_damaged_newest_wal_record_is_taken_back_from_the_followers(exchange: Exchange) -> None:
    """The deployed sequencer (Ray finds its followers by name): the holder paused (no snapshot
    covers the newest block, and it answers no one), a tx acknowledged by a replica, a byte of
    the newest WAL record flipped, the sequencer killed: Ray restarts it, it cuts the record, asks
    the replicas and the committer, and takes the block back; the tx is still there."""
    seq = ray.get_actor(dep.SEQUENCER, namespace=NS)
    holder = ray.get_actor(dep.SNAPSHOT, namespace=NS)
    committer = ray.get_actor(dep.COMMITTER, namespace=NS)
    holder_pid = ray.get(holder.status.remote(), timeout=WAIT)["pid"]
    os.kill(holder_pid, signal.SIGSTOP)
    try:
        port = next(iter(exchange.replicas().values()))["direct_port"]
        tx = exchange.traders[1].order(302_000, 5, 1)

        async def acked() -> dict[str, Any]:
            async with aiohttp.ClientSession() as http:
                return await send(http, port, tx)

        assert asyncio.run(acked())["code"] == 200  # answered once applied on that replica
        newest = sequencer_seq()
        until(lambda: replicas_at(exchange, newest, 2), "the replicas at the newest block")
        until(
            lambda: ray.get(committer.status.remote(), timeout=WAIT)["seq"] >= newest,
            "the committer at the newest block",
        )
        before = ray.get(seq.status.remote(), timeout=WAIT)
        os.kill(before["pid"], signal.SIGSTOP)  # it writes nothing more while the byte flips
        flip_in_last_record(newest_segment(exchange.tmp / "wal"), 5, 0x20)
        os.kill(before["pid"], signal.SIGKILL)  # Ray restarts it

        def restarted() -> dict[str, Any] | None:
            st = _try_status(seq)
            return st if st is not None and st["pid"] != before["pid"] else None

        until(restarted, "the sequencer restarted")

        def started() -> dict[str, Any] | None:  # waits out the silent holder's 10 s
            try:
                st: dict[str, Any] = ray.get(seq.start.remote(), timeout=60)
                return st
            except ray.exceptions.ActorUnavailableError:  # Ray still settling the restart
                return None

        after = until(started, "the restarted sequencer serving", seconds=120)
        rec = after["recovery"]
        assert rec["torn_bytes"] > 0 and tuple(rec["restored"]) == (newest, newest)
        assert rec["restored_checked"] == 1 and rec["unanswered"] == [dep.SNAPSHOT]
        assert after["seq"] == newest and after["refused"] is None
        ours = ray.get(seq.state_hash.remote(), timeout=WAIT)
        reps = until(lambda: replicas_at_one_seq(exchange), "the replicas at one seq")
        assert {v["state_hash"] for v in reps.values()} == {ours["state_hash"]}
    finally:
        os.kill(holder_pid, signal.SIGCONT)
    until(
        lambda: ray.get(holder.status.remote(), timeout=WAIT)["seq"] >= newest,
        "the holder caught up through the restored block",
    )
    assert ray.get(holder.status.remote(), timeout=WAIT)["divergences"] == 0
