"""The replica's REST API answers Lighter's shapes from its caches, and a bad request gets a clear
code and changes nothing. Real aiohttp server on 127.0.0.1, real client, real BlockProducer."""

from __future__ import annotations

import asyncio
import json
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import aiohttp
from kit.lane import LaneServer
from pydantic import BaseModel

from raydex.actors.local import FAR_MS, LocalExchange, Trader, new_exchange
from raydex.actors.replica import ApiConfig, ReplicaState
from raydex.codecs import (
    ModifyOrder,
    RegisterApiKey,
    ResultCode,
    sign_tx,
    tx_to_json_str,
    tx_type_of,
)

with warnings.catch_warnings():  # the SDK's own imports of deprecated websockets APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import lighter.models as models

T = TypeVar("T")


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class Rig:
    """One exchange, one replica behind a live server, a client session."""

    def __init__(
        self,
        ex: LocalExchange,
        state: ReplicaState,
        server: LaneServer,
        http: aiohttp.ClientSession,
    ) -> None:
        self.ex, self.state, self.server, self.http = ex, state, server, http

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))

    async def get(self, path: str, **params: Any) -> tuple[int, dict[str, Any]]:
        async with self.http.get(self.url(path), params=params) as r:
            return r.status, await r.json()

    async def post(self, path: str, data: Any = None, **kw: Any) -> tuple[int, dict[str, Any]]:
        async with self.http.post(self.url(path), data=data, **kw) as r:
            return r.status, await r.json()

    async def send(self, tx: Any) -> tuple[int, dict[str, Any]]:
        return await self.post(
            "/api/v1/sendTx", {"tx_type": str(tx_type_of(type(tx))), "tx_info": tx_to_json_str(tx)}
        )


@asynccontextmanager
async def rig(traders: list[Trader], config: ApiConfig | None = None) -> AsyncIterator[Rig]:
    ex = new_exchange(traders)
    replica = ex.serve(config)
    server = LaneServer(replica.app)  # as a replica serves it: sendTx* through the fast lane
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            yield Rig(ex, replica.state, server, http)
    finally:
        await server.close()


def with_rig(
    body: Callable[[Rig, list[Trader]], Awaitable[None]],
    n: int = 2,
    config: ApiConfig | None = None,
) -> None:
    traders = [Trader(10 + i) for i in range(n)]

    async def main() -> None:
        async with rig(traders, config) as r:
            await body(r, traders)

    run(main())


# ---- happy paths --------------------------------------------------------------------------------


def test_an_order_sent_through_send_tx_rests_on_the_book_and_the_nonce_advances() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a = ts[0]
        status, nn = await r.get("/api/v1/nextNonce", account_index=a.account, api_key_index=0)
        assert (status, nn["nonce"]) == (200, 0)
        status, reply = await r.send(a.order(299_000, 1_000, 0))
        assert status == 200 and reply["code"] == 200 and len(reply["tx_hash"]) == 80
        _, nn = await r.get("/api/v1/nextNonce", account_index=a.account, api_key_index=0)
        assert nn["nonce"] == 1
        _, orders = await r.get("/api/v1/orderBookOrders", market_id=0, limit=10)
        assert orders["total_bids"] == 1 and orders["bids"][0]["price"] == "2990.00"
        assert orders["bids"][0]["remaining_base_amount"] == "0.1000"
        _, tx = await r.get("/api/v1/tx", by="hash", value=reply["tx_hash"])
        assert tx["status"] == 2 and tx["account_index"] == a.account
        _, h = await r.get("/api/v1/currentHeight")
        assert h["height"] == r.state.seq  # block height, as Lighter's currentHeight

    with_rig(body)


