"""Lighter's account WebSocket channels (actors/replica/ws/account_channels.py): the state on
subscribe, then one update per block for what that block changed for the account, every payload
validated strictly by lighter-sdk's models; the private channels refuse a missing, malformed,
expired, forged or foreign auth token with its code and send nothing. Real aiohttp server and
clients on 127.0.0.1, a real BlockProducer, real Lighter signatures."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from aiohttp.test_utils import TestServer

from raydex.actors.local import LocalExchange, Trader, new_exchange
from raydex.codecs import FundingTick, ResultCode, signing

with warnings.catch_warnings():  # the SDK's own imports of deprecated websockets APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import lighter.models as models

T = TypeVar("T")
WAIT = 10.0
T0 = 1_767_571_200_000  # 2026-01-05 00:00 UTC (ms)
MIN, HOUR = 60_000, 3_600_000
WS = aiohttp.ClientWebSocketResponse


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def token(
    t: Trader, lifetime_s: int = 600, account: int | None = None, sk: bytes | None = None
) -> str:
    """A Lighter auth token ``{deadline}:{account}:{key}:{sig}`` signed by ``t``'s key."""
    deadline = int(time.time()) + lifetime_s
    message = signing.auth_token_message(deadline, t.account if account is None else account, 0)
    sig = signing.sign(t.seed if sk is None else sk, signing.auth_token_hash(message))
    return f"{message}:{sig.hex()}"


async def recv(ws: WS) -> dict[str, Any]:
    msg = await asyncio.wait_for(ws.receive(), WAIT)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    out: dict[str, Any] = json.loads(msg.data)
    return out


async def subscribe(ws: WS, channel: str, auth: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"type": "subscribe", "channel": channel}
    if auth is not None:
        msg["auth"] = auth
    await ws.send_json(msg)
    return await recv(ws)


async def until(ws: WS, kind: str) -> dict[str, Any]:
    """The next message of type ``kind`` (other channels' messages skipped)."""
    while True:
        m = await recv(ws)
        if m["type"] == kind:
            return m


Body = Callable[[LocalExchange, WS, Trader, Trader, list[int]], Awaitable[None]]


def with_ws(body: Body) -> None:
    a, b = Trader(10), Trader(11)

    async def main() -> None:
        ex = new_exchange([a, b])
        now = [T0 + 5 * MIN]
        ex.clock = lambda: now[0] * 1_000_000
        replica = ex.serve()
        server = TestServer(replica.app, host="127.0.0.1", port=0)
        await server.start_server()
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(str(server.make_url("/stream"))) as ws,
            ):
                assert (await recv(ws))["type"] == "connected"
                await body(ex, ws, a, b, now)
            for _ in range(1000):  # the server sees the close after the client's close returns
                if not replica.fanout.clients:
                    break
                await asyncio.sleep(0.01)
            # the closed socket watches nothing any more, and no per-account key is left behind
            assert replica.fanout._watched == replica.fanout._account_keys == {}
            assert not [k for k in replica.fanout._subs if k.startswith("account")]
        finally:
            await server.close()

    run(main())


def orders_of(msg: dict[str, Any], market: str = "0") -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = msg["orders"][market]
    for o in rows:
        models.Order.model_validate(o, strict=True)
    return rows


def test_private_channels_refuse_a_missing_bad_expired_forged_or_foreign_token() -> None:
    async def body(ex: LocalExchange, ws: WS, a: Trader, b: Trader, now: list[int]) -> None:
        cases = [
            (None, ResultCode.AUTH_REQUIRED),
            ("not-a-token", ResultCode.AUTH_MALFORMED),
            (token(a, lifetime_s=-5), ResultCode.AUTH_EXPIRED),
            (token(a, lifetime_s=9 * 3600), ResultCode.AUTH_DEADLINE_TOO_FAR),
            (token(a, sk=b.seed), ResultCode.INVALID_SIGNATURE),  # a's account, b's key
            (token(b), ResultCode.AUTH_ACCOUNT_MISMATCH),  # valid, but for account 11
        ]
        channels = [
            "account_all_orders/10",
            "account_orders/0/10",
            "account_all_trades/10",
            "account_all_positions/10",
            "account_all_assets/10",
        ]
        for ch in channels:
            for auth, code in cases:
                reply = await subscribe(ws, ch, auth)
                assert reply["type"] == "error", (ch, auth, reply)
                assert reply["error"]["code"] == code, (ch, auth, reply)
        # 123 is not a string token
        await ws.send_json({"type": "subscribe", "channel": channels[0], "auth": 123})
        assert (await recv(ws))["error"]["code"] == ResultCode.AUTH_MALFORMED
        # nothing was subscribed: a block that touches account 10 sends nothing
        ex.run([a.order(310_000, 100, 1)])
        await ws.send_json({"type": "ping"})
        assert (await recv(ws))["type"] == "pong"
        for bad in (
            "account_all_orders/999",
            "account_orders/7/10",
            "account_orders/0",
            "user_stats/x",
        ):
            reply = await subscribe(ws, bad, token(a))
            assert reply["error"]["code"] == ResultCode.WS_INVALID_CHANNEL, bad

    with_ws(body)


