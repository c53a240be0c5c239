"""The WebSocket channels ``ticker/{m}`` and ``candle/{m}/{resolution}``: a snapshot on subscribe,
then one update per block that moved the best level / traded, each candle validated strictly by
lighter-sdk's ``Candle`` model. Real aiohttp server and clients on 127.0.0.1, real BlockProducer."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from aiohttp.test_utils import TestServer

from raydex.actors.local import LocalExchange, Trader, new_exchange
from raydex.codecs import ResultCode

with warnings.catch_warnings():  # the SDK's own imports of deprecated websockets APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import lighter.models as models

T = TypeVar("T")
WAIT = 10.0
T0 = 1_767_571_200_000  # 2026-01-05 00:00 UTC (ms)


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def recv(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    msg = await asyncio.wait_for(ws.receive(), WAIT)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    out: dict[str, Any] = json.loads(msg.data)
    return out


async def subscribe(ws: aiohttp.ClientWebSocketResponse, channel: str) -> dict[str, Any]:
    await ws.send_json({"type": "subscribe", "channel": channel})
    return await recv(ws)


def with_ws(body: Callable[[LocalExchange, aiohttp.ClientWebSocketResponse, list[Trader]],
                           Awaitable[None]]) -> None:  # fmt: skip
    traders = [Trader(10), Trader(11)]

    async def main() -> None:
        ex = new_exchange(traders)
        now = [T0]
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
                await body(ex, ws, traders)
        finally:
            await server.close()

    run(main())


def test_ticker_sends_the_best_levels_and_an_update_only_when_they_move() -> None:
    async def body(
        ex: LocalExchange, ws: aiohttp.ClientWebSocketResponse, ts: list[Trader]
    ) -> None:
        a, b = ts
        snap = await subscribe(ws, "ticker/0")
        assert snap["type"] == "subscribed/ticker" and snap["channel"] == "ticker:0"
        assert snap["ticker"] == {
            "s": "ETH",
            "a": {"price": "0", "size": "0"},
            "b": {"price": "0", "size": "0"},
        }
        ex.run([a.order(301_000, 500, 1)])
        up = await recv(ws)
        assert up["type"] == "update/ticker"
        assert up["ticker"]["a"] == {"price": "3010.00", "size": "0.0500"}
        assert up["nonce"] == ex.producer.seq
        ex.run([b.order(299_000, 100, 0)])
        up = await recv(ws)
        assert up["ticker"]["b"] == {"price": "2990.00", "size": "0.0100"}
        ex.run([b.order(298_000, 100, 0)])  # a worse bid: the top did not move, nothing sent
        ex.run([b.order(299_000, 200, 0)])  # more size at the best bid: sent
        up = await recv(ws)
        assert up["ticker"]["b"] == {"price": "2990.00", "size": "0.0300"}

    with_ws(body)


def test_candle_channel_streams_the_open_candle_of_its_resolution() -> None:
    async def body(
        ex: LocalExchange, ws: aiohttp.ClientWebSocketResponse, ts: list[Trader]
    ) -> None:
        a, b = ts
        snap = await subscribe(ws, "candle/0/1m")
        assert (snap["type"], snap["channel"], snap["r"], snap["c"]) == (
            "subscribed/candle",
            "candle:0:1m",
            "1m",
            [],
        )
        ex.run([a.order(300_000, 500, 1)])
        ex.run([b.order(300_000, 200, 0)])
        up = await recv(ws)
        assert up["type"] == "update/candle" and up["channel"] == "candle:0:1m"
        models.Candle.model_validate(up["candle"], strict=True)
        assert (up["candle"]["t"], up["candle"]["c"], up["candle"]["v"]) == (T0, 3000.0, 0.02)
        ex.run([b.order(300_000, 100, 0)])
        up = await recv(ws)
        assert up["candle"]["v"] == 0.03  # the same candle, grown
        second = await subscribe(ws, "candle/0/1h")
        assert second["type"] == "subscribed/candle"
        for c in second["c"]:
            models.Candle.model_validate(c, strict=True)
        assert [c["v"] for c in second["c"]] == [0.03]
        for bad in ("candle/0/2m", "candle/9/1m", "candle/0", "ticker/9"):
            reply = await subscribe(ws, bad)
            assert reply["type"] == "error"
            assert reply["code"] == ResultCode.WS_INVALID_CHANNEL, bad
        await ws.send_json({"type": "unsubscribe", "channel": "candle/0/1m"})
        assert (await recv(ws))["type"] == "unsubscribed"

    with_ws(body)


def test_a_trade_updates_every_subscribed_candle_resolution_in_lighters_order() -> None:
    # subscribed 1h first, then 1m: the block's candles still come 1m, then 1h (RESOLUTIONS)
    async def body(
        ex: LocalExchange, ws: aiohttp.ClientWebSocketResponse, ts: list[Trader]
    ) -> None:
        a, b = ts
        for ch in ("candle/0/1h", "candle/0/1m"):
            assert (await subscribe(ws, ch))["type"] == "subscribed/candle"
        ex.run([a.order(300_000, 500, 1)])
        ex.run([b.order(300_000, 200, 0)])
        ups = [await recv(ws), await recv(ws)]
        assert [u["channel"] for u in ups] == ["candle:0:1m", "candle:0:1h"]
        assert [u["candle"]["v"] for u in ups] == [0.02, 0.02]

    with_ws(body)