def test_a_crossing_order_trades_and_shows_in_recent_trades_and_accounts() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        await r.send(a.order(300_000, 500, 1))
        status, reply = await r.send(b.order(300_000, 500, 0))
        assert (status, reply["code"]) == (200, 200)
        _, trades = await r.get("/api/v1/recentTrades", market_id=0, limit=5)
        assert [(t["price"], t["size"]) for t in trades["trades"]] == [("3000.00", "0.0500")]
        _, acc = await r.get("/api/v1/account", by="index", value=b.account)
        pos = acc["accounts"][0]["positions"]
        assert [(p["market_id"], p["position"], p["sign"]) for p in pos] == [(0, "0.0500", 1)]

    with_rig(body)


def test_batch_sends_consecutive_nonces_in_one_block() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a = ts[0]
        txs = [a.order(299_000 - i * 100, 100, 0) for i in range(3)]
        form = {
            "tx_types": json.dumps([14] * 3),
            "tx_infos": json.dumps([tx_to_json_str(t) for t in txs]),
        }
        status, reply = await r.post("/api/v1/sendTxBatch", form)
        assert status == 200 and reply["code"] == 200 and len(reply["tx_hash"]) == 3
        assert len(r.state.books[0].bids) == 3

    with_rig(body)


# ---- bad requests change nothing ----------------------------------------------------------------


def test_bad_requests_get_their_code_and_change_nothing() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        good = a.order(299_000, 100, 0)
        a.nonce -= 1
        before = (r.state.state_hash(), r.ex.producer.seq, r.state.pending_count())
        forged = json.loads(tx_to_json_str(good))
        forged["Price"] = 299_001
        wrong_nonce = a.order(299_000, 100, 0)._replace(nonce=7)
        wrong_nonce = sign_tx(wrong_nonce, a.seed)
        cases: list[tuple[dict[str, str], int]] = [
            ({"tx_type": "14", "tx_info": "{not json"}, ResultCode.INVALID_TX_INFO),
            ({"tx_type": "14", "tx_info": '{"AccountIndex": "ten"}'}, ResultCode.INVALID_TX_INFO),
            ({"tx_type": "fourteen", "tx_info": tx_to_json_str(good)}, ResultCode.INVALID_TX_TYPE),
            ({"tx_type": "77", "tx_info": tx_to_json_str(good)}, ResultCode.INVALID_TX_TYPE),
            ({"tx_type": "14", "tx_info": json.dumps(forged)}, ResultCode.INVALID_SIGNATURE),
            ({"tx_type": "14", "tx_info": tx_to_json_str(wrong_nonce)}, ResultCode.INVALID_NONCE),
            ({"tx_info": tx_to_json_str(good)}, ResultCode.INVALID_TX_TYPE),
            (
                {"tx_type": "1", "tx_info": '{"AccountIndex":10,"USDCAmount":5}'},
                ResultCode.OPERATOR_ONLY,
            ),
        ]
        for form, code in cases:
            status, reply = await r.post("/api/v1/sendTx", form)
            assert (status, reply["code"]) == (400, code), form
            assert reply["message"]
        status, reply = await r.post(
            "/api/v1/sendTx", b"{oops", headers={"Content-Type": "application/json"}
        )
        assert (status, reply["code"]) == (400, ResultCode.INVALID_PARAM)
        status, reply = await r.post("/api/v1/sendTx", {"tx_type": "14", "tx_info": "x" * 40_000})
        assert (status, reply["code"]) == (413, ResultCode.BODY_TOO_LARGE)
        infos = [tx_to_json_str(good)] * 51
        status, reply = await r.post(
            "/api/v1/sendTxBatch",
            {"tx_types": json.dumps([14] * 51), "tx_infos": json.dumps(infos)},
        )
        assert (status, reply["code"]) == (400, ResultCode.BATCH_TOO_LARGE)
        bad_batch = [tx_to_json_str(good), json.dumps(forged)]
        status, reply = await r.post(
            "/api/v1/sendTxBatch", {"tx_types": "[14, 14]", "tx_infos": json.dumps(bad_batch)}
        )
        assert (status, reply["code"]) == (400, ResultCode.INVALID_SIGNATURE)
        assert (r.state.state_hash(), r.ex.producer.seq, r.state.pending_count()) == before
        status, reply = await r.send(good)
        assert (status, reply["code"]) == (200, 200)
        del b

    with_rig(body, config=ApiConfig(max_body_bytes=32 * 1024))