def test_a_subscriber_sees_its_order_open_fill_and_cancel_on_both_order_channels() -> None:
    async def body(ex: LocalExchange, ws: WS, a: Trader, b: Trader, now: list[int]) -> None:
        ex.run([a.order(305_000, 300, 1, coi=7)])  # resting before the subscription
        snap = await subscribe(ws, "account_all_orders/10", token(a))
        assert snap["type"] == "subscribed/account_all_orders"
        assert snap["channel"] == "account_all_orders:10"
        [resting] = orders_of(snap)
        assert (resting["client_order_index"], resting["status"], resting["price"]) == (
            7,
            "open",
            "3050.00",
        )
        one = await subscribe(ws, "account_orders/0/10", token(a))
        assert (one["type"], one["channel"], one["account"]) == (
            "subscribed/account_orders",
            "account_orders:0",
            10,
        )
        assert [o["order_index"] for o in orders_of(one)] == [resting["order_index"]]

        ex.run([a.order(306_000, 200, 1, coi=8)])  # a second ask: one update per channel
        up = await recv(ws)
        assert (up["type"], up["channel"]) == ("update/account_all_orders", "account_all_orders:10")
        [new] = orders_of(up)
        assert (new["client_order_index"], new["status"], new["remaining_base_amount"]) == (
            8,
            "open",
            "0.0200",
        )
        assert new["nonce"] == a.nonce - 1  # the CreateOrder's own nonce
        up2 = await recv(ws)
        assert (up2["type"], up2["account"]) == ("update/account_orders", 10)
        assert [o["client_order_index"] for o in orders_of(up2)] == [8]

        ex.run([b.order(305_000, 100, 0)])  # b lifts part of the first ask
        part = orders_of(await until(ws, "update/account_all_orders"))
        assert [(o["client_order_index"], o["status"]) for o in part] == [(7, "open")]
        assert (part[0]["filled_base_amount"], part[0]["filled_quote_amount"]) == (
            "0.0100",
            "30.500000",
        )
        await until(ws, "update/account_orders")
        ex.run([b.order(305_000, 200, 0)])  # and the rest: filled
        done = orders_of(await until(ws, "update/account_all_orders"))
        assert [
            (o["client_order_index"], o["status"], o["remaining_base_amount"]) for o in done
        ] == [(7, "filled", "0.0000")]
        await until(ws, "update/account_orders")
        ex.run([a.cancel(new["order_index"])])
        gone = orders_of(await until(ws, "update/account_all_orders"))
        assert [(o["client_order_index"], o["status"]) for o in gone] == [(8, "canceled")]
        await until(ws, "update/account_orders")
        await ws.send_json({"type": "unsubscribe", "channel": "account_orders/0/10"})
        assert await recv(ws) == {"type": "unsubscribed", "channel": "account_orders:0"}

    with_ws(body)


def test_trades_positions_assets_and_stats_follow_a_cross() -> None:
    async def body(ex: LocalExchange, ws: WS, a: Trader, b: Trader, now: list[int]) -> None:
        auth = token(b)
        trades = await subscribe(ws, "account_all_trades/11", auth)
        assert (trades["type"], trades["trades"], trades["total_volume"]) == (
            "subscribed/account_all_trades",
            {},
            0.0,
        )
        pos = await subscribe(ws, "account_all_positions/11", auth)
        assert (pos["type"], pos["positions"], pos["shares"]) == (
            "subscribed/account_all_positions",
            {},
            [],
        )
        assets = await subscribe(ws, "account_all_assets/11", auth)
        models.WSAccountAssets.from_dict(assets)
        models.AccountAsset.model_validate(assets["assets"]["3"], strict=True)
        assert assets["assets"]["3"]["balance"] == "1000000.000000"
        stats = await subscribe(ws, "user_stats/11")  # public, as on Lighter
        assert stats["type"] == "subscribed/user_stats"
        assert (
            stats["stats"]["collateral"] == stats["stats"]["available_balance"] == "1000000.000000"
        )
        assert stats["stats"]["leverage"] == "0.00"

        ex.run([a.order(300_000, 10_000, 1)])  # a's order does not touch b: nothing for b
        ex.run([b.order(300_000, 10_000, 0)])  # b buys 1 ETH at 3000.00 (taker fee 0.02 %)
        got = {m["type"]: m for m in [await recv(ws) for _ in range(4)]}
        tr = got["update/account_all_trades"]
        [row] = tr["trades"]["0"]
        models.Trade.model_validate(row, strict=True)
        assert (row["bid_account_id"], row["size"], row["price"]) == (11, "1.0000", "3000.00")
        assert tr["total_volume"] == tr["daily_volume"] == 3000.0
        ps = got["update/account_all_positions"]["positions"]
        models.AccountPosition.model_validate(ps["0"], strict=True)
        assert (ps["0"]["sign"], ps["0"]["position"]) == (1, "1.0000")
        asset = got["update/account_all_assets"]["assets"]["3"]
        assert asset["balance"] == "999999.400000"  # the 0.6 USDC taker fee
        st = got["update/user_stats"]["stats"]
        assert (st["collateral"], st["leverage"], st["margin_usage"]) == (
            "999999.400000",
            "0.00",
            "0.01",
        )
        assert st["cross_stats"] == st["total_stats"] == {k: st[k] for k in st["total_stats"]}

    with_ws(body)


