"""Request budgets (issue 8, defect 6): per-IP weighted budgets on REST and WS txs, per-account tx
budgets, at most N WebSocket connections per IP, and replayed signature rejections answered
without checking a signature again. Real aiohttp server on 127.0.0.1 (loopback is not exempt
here: ``rate_limit_exempt=()``), real client, real BlockProducer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiohttp
from kit.lane import LaneServer

from raydex.actors.local import LocalExchange, Trader, new_exchange
from raydex.actors.replica import ApiConfig, ReplicaState
from raydex.codecs import ResultCode, Verifier, generate_key, sign_tx, tx_to_json_str

T = TypeVar("T")
WAIT = 10.0
RATE_LIMITED = int(ResultCode.RATE_LIMITED)


def limits(**kw: Any) -> ApiConfig:
    return ApiConfig(rate_limit_exempt=(), **kw)


class CountingVerifier(Verifier):
    """The real verifier, counting the signatures it checks."""

    checks = 0

    def verify(self, tx: object, pub_key: bytes) -> bool:
        type(self).checks += 1
        return super().verify(tx, pub_key)


class Rig:
    def __init__(self, ex: LocalExchange, state: ReplicaState, server: LaneServer) -> None:
        self.ex, self.state, self.server = ex, state, server
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))

    async def get(self, path: str, **params: Any) -> tuple[int, dict[str, Any], Any]:
        async with self.http.get(self.url(path), params=params) as r:
            return r.status, await r.json(), r.headers

    async def post(self, path: str, data: Any) -> tuple[int, dict[str, Any]]:
        async with self.http.post(self.url(path), data=data) as r:
            return r.status, await r.json()

    async def send(self, tx: Any) -> tuple[int, dict[str, Any]]:
        return await self.post("/api/v1/sendTx", {"tx_type": "14", "tx_info": tx_to_json_str(tx)})

    def nonce(self, t: Trader) -> int | None:
        return self.state.next_nonce(t.account, 0)


@asynccontextmanager
async def rig(traders: list[Trader], config: ApiConfig) -> AsyncIterator[Rig]:
    ex = new_exchange(traders)
    replica = ex.serve(config)
    replica.state.verifier = CountingVerifier()
    server = LaneServer(replica.app)  # as a replica serves it: sendTx* through the fast lane
    await server.start_server()
    r = Rig(ex, replica.state, server)
    try:
        yield r
    finally:
        await r.http.close()
        await server.close()


def with_rig(body: Callable[[Rig, list[Trader]], Awaitable[None]], config: ApiConfig) -> None:
    traders = [Trader(10 + i) for i in range(2)]

    async def main() -> None:
        async with rig(traders, config) as r:
            await body(r, traders)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_reads_beyond_the_ip_budget_get_429_with_code_23000_and_a_retry_after() -> None:
    async def body(r: Rig, _: list[Trader]) -> None:
        for _ in range(4):  # 4 x 300 = the whole 1,200
            status, reply, _h = await r.get("/api/v1/orderBooks")
            assert (status, reply["code"]) == (200, 200)
        status, reply, headers = await r.get("/api/v1/orderBooks")
        assert (status, reply["code"]) == (429, RATE_LIMITED)
        assert "rate limited" in reply["message"]
        assert int(headers["Retry-After"]) >= 1
        # unknown paths are charged too: a path scanner cannot probe for free
        status, reply, _h = await r.get("/api/v1/nope")
        assert (status, reply["code"]) == (429, RATE_LIMITED)

    with_rig(body, limits(rate_limit_weight_per_minute=1_200))


def test_endpoint_weights_are_lighters_light_calls_fit_many_times_more() -> None:
    async def body(r: Rig, traders: list[Trader]) -> None:
        t = traders[0]
        for _ in range(10):  # nextNonce weighs 6: ten fit in 60
            status, reply, _h = await r.get(
                "/api/v1/nextNonce", account_index=t.account, api_key_index=0
            )
            assert status == 200, reply
        status, reply, _h = await r.get(
            "/api/v1/nextNonce", account_index=t.account, api_key_index=0
        )
        assert (status, reply["code"]) == (429, RATE_LIMITED)

    with_rig(body, limits(rate_limit_weight_per_minute=60))


def test_an_account_beyond_its_tx_budget_is_refused_and_nothing_changes() -> None:
    async def body(r: Rig, traders: list[Trader]) -> None:
        alice, bob = traders
        for i in range(3):
            status, reply = await r.send(alice.order(290_000 - i, 10, 0))
            assert (status, reply["code"]) == (200, 200), reply
        before = (r.nonce(alice), r.state.state_hash())
        status, reply = await r.send(alice.order(289_000, 10, 0))
        assert (status, reply["code"]) == (429, RATE_LIMITED)
        assert (r.nonce(alice), r.state.state_hash()) == before
        status, reply = await r.send(bob.order(289_000, 10, 0))  # bob has his own budget
        assert (status, reply["code"]) == (200, 200)

    with_rig(body, limits(rate_limit_txs_per_account_per_minute=3))


def test_forged_txs_do_not_spend_the_victims_budget() -> None:
    async def body(r: Rig, traders: list[Trader]) -> None:
        victim = traders[0]
        forger_seed, _ = generate_key()
        for i in range(5):
            forged = sign_tx(victim.order(290_000 - i, 10, 0), forger_seed)
            victim.nonce -= 1
            status, reply = await r.send(forged)
            assert (status, reply["code"]) == (400, ResultCode.INVALID_SIGNATURE)
        for i in range(3):
            status, reply = await r.send(victim.order(290_000 - i, 10, 0))
            assert (status, reply["code"]) == (200, 200), reply

    with_rig(body, limits(rate_limit_txs_per_account_per_minute=3))


def test_a_replayed_rejected_batch_costs_one_signature_check_not_thousands() -> None:
    replays = 2_000

    async def body(r: Rig, traders: list[Trader]) -> None:
        alice = traders[0]
        forger_seed, _ = generate_key()
        txs = [alice.order(290_000 - i, 10, 0) for i in range(49)]
        txs.append(sign_tx(alice.order(280_000, 10, 0), forger_seed))
        form = {
            "tx_types": json.dumps([14] * len(txs)),
            "tx_infos": json.dumps([tx_to_json_str(t) for t in txs]),
        }
        before = (r.nonce(alice), r.state.state_hash())
        CountingVerifier.checks = 0
        for _ in range(replays):
            status, reply = await r.post("/api/v1/sendTxBatch", form)
            assert (status, reply["code"]) == (400, ResultCode.INVALID_SIGNATURE)
        assert CountingVerifier.checks == len(txs)  # the first attempt only
        assert (r.nonce(alice), r.state.state_hash()) == before

    CountingVerifier.checks = 0
    with_rig(body, limits(rate_limit_weight_per_minute=0, rejection_cache_s=3600.0))


async def recv(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    msg = await asyncio.wait_for(ws.receive(), WAIT)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    out: dict[str, Any] = json.loads(msg.data)
    return out


def test_a_websocket_beyond_the_per_ip_cap_gets_an_error_frame_and_is_closed() -> None:
    async def body(r: Rig, _: list[Trader]) -> None:
        open_ = []
        for _ in range(3):
            ws = await r.http.ws_connect(r.url("/stream"))
            assert (await recv(ws))["type"] == "connected"
            open_.append(ws)
        extra = await r.http.ws_connect(r.url("/stream"))
        error = await recv(extra)
        assert error["type"] == "error"
        assert error["code"] == ResultCode.WS_TOO_MANY_CONNECTIONS
        closing = await asyncio.wait_for(extra.receive(), WAIT)
        assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert extra.close_code == aiohttp.WSCloseCode.POLICY_VIOLATION
        # the three still work; one closing makes room for another
        await open_[0].send_json({"type": "ping"})
        assert (await recv(open_[0]))["type"] == "pong"
        await open_[0].close()
        await asyncio.sleep(0.1)
        again = await r.http.ws_connect(r.url("/stream"))
        assert (await recv(again))["type"] == "connected"
        for ws in (*open_[1:], again):
            await ws.close()

    with_rig(body, limits(ws_max_connections_per_ip=3))


def test_websocket_txs_spend_the_same_ip_budget_and_get_23000_with_their_id() -> None:
    async def body(r: Rig, traders: list[Trader]) -> None:
        alice = traders[0]
        ws = await r.http.ws_connect(r.url("/stream"))
        assert (await recv(ws))["type"] == "connected"
        codes = []
        for i in range(3):  # 12 fits two sendtx frames of weight 6
            tx = alice.order(290_000 - i, 10, 0)
            data = {"tx_type": 14, "tx_info": tx_to_json_str(tx)}
            await ws.send_json({"type": "jsonapi/sendtx", "id": i, "data": data})
            reply = await recv(ws)
            while reply["type"] != "jsonapi/sendtx":
                reply = await recv(ws)
            codes.append((reply["id"], reply["code"]))
        assert codes == [(0, 200), (1, 200), (2, RATE_LIMITED)]
        await ws.close()

    # the upgrade itself weighs nothing; each frame weighs a sendTx
    with_rig(body, limits(rate_limit_weight_per_minute=12))


def test_the_default_cap_is_100_websockets_per_ip() -> None:
    async def body(r: Rig, _: list[Trader]) -> None:
        sockets = []
        for _ in range(100):
            ws = await r.http.ws_connect(r.url("/stream"))
            assert (await recv(ws))["type"] == "connected"
            sockets.append(ws)
        extra = await r.http.ws_connect(r.url("/stream"))
        assert (await recv(extra))["code"] == ResultCode.WS_TOO_MANY_CONNECTIONS
        await extra.close()
        for ws in sockets:
            await ws.close()

    assert ApiConfig().ws_max_connections_per_ip == 100
    with_rig(body, limits())


def test_the_budgets_are_set_in_raydex_yaml() -> None:
    from pathlib import Path

    import yaml

    from raydex.cluster.control.spec import SpecError, load_spec

    tree = yaml.safe_load(Path(__file__).parents[2].joinpath("raydex.yaml").read_text())
    tree["replica_groups"][0]["api"] = {
        "rate_limit_weight_per_minute": 1_000,
        "rate_limit_txs_per_account_per_minute": 10,
        "ws_max_connections_per_ip": 5,
        "rate_limit_exempt": [],
    }
    api = load_spec(yaml.safe_dump(tree)).replica_groups[0].api
    assert (api.rate_limit_weight_per_minute, api.rate_limit_txs_per_account_per_minute) == (
        1_000,
        10,
    )
    assert (api.ws_max_connections_per_ip, api.rate_limit_exempt) == (5, ())
    tree["replica_groups"][0]["api"] = {"ws_max_connections_per_ip": 0}
    try:
        load_spec(yaml.safe_dump(tree))
    except SpecError as exc:
        assert "ws_max_connections_per_ip" in str(exc)
    else:
        raise AssertionError("a cap of 0 was accepted")


def test_only_signature_rejections_are_remembered_and_only_with_a_ttl() -> None:
    from raydex.actors.replica.http.limits import RejectionCache

    cache = RejectionCache(ttl_s=60.0, max_items=4)
    bad_sig, nonce = int(ResultCode.INVALID_SIGNATURE), int(ResultCode.INVALID_NONCE)
    assert cache.remembers(bad_sig) and not cache.remembers(nonce)
    key = RejectionCache.key(False, 14, "{}")
    cache.put(key, nonce, "invalid nonce", now=0.0)
    assert cache.get(key, now=1.0) is None  # depends on the account's state: never replayed
    cache.put(key, bad_sig, "invalid signature", now=0.0)
    assert cache.get(key, now=1.0) == (bad_sig, "invalid signature")
    assert cache.get(key, now=61.0) is None  # expired
    off = RejectionCache(ttl_s=0.0, max_items=4)
    assert not off.remembers(bad_sig)
    off.put(key, bad_sig, "invalid signature", now=0.0)
    assert len(off) == 0