def test_indexed_reads_answer_what_a_full_walk_of_the_caches_answers() -> None:
    """``apikeys``, ``orderBookOrders`` and ``account`` read per-account and per-level indexes
    (issue 8, defect 7: no walk over every key or order); their answers equal a sort of the whole
    cache, after orders rested, traded, moved price and were cancelled."""

    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b, c = ts
        r.ex.run([RegisterApiKey(a.account, 3, b.pub), RegisterApiKey(c.account, 7, a.pub)], True)
        for i in range(6):
            for t, side in ((a, 1), (b, 0), (c, 1)):
                price = 300_500 + i * 10 if side else 299_500 - i * 10
                assert (await r.send(t.order(price, 10 + i, side)))[1]["code"] == 200
        assert (await r.send(b.order(300_510, 15, 0)))[1]["code"] == 200  # fills two levels
        oi = next(o.order_index for o in r.state.orders.values() if o.account_index == c.account)
        modify = sign_tx(
            ModifyOrder(c.account, 0, 0, oi, 12, 300_530, 0, FAR_MS, c.nonce, bytes(80)), c.seed
        )
        c.nonce += 1
        assert (await r.send(modify))[1]["code"] == 200  # the order moves to another level
        other = max(o.order_index for o in r.state.orders.values() if o.account_index == c.account)
        assert other != oi and (await r.send(c.cancel(other)))[1]["code"] == 200
        moved = r.state.orders[oi]
        assert moved.price == 300_530 and moved.remaining_base_amount < 12  # partly filled
        r.state.validate()
        orders = list(r.state.orders.values())
        asks = sorted((o for o in orders if o.is_ask), key=lambda o: (o.price, o.order_index))
        bids = sorted((o for o in orders if not o.is_ask), key=lambda o: (-o.price, o.order_index))
        for limit in (1, 4, 250):
            _, got = await r.get("/api/v1/orderBookOrders", market_id=0, limit=limit)
            assert (got["total_asks"], got["total_bids"]) == (len(asks), len(bids))
            assert [o["order_index"] for o in got["asks"]] == [o.order_index for o in asks][:limit]
            assert [o["order_index"] for o in got["bids"]] == [o.order_index for o in bids][:limit]
        for t in ts:
            for ki in (255, 0, 3, 7, 9):
                _, got = await r.get("/api/v1/apikeys", account_index=t.account, api_key_index=ki)
                want = [
                    (k, rec.nonce, bytes(rec.pub_key).hex())
                    for (acct, k), rec in sorted(r.state.api_keys.items())
                    if acct == t.account and ki in (255, k)
                ]
                assert [
                    (k["api_key_index"], k["nonce"], k["public_key"]) for k in got["api_keys"]
                ] == want
            _, got = await r.get("/api/v1/account", by="index", value=t.account)
            mine = [o for o in orders if o.account_index == t.account]
            counts = {
                p["market_id"]: p["open_order_count"] for p in got["accounts"][0]["positions"]
            }
            assert got["accounts"][0]["total_order_count"] == len(mine)
            for mi, n in counts.items():
                assert n == sum(o.market_index == mi for o in mine)

    with_rig(body, n=3)


DEEP = 5_000  # nesting levels: past the JSON decoders' recursion limit


