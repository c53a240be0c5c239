"""Conditional orders through the replica: stop-loss / take-profit, grouped orders (tx 28) and
TWAPs sent as Lighter JSON, checked by the dry-run with the engine's codes, then served by
``accountActiveOrders`` / ``accountInactiveOrders`` / ``account`` with their trigger price,
trigger status, links and counts, validated strictly by lighter-sdk's models; the replica's
caches hash as the engine's state does. Real aiohttp server on 127.0.0.1, real BlockProducer,
real signatures."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from aiohttp.test_utils import TestServer
from kit.api import with_served

from raydex.actors.local import FAR_MS, LocalExchange, Trader, new_exchange
from raydex.actors.replica import ReplicaState
from raydex.codecs import (
    CreateGroupedOrders,
    CreateOrder,
    OrderInfo,
    ResultCode,
    SetMarkPrice,
    grouped_slots,
    sign_tx,
    signing,
    tx_to_json_str,
    tx_type_of,
)
from raydex.engine import state_digest

with warnings.catch_warnings():  # the SDK's own imports of deprecated websockets APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import lighter.models as models

T = TypeVar("T")
SL, SL_LIMIT, TP, TP_LIMIT, TWAP = 2, 3, 4, 5, 6
OTO, OCO, OTOCO = 1, 2, 3
HOUR_MS = 3_600_000


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def token(t: Trader) -> str:
    deadline = int(time.time()) + 600
    message = signing.auth_token_message(deadline, t.account, t.api_key)
    return f"{message}:{signing.sign(t.seed, signing.auth_token_hash(message)).hex()}"


def conditional(
    t: Trader,
    otype: int,
    is_ask: int,
    size: int,
    price: int,
    trigger: int,
    expiry: int,
    *,
    tif: int | None = None,
    ro: int = 1,
    coi: int = 0,
) -> CreateOrder:
    """A signed stop-loss / take-profit / TWAP of trader ``t`` in market 0."""
    if tif is None:
        tif = 0 if otype in (SL, TP) else 1
    tx = CreateOrder(
        t.account, t.api_key, 0, coi, size, price, is_ask, otype, tif, ro, trigger, expiry,
        FAR_MS, t.nonce, bytes(80),
    )  # fmt: skip
    t.nonce += 1
    return sign_tx(tx, t.seed)


def grouped(t: Trader, grouping: int, *orders: OrderInfo) -> CreateGroupedOrders:
    tx = CreateGroupedOrders(
        t.account, t.api_key, grouping, len(orders), *grouped_slots(list(orders)), FAR_MS,
        t.nonce, bytes(80),
    )  # fmt: skip
    t.nonce += 1
    return sign_tx(tx, t.seed)


class Rig:
    def __init__(self, ex: LocalExchange, state: ReplicaState, server: TestServer) -> None:
        self.ex, self.state, self.server = ex, state, server
        self.http: aiohttp.ClientSession

    async def send(self, tx: Any, code: int = 200) -> dict[str, Any]:
        form = {"tx_type": str(tx_type_of(type(tx))), "tx_info": tx_to_json_str(tx)}
        async with self.http.post(str(self.server.make_url("/api/v1/sendTx")), data=form) as r:
            body: dict[str, Any] = await r.json()
        assert body["code"] == code, body
        return body

    async def read(self, model: Any, path: str, t: Trader, **params: Any) -> dict[str, Any]:
        url = str(self.server.make_url(path))
        headers = {"Authorization": token(t)}
        params.setdefault("account_index", t.account)
        async with self.http.get(url, params=params, headers=headers) as r:
            body: dict[str, Any] = await r.json()
            assert r.status == 200, (path, body)
        model.model_validate(body, strict=True)
        return body

    async def active(self, t: Trader) -> list[dict[str, Any]]:
        body = await self.read(models.Orders, "/api/v1/accountActiveOrders", t, market_id=0)
        return list(body["orders"])

    async def inactive(self, t: Trader) -> list[dict[str, Any]]:
        body = await self.read(
            models.Orders, "/api/v1/accountInactiveOrders", t, market_id=0, limit=50
        )
        return list(body["orders"])

    def mark(self, price: int) -> None:
        self.ex.run([SetMarkPrice(0, price)], operator=True)

    def same_state(self) -> None:
        self.state.validate()
        assert self.state.state_hash() == state_digest(self.ex.producer.engine.records())


def with_rig(body: Callable[[Rig, list[Trader]], Awaitable[None]], n: int = 3) -> None:
    with_served([Trader(20 + i) for i in range(n)], Rig, body)


def _expiry() -> int:
    return int(time.time() * 1000) + HOUR_MS


def test_a_waiting_stop_loss_is_an_active_pending_order_and_fires_into_the_inactive_list() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b, c = ts
        await r.send(b.order(300_000, 100, 1))
        await r.send(a.order(300_000, 100, 0))  # a long 0.0100
        await r.send(c.order(290_000, 100, 0))  # liquidity below
        await r.send(conditional(a, SL, 1, 0, 280_000, 295_000, _expiry(), coi=41))
        await r.send(conditional(a, TP_LIMIT, 1, 0, 320_000, 320_000, _expiry(), coi=42))
        [sl, tp] = await r.active(a)
        assert (sl["type"], sl["status"], sl["trigger_status"], sl["trigger_price"]) == (
            "stop-loss", "pending", "mark-price", "2950.00",
        )  # fmt: skip
        assert (sl["client_order_index"], sl["reduce_only"], sl["initial_base_amount"]) == (
            41, True, "0.0000",
        )  # fmt: skip
        assert (tp["type"], tp["time_in_force"]) == ("take-profit-limit", "good-till-time")
        account = await r.read(models.DetailedAccounts, "/api/v1/account", a, by="index",
                               value=str(a.account))  # fmt: skip
        [acct] = account["accounts"]
        assert acct["pending_order_count"] == 2 and acct["total_order_count"] == 2
        [pos] = acct["positions"]
        assert (pos["pending_order_count"], pos["position_tied_order_count"]) == (2, 2)
        r.same_state()

        r.mark(295_000)  # the stop fires, sells the position at 2900
        done = await r.inactive(a)
        fired = next(o for o in done if o["client_order_index"] == 41)
        assert (fired["type"], fired["status"], fired["trigger_status"]) == (
            "stop-loss", "filled", "ready",
        )  # fmt: skip
        assert fired["filled_base_amount"] == "0.0100" and fired["trigger_time"] > 0
        assert await r.active(a) == []  # the take-profit went with the position
        ended = next(o for o in done if o["client_order_index"] == 42)
        assert ended["status"] == "canceled-reduce-only"
        r.same_state()

    with_rig(body)


def test_an_otoco_is_served_with_its_links_and_the_dry_run_refuses_bad_groups() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b, _ = ts
        exp = _expiry()
        entry = OrderInfo(0, 51, 200, 299_000, 0, 0, 1, 0, 0, exp)
        tp = OrderInfo(0, 0, 0, 330_000, 1, TP_LIMIT, 1, 1, 330_000, exp)
        sl = OrderInfo(0, 0, 0, 250_000, 1, SL, 0, 1, 270_000, exp)
        bad = OrderInfo(0, 0, 0, 250_000, 0, SL, 0, 1, 270_000, exp)  # the entry's side
        await r.send(grouped(a, OTOCO, entry, tp, bad), ResultCode.INVALID_GROUP_SIDE)
        a.nonce -= 1  # refused by the dry-run: the nonce was not used
        await r.send(grouped(a, OTOCO, entry, tp, sl))
        e, k1, k2 = await r.active(a)
        assert (e["type"], e["status"], e["client_order_index"]) == ("limit", "open", 51)
        assert (e["to_trigger_order_id_0"], e["to_trigger_order_id_1"]) == (
            k1["order_id"], k2["order_id"],
        )  # fmt: skip
        assert (k1["status"], k1["trigger_status"], k1["parent_order_id"]) == (
            "pending", "parent-order", e["order_id"],
        )  # fmt: skip
        assert (k1["to_cancel_order_id_0"], k2["to_cancel_order_id_0"]) == (
            k2["order_id"], k1["order_id"],
        )  # fmt: skip
        await r.send(b.order(299_000, 200, 1))  # fills the entry: the children arm
        _, k1, k2 = [{}, *await r.active(a)]
        assert [k1["trigger_status"], k2["trigger_status"]] == ["mark-price", "mark-price"]
        r.same_state()

    with_rig(body)


def test_a_twap_runs_in_slices_that_show_as_twap_subs_of_it() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b, _ = ts
        start = int(time.time() * 1000)
        r.ex.clock = lambda: start * 1_000_000
        await r.send(b.order(300_000, 1_000, 1))
        await r.send(conditional(a, TWAP, 0, 100, 301_000, 0, start + 310_000, ro=0, coi=61))
        [twap] = await r.active(a)
        assert (twap["type"], twap["status"], twap["trigger_status"]) == ("twap", "open", "twap")
        for k in (1, 2):
            r.ex.clock = lambda k=k: (start + k * 30_000) * 1_000_000
            r.mark(300_000)
        [twap] = await r.active(a)
        assert (twap["filled_base_amount"], twap["remaining_base_amount"]) == ("0.0020", "0.0080")
        subs = [o for o in await r.inactive(a) if o["type"] == "twap-sub"]
        assert [(s["parent_order_index"], s["filled_base_amount"]) for s in subs] == [
            (twap["order_index"], "0.0010"), (twap["order_index"], "0.0010"),
        ]  # fmt: skip
        r.same_state()

    with_rig(body)


def test_the_account_order_channels_carry_conditional_orders_with_their_triggers() -> None:
    """``account_all_orders``: the subscribe snapshot lists a waiting stop-loss; the block that
    places a take-profit, and the one that fires the stop, update them."""
    a, b, c = Trader(30), Trader(31), Trader(32)

    async def main() -> None:
        ex = new_exchange([a, b, c])
        replica = ex.serve()
        server = TestServer(replica.app, host="127.0.0.1", port=0)
        await server.start_server()
        r = Rig(ex, replica.state, server)
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(str(server.make_url("/stream"))) as ws,
            ):
                r.http = http
                await r.send(b.order(300_000, 100, 1))
                await r.send(a.order(300_000, 100, 0))
                await r.send(c.order(290_000, 100, 0))
                await r.send(conditional(a, SL, 1, 0, 280_000, 295_000, _expiry(), coi=81))
                assert (await _ws_next(ws))["type"] == "connected"
                await ws.send_json(
                    {"type": "subscribe", "channel": f"account_all_orders/{a.account}",
                     "auth": token(a)}
                )  # fmt: skip
                snap = await _ws_next(ws)
                [sl] = _orders(snap)
                assert (sl["type"], sl["status"], sl["trigger_price"]) == (
                    "stop-loss", "pending", "2950.00",
                )  # fmt: skip
                await r.send(conditional(a, TP, 1, 0, 300_000, 320_000, _expiry(), coi=82))
                [tp] = _orders(await _ws_update(ws))
                assert (tp["type"], tp["trigger_status"], tp["nonce"]) == (
                    "take-profit", "mark-price", a.nonce - 1,
                )  # fmt: skip
                r.mark(295_000)
                rows = {o["client_order_index"]: o for o in _orders(await _ws_update(ws))}
                assert (rows[81]["status"], rows[81]["trigger_status"]) == ("filled", "ready")
                assert rows[82]["status"] == "canceled-reduce-only"
        finally:
            await server.close()

    run(main())


async def _ws_next(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    msg = await asyncio.wait_for(ws.receive(), 10.0)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    out: dict[str, Any] = json.loads(msg.data)
    return out


async def _ws_update(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    while True:
        m = await _ws_next(ws)
        if m["type"] == "update/account_all_orders":
            return m


def _orders(msg: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = msg["orders"]["0"]
    for o in rows:
        models.Order.model_validate(o, strict=True)
    return rows