def test_account_all_carries_the_blocks_trades_funding_and_trade_stats() -> None:
    async def body(ex: LocalExchange, ws: WS, a: Trader, b: Trader, now: list[int]) -> None:
        snap = await subscribe(ws, "account_all/11")  # public: no token
        assert snap["type"] == "subscribed/account_all"
        assert (snap["trades"], snap["funding_histories"], snap["total_trades_count"]) == (
            {},
            {},
            0,
        )
        ex.run([a.order(300_000, 10_000, 1), b.order(300_000, 10_000, 0)])  # b long 1 ETH
        up = await until(ws, "update/account_all")
        [row] = up["trades"]["0"]
        models.Trade.model_validate(row, strict=True)
        assert (up["daily_trades_count"], up["total_trades_count"], up["total_volume"]) == (
            1,
            1,
            3000.0,
        )
        models.AccountPosition.model_validate(up["positions"]["0"], strict=True)
        # bids 1 % over the index for an hour: the long pays funding on the hour
        ex.run([b.order(303_000, 20_000, 0), a.order(304_000, 20_000, 1)])
        await until(ws, "update/account_all")
        for i in range(10):
            now[0] = T0 + (5 + i) * MIN
            ex.run([FundingTick(0)], operator=True)
        now[0] = T0 + HOUR + 7_000
        ex.run([FundingTick(0)], operator=True)
        paid = await until(ws, "update/account_all")
        [entry] = paid["funding_histories"]["0"]
        models.PositionFunding.model_validate(entry, strict=True)
        assert (entry["position_side"], entry["position_size"]) == ("long", "1.0000")
        assert entry["change"].startswith("-")  # the long paid
        assert paid["trades"] == {}
        # a second socket on the same account, then both gone: nothing watched (with_ws checks)
        await ws.send_json({"type": "unsubscribe", "channel": "account_all/11"})
        assert (await until(ws, "unsubscribed"))["channel"] == "account_all:11"

    with_ws(body)


def test_a_resting_order_shows_the_quote_it_filled_at_before_the_subscription() -> None:
    async def body(ex: LocalExchange, ws: WS, a: Trader, b: Trader, now: list[int]) -> None:
        ex.run([b.order(305_000, 100, 1)])  # b offers 0.01 at 3050.00
        ex.run([a.order(310_000, 300, 0, coi=9)])  # a bids 0.03 at 3100.00: 0.01 fills at 3050
        snap = await subscribe(ws, "account_all_orders/10", token(a))
        [o] = orders_of(snap)
        assert (o["client_order_index"], o["remaining_base_amount"]) == (9, "0.0200")
        # the fill's own price (from the replica's ledger), not the order's limit (31.000000)
        assert (o["filled_base_amount"], o["filled_quote_amount"]) == ("0.0100", "30.500000")
        trades = await subscribe(ws, "account_all_trades/10", token(a))
        [row] = trades["trades"]["0"]
        models.Trade.model_validate(row, strict=True)
        assert (row["bid_account_id"], row["price"]) == (10, "3050.00")

    with_ws(body)


def test_account_tx_reports_each_own_tx_executed_or_rejected() -> None:
    async def body(ex: LocalExchange, ws: WS, a: Trader, b: Trader, now: list[int]) -> None:
        ex.run([a.order(305_000, 100, 1)])
        reply = await subscribe(ws, "account_tx/10")
        assert reply["error"]["code"] == ResultCode.AUTH_REQUIRED
        snap = await subscribe(ws, "account_tx/10", token(a))
        assert (snap["type"], snap["channel"]) == ("subscribed/account_tx", "account_tx:10")
        for tx in snap["txs"]:
            models.Tx.model_validate(tx, strict=True)
        assert [t["type"] for t in snap["txs"]][-1] == 14  # its CreateOrder
        ex.run([b.order(295_000, 100, 0)])  # b's tx: nothing for a
        ex.run([a.cancel(123_456)])  # no such order: rejected, and still reported
        up = await recv(ws)
        assert (up["type"], up["channel"]) == ("update/account_tx", "account_tx:10")
        [tx] = up["txs"]
        models.Tx.model_validate(tx, strict=True)
        assert (tx["type"], tx["account_index"], tx["status"]) == (15, 10, 0)
        assert tx["nonce"] == a.nonce - 1

    with_ws(body)