@contextmanager
def recursion_limit(n: int) -> Iterator[None]:
    """Python's recursion limit raised as a library may raise it (py_ecc, which lighter-sdk
    imports, sets 100,000): a JSON decoder then recurses on the C stack until the process
    crashes on 120,000 levels, unless the depth is bounded before decoding."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(n)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def deep_list(levels: int = DEEP) -> str:
    return "[" * levels + "]" * levels


def deep_object(levels: int = DEEP) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def test_deeply_nested_json_and_unknown_charsets_get_20001_or_20003_never_a_500() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        good = tx_to_json_str(ts[0].order(299_000, 100, 0))
        before = (r.state.state_hash(), r.ex.producer.seq, r.state.pending_count())
        json_body = {"headers": {"Content-Type": "application/json"}}
        cases: list[tuple[str, Any, dict[str, Any], int]] = [
            ("/api/v1/sendTx", deep_object(), json_body, ResultCode.INVALID_PARAM),
            ("/api/v1/sendTx", deep_list(120_000), json_body, ResultCode.INVALID_PARAM),
            ("/api/v1/sendTx", deep_list(), json_body, ResultCode.INVALID_PARAM),
            (
                "/api/v1/sendTx",
                {"tx_type": "14", "tx_info": deep_object()},
                {},
                ResultCode.INVALID_TX_INFO,
            ),
            (
                "/api/v1/sendTx",
                json.dumps({"tx_type": 14, "tx_info": deep_list()}),
                json_body,
                ResultCode.INVALID_TX_INFO,
            ),
            (
                "/api/v1/sendTxBatch",
                {"tx_types": deep_list(), "tx_infos": json.dumps([good])},
                {},
                ResultCode.INVALID_PARAM,
            ),
            (
                "/api/v1/sendTxBatch",
                {"tx_types": "[14]", "tx_infos": deep_list()},
                {},
                ResultCode.INVALID_PARAM,
            ),
            (
                "/api/v1/sendTxBatch",
                {"tx_types": "[14]", "tx_infos": json.dumps([deep_object()])},
                {},
                ResultCode.INVALID_TX_INFO,
            ),
            (
                "/api/v1/sendTx",
                f"tx_type=14&tx_info={good}",
                {
                    "headers": {
                        "Content-Type": "application/x-www-form-urlencoded; charset=no-such-charset"
                    }
                },
                ResultCode.INVALID_PARAM,
            ),
        ]
        for path, data, kw, code in cases:
            with recursion_limit(100_000):
                status, reply = await r.post(path, data, **kw)
            assert (status, reply["code"]) == (400, code), (path, str(data)[:60], reply)
            assert reply["message"]
        multipart = (  # built by hand: aiohttp's client refuses to encode an unknown charset
            '--b\r\nContent-Disposition: form-data; name="tx_type"\r\n\r\n14\r\n'
            '--b\r\nContent-Disposition: form-data; name="tx_info"\r\n'
            f"Content-Type: text/plain; charset=no-such-charset\r\n\r\n{good}\r\n--b--\r\n"
        ).encode()
        status, reply = await r.post(
            "/api/v1/sendTx",
            multipart,
            headers={"Content-Type": "multipart/form-data; boundary=b"},
        )
        assert (status, reply["code"]) == (400, ResultCode.INVALID_PARAM), reply
        assert (r.state.state_hash(), r.ex.producer.seq, r.state.pending_count()) == before
        status, reply = await r.post("/api/v1/sendTx", {"tx_type": "14", "tx_info": good})
        assert (status, reply["code"]) == (200, 200), reply

    with_rig(body)


def test_bad_query_parameters_and_unknown_things_get_clear_codes() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        checks = [
            ("/api/v1/orderBookOrders", {"market_id": "x"}, 400, ResultCode.INVALID_PARAM),
            ("/api/v1/orderBookOrders", {"market_id": "7"}, 404, ResultCode.MARKET_NOT_FOUND),
            (
                "/api/v1/nextNonce",
                {"account_index": "999", "api_key_index": "0"},
                404,
                ResultCode.ACCOUNT_NOT_FOUND,
            ),
            ("/api/v1/account", {"by": "index", "value": "999"}, 404, ResultCode.ACCOUNT_NOT_FOUND),
            ("/api/v1/account", {"by": "name", "value": "x"}, 400, ResultCode.INVALID_PARAM),
            (
                "/api/v1/account",
                {"by": "l1_address", "value": "0x12"},
                400,
                ResultCode.INVALID_PARAM,
            ),
            (
                "/api/v1/account",
                {"by": "l1_address", "value": "0x" + "ab" * 20},
                404,
                ResultCode.ACCOUNT_NOT_FOUND,
            ),
            ("/api/v1/accountsByL1Address", {}, 400, ResultCode.INVALID_PARAM),
            (
                "/api/v1/accountsByL1Address",
                {"l1_address": "0x" + "00" * 20},
                400,
                ResultCode.INVALID_PARAM,
            ),
            ("/api/v1/tx", {"by": "hash", "value": "zz"}, 400, ResultCode.INVALID_PARAM),
            ("/api/v1/tx", {"by": "hash", "value": "00" * 40}, 404, ResultCode.NOT_FOUND),
            ("/api/v1/nope", {}, 404, ResultCode.NOT_FOUND),
        ]
        for path, params, status, code in checks:
            got_status, reply = await r.get(path, **params)
            assert (got_status, reply["code"]) == (status, code), path
        # an existing account's unused key slot: 0, the nonce a ChangePubKey setting it carries
        got_status, reply = await r.get(
            "/api/v1/nextNonce", account_index=str(ts[0].account), api_key_index="200"
        )
        assert (got_status, reply["code"], reply["nonce"]) == (200, 200, 0)

    with_rig(body)


# ---- Lighter SDK models accept every shape ----------------------------------------------------


def test_every_rest_answer_validates_strictly_against_the_lighter_sdk_models() -> None:
    """Each answer through ``Model.model_validate(body, strict=True)``: every required field
    present with exactly the SDK's type (lighter-sdk builds most models with ``model_construct``
    in ``from_dict``, which checks nothing, so that is not used)."""

    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        await r.send(a.order(300_000, 500, 1))
        await r.send(a.order(301_000, 500, 1))
        _, sent = await r.send(b.order(300_000, 300, 0))
        ai = {"account_index": a.account, "api_key_index": 0}
        answers: list[tuple[type[BaseModel], str, dict[str, Any]]] = [
            (models.Status, "/", {}),
            (models.ZkLighterInfo, "/info", {}),
            (models.OrderBooks, "/api/v1/orderBooks", {}),
            (models.OrderBookDetails, "/api/v1/orderBookDetails", {"market_id": 0}),
            (models.OrderBookOrders, "/api/v1/orderBookOrders", {"market_id": 0, "limit": 10}),
            (models.Trades, "/api/v1/recentTrades", {"market_id": 0, "limit": 10}),
            (models.AssetDetails, "/api/v1/assetDetails", {}),
            (models.DetailedAccounts, "/api/v1/account", {"by": "index", "value": b.account}),
            (models.DetailedAccounts, "/api/v1/account", {"by": "index", "value": a.account}),
            (models.AccountApiKeys, "/api/v1/apikeys", ai),
            (models.NextNonce, "/api/v1/nextNonce", ai),
            (models.EnrichedTx, "/api/v1/tx", {"by": "hash", "value": sent["tx_hash"]}),
            (models.CurrentHeight, "/api/v1/currentHeight", {}),
        ]
        for model, path, params in answers:
            status, reply = await r.get(path, **params)
            assert status == 200, (path, reply)
            model.model_validate(reply, strict=True)
        _, acc = await r.get("/api/v1/account", by="index", value=b.account)
        assert acc["accounts"][0]["positions"][0]["liquidation_price"] == "0"  # 1M USDC covers it
        models.RespSendTx.model_validate(sent, strict=True)
        form = {
            "tx_types": "[14]",
            "tx_infos": json.dumps([tx_to_json_str(a.order(302_000, 10, 1))]),
        }
        _, batch = await r.post("/api/v1/sendTxBatch", form)
        models.RespSendTxBatch.model_validate(batch, strict=True)

    with_rig(body)
