"""The replica's WebSocket: an order sent by one client shows up on another client's order_book
with an unbroken nonce chain; channels, limits and tx messages answer as Lighter's do
(docs/lighter-compatibility.md); a slow client is conflated (still unbroken) and, past the limit,
disconnected while fast clients are unaffected.
Real aiohttp server on 127.0.0.1, real aiohttp clients, real BlockProducer in-process; every test
on asyncio's event loop and, where it is installed, on uvloop's (Ray then runs the replica
on it)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from kit.loops import loop, run  # noqa: F401  (loop: the autouse fixture)

from raydex.actors.local import LocalExchange, Trader, new_exchange
from raydex.actors.replica import ApiConfig, Fanout, ReplicaState
from raydex.codecs import ResultCode, str_to_lots, str_to_ticks, tx_to_json_str

WAIT = 10.0


class Rig:
    def __init__(
        self, ex: LocalExchange, state: ReplicaState, fanout: Fanout, server: TestServer
    ) -> None:
        self.ex, self.state, self.fanout, self.server = ex, state, fanout, server

    @property
    def ws_url(self) -> str:
        return str(self.server.make_url("/stream"))


@asynccontextmanager
async def rig(traders: list[Trader], config: ApiConfig | None = None) -> AsyncIterator[Rig]:
    ex = new_exchange(traders)
    replica = ex.serve(config)
    server = TestServer(replica.app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield Rig(ex, replica.state, replica.fanout, server)
    finally:
        await server.close()


def with_rig(
    body: Callable[[Rig, list[Trader]], Awaitable[None]], config: ApiConfig | None = None
) -> None:
    traders = [Trader(10 + i) for i in range(2)]

    async def main() -> None:
        async with rig(traders, config) as r:
            await body(r, traders)

    run(main())


async def recv(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    msg = await asyncio.wait_for(ws.receive(), WAIT)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    out: dict[str, Any] = json.loads(msg.data)
    return out


async def recv_type(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    for _ in range(100):
        m = await recv(ws)
        if m["type"] == kind:
            return m
    raise AssertionError(f"no {kind} message")


class BookFollower:
    """A client-side order book built from ``subscribed``/``update`` messages; checks the chain."""

    def __init__(self) -> None:
        self.bids: dict[int, int] = {}
        self.asks: dict[int, int] = {}
        self.nonce = -1
        self.updates = 0

    def feed(self, m: dict[str, Any]) -> None:
        book = m["order_book"]
        if m["type"] == "subscribed/order_book":
            self.bids, self.asks = {}, {}
        else:
            assert m["type"] == "update/order_book"
            assert book["begin_nonce"] == self.nonce, "nonce gap"
            assert m["engine_ts_us"] > 0 and m["replica_ts_us"] >= m["engine_ts_us"]
            self.updates += 1
        for side, levels in ((self.bids, book["bids"]), (self.asks, book["asks"])):
            for lvl in levels:
                price, size = str_to_ticks(lvl["price"], 2), str_to_lots(lvl["size"], 4)
                if size:
                    side[price] = size
                else:
                    side.pop(price, None)
        self.nonce = book["nonce"]

    def matches(self, state: ReplicaState, market: int = 0) -> bool:
        b = state.books[market]
        return self.nonce == b.nonce and self.bids == dict(b.bids) and self.asks == dict(b.asks)


async def follow(ws: aiohttp.ClientWebSocketResponse, book: BookFollower) -> None:
    """Feed every order_book message of ``ws`` to ``book`` until the socket closes."""
    async for msg in ws:
        if msg.type != aiohttp.WSMsgType.TEXT:
            break
        m = json.loads(msg.data)
        if m["type"].endswith("/order_book"):
            book.feed(m)


async def until(cond: Callable[[], bool], what: str) -> None:
    for i in range(int(WAIT / 0.001) + 100):
        if cond():
            return
        await asyncio.sleep(0 if i < 100 else 0.001)
    raise AssertionError(f"timed out waiting for {what}")


async def subscribe(ws: aiohttp.ClientWebSocketResponse, channel: str) -> dict[str, Any]:
    await ws.send_json({"type": "subscribe", "channel": channel})
    return await recv(ws)


# ---- the order flow -----------------------------------------------------------------------------


def test_an_order_sent_by_one_client_appears_on_another_clients_order_book() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        async with (
            aiohttp.ClientSession() as s,
            s.ws_connect(r.ws_url) as sender,
            s.ws_connect(r.ws_url) as watcher,
        ):
            assert (await recv(sender))["type"] == "connected"
            assert (await recv(watcher))["type"] == "connected"
            book = BookFollower()
            snap = await subscribe(watcher, "order_book/0")
            assert snap["channel"] == "order_book:0" and snap["type"] == "subscribed/order_book"
            book.feed(snap)
            orders = [a.order(299_000, 100, 0), b.order(301_000, 70, 1), b.order(299_000, 40, 1)]
            for i, tx in enumerate(orders):
                await sender.send_json(
                    {
                        "type": "jsonapi/sendtx",
                        "id": i,
                        "data": {"tx_type": 14, "tx_info": tx_to_json_str(tx)},
                    }
                )
                reply = await recv_type(sender, "jsonapi/sendtx")
                assert (reply["code"], reply["id"]) == (200, i) and len(reply["tx_hash"]) == 80
                book.feed(await recv_type(watcher, "update/order_book"))
            assert book.updates == 3 and book.matches(r.state)
            assert book.bids == {299_000: 60} and book.asks == {301_000: 70}

    with_rig(body)


def test_one_connection_pipelines_txs_without_waiting_for_each_answer() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a = ts[0]
        async with aiohttp.ClientSession() as s, s.ws_connect(r.ws_url) as ws:
            await recv(ws)
            for i in range(5):  # all sent before any answer is read
                tx = a.order(299_000 - i, 10, 0)
                msg = {"type": "jsonapi/sendtx", "id": i, "data": {"tx_type": 14,
                       "tx_info": tx_to_json_str(tx)}}  # fmt: skip
                await ws.send_json(msg)
            replies = [await recv_type(ws, "jsonapi/sendtx") for _ in range(5)]
        assert sorted(m["id"] for m in replies) == list(range(5))
        assert {m["code"] for m in replies} == {200}
        assert r.state.next_nonce(a.account, 0) == 5

    with_rig(body)


def test_sendtx_takes_tx_info_as_an_object_and_batches_as_lighters_examples_send_them() -> None:
    """Lighter's own WebSocket examples send ``tx_info`` as an object and the ``id`` inside
    ``data``; its docs send a batch's ``tx_types``/``tx_infos`` as JSON strings of lists. Both,
    and plain lists (of strings or objects), are taken; the replies are Lighter's
    ``RespSendTx``/``RespSendTxBatch``."""
    with warnings.catch_warnings():  # the SDK's own imports of deprecated websockets APIs
        warnings.simplefilter("ignore", DeprecationWarning)
        from lighter.models.resp_send_tx import RespSendTx
        from lighter.models.resp_send_tx_batch import RespSendTxBatch

    def fields(reply: dict[str, Any], model: Any) -> dict[str, Any]:
        return {k: reply[k] for k in model.model_fields if k in reply}

    async def body(r: Rig, ts: list[Trader]) -> None:
        a = ts[0]
        async with aiohttp.ClientSession() as s, s.ws_connect(r.ws_url) as ws:
            await recv(ws)
            tx = a.order(299_000, 10, 0)
            info = json.loads(tx_to_json_str(tx))
            await ws.send_json(
                {"type": "jsonapi/sendtx", "data": {"id": "mine-1", "tx_type": 14, "tx_info": info}}
            )
            reply = await recv_type(ws, "jsonapi/sendtx")
            assert (reply["code"], reply["id"]) == (200, "mine-1")
            RespSendTx.model_validate(fields(reply, RespSendTx), strict=True)
            batches = [
                # the docs' form: JSON strings of lists (tx_infos: a list of tx_info strings)
                {
                    "tx_types": "[14, 14]",
                    "tx_infos": json.dumps(
                        [tx_to_json_str(a.order(298_000, 1, 0)) for _ in range(2)]
                    ),
                },
                # lists, of objects and of strings mixed
                {
                    "tx_types": [14, 14],
                    "tx_infos": [
                        json.loads(tx_to_json_str(a.order(297_000, 1, 0))),
                        tx_to_json_str(a.order(297_000, 1, 0)),
                    ],
                },
            ]
            for i, data in enumerate(batches):
                await ws.send_json({"type": "jsonapi/sendtxbatch", "data": {**data, "id": i}})
                reply = await recv_type(ws, "jsonapi/sendtxbatch")
                assert (reply["code"], reply["id"], len(reply["tx_hash"])) == (200, i, 2), reply
                RespSendTxBatch.model_validate(fields(reply, RespSendTxBatch), strict=True)
            # an object that is not a tx is refused by name, as a string would be
            bad = {**info, "BaseAmount": "10"}
            frame = {"type": "jsonapi/sendtx", "id": 9, "data": {"tx_type": 14, "tx_info": bad}}
            await ws.send_json(frame)
            reply = await recv_type(ws, "jsonapi/sendtx")
            assert (reply["id"], reply["code"]) == (9, ResultCode.INVALID_TX_INFO)
            assert "BaseAmount" in reply["message"]
            frame = {"type": "jsonapi/sendtx", "id": 10, "data": {"tx_type": 14, "tx_info": [1]}}
            await ws.send_json(frame)
            reply = await recv_type(ws, "jsonapi/sendtx")
            assert (reply["id"], reply["code"]) == (10, ResultCode.INVALID_TX_INFO)
        assert r.state.next_nonce(a.account, 0) == 5
        assert r.state.books[0].bids == ((299_000, 10), (298_000, 2), (297_000, 2))

    with_rig(body)


def test_trade_account_and_height_channels_push_what_a_block_changed() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        async with aiohttp.ClientSession() as s, s.ws_connect(r.ws_url) as ws:
            await recv(ws)
            for ch in ("trade/0", f"account_all/{b.account}", "height"):
                snap = await subscribe(ws, ch)
                assert snap["type"].startswith("subscribed/"), snap
            r.ex.run([a.order(300_000, 50, 1), b.order(300_000, 50, 0)])
            got = {}
            for _ in range(3):
                m = await recv(ws)
                got[m["type"]] = m
            assert [(t["price"], t["size"]) for t in got["update/trade"]["trades"]] == [
                ("3000.00", "0.0050")
            ]
            assert got["update/account_all"]["positions"]["0"]["position"] == "0.0050"
            assert got["update/height"]["height"] == r.state.height

    with_rig(body)


@pytest.mark.parametrize("compress", [0, 15], ids=["plain", "permessage-deflate"])
def test_what_a_block_queues_for_a_connection_goes_out_in_one_socket_write(compress: int) -> None:
    """Plain frames are written together; with permessage-deflate negotiated every message is a
    compressed frame of its own (aiohttp's writer). Either way a real client reads each one."""

    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        async with aiohttp.ClientSession() as s, s.ws_connect(r.ws_url, compress=compress) as ws:
            await recv(ws)
            for ch in ("trade/0", f"account_all/{b.account}", "height"):
                assert (await subscribe(ws, ch))["type"].startswith("subscribed/")
            before = r.fanout.stats()
            r.ex.run([a.order(300_000, 50, 1), b.order(300_000, 50, 0)])
            kinds = sorted([(await recv(ws))["type"] for _ in range(3)])
            assert kinds == ["update/account_all", "update/height", "update/trade"]
            after = r.fanout.stats()
            assert after.messages - before.messages == 3
            assert after.writes - before.writes == (1 if not compress else 3)

    with_rig(body)


def test_coalesced_frames_of_every_length_class_reach_a_real_client_intact() -> None:
    """RFC 6455 has three length encodings (7-bit, 16-bit, 64-bit): one write carries one each."""

    async def body(r: Rig, ts: list[Trader]) -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(r.ws_url) as ws:
            await recv(ws)
            (c,) = r.fanout.clients
            sizes = [0, 100, 125, 126, 65_535, 65_536, 200_000]
            before = r.fanout.stats().writes
            for i, n in enumerate(sizes):
                r.fanout.send(c, {"type": "pad", "i": i, "pad": "x" * n})
            got = [await recv(ws) for _ in sizes]
            assert [(m["i"], len(m["pad"])) for m in got] == list(enumerate(sizes))
            assert r.fanout.stats().writes - before < len(sizes)

    with_rig(body)


def test_pings_limits_and_bad_messages_get_their_answers() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(r.ws_url) as ws:
            await recv(ws)
            await ws.send_json({"type": "ping"})
            assert (await recv(ws))["type"] == "pong"
            await ws.send_str("{nope")
            assert (await recv(ws))["code"] == ResultCode.WS_INVALID_MESSAGE
            for channel, code in [
                ("order_book/9", ResultCode.WS_INVALID_CHANNEL),
                ("candles/0", ResultCode.WS_INVALID_CHANNEL),
                ("account_all/12345", ResultCode.WS_INVALID_CHANNEL),
            ]:
                assert (await subscribe(ws, channel))["code"] == code
            await subscribe(ws, "order_book/0")
            assert (await subscribe(ws, "order_book/0"))["code"] == ResultCode.WS_ALREADY_SUBSCRIBED
            await subscribe(ws, "height")
            assert (await subscribe(ws, "trade/0"))["code"] == ResultCode.WS_TOO_MANY_SUBSCRIPTIONS
            await ws.send_json({"type": "unsubscribe", "channel": "trade/0"})
            assert (await recv(ws))["code"] == ResultCode.WS_NOT_SUBSCRIBED
            before = r.state.state_hash()
            forged = json.loads(tx_to_json_str(ts[0].order(299_000, 10, 0)))
            forged["BaseAmount"] = 11
            await ws.send_json(
                {"type": "jsonapi/sendtx", "data": {"tx_type": 14, "tx_info": json.dumps(forged)}}
            )
            reply = await recv_type(ws, "jsonapi/sendtx")
            assert reply["code"] == ResultCode.INVALID_SIGNATURE
            await ws.send_json(
                {
                    "type": "jsonapi/sendtxbatch",
                    "data": {"tx_types": "[14]", "tx_infos": "not json"},
                }
            )
            assert (await recv_type(ws, "jsonapi/sendtxbatch"))["code"] == ResultCode.INVALID_PARAM
            assert r.state.state_hash() == before
            assert r.fanout.stats().subscriptions == 2

    with_rig(body, ApiConfig(max_subscriptions=2))


def test_deeply_nested_json_gets_an_error_frame_and_the_connection_stays_open() -> None:
    deep_list = "[" * 5_000 + "]" * 5_000
    deep_object = '{"a":' * 5_000 + "1" + "}" * 5_000

    async def body(r: Rig, ts: list[Trader]) -> None:
        good = tx_to_json_str(ts[0].order(299_000, 10, 0))
        before = (r.state.state_hash(), r.ex.producer.seq, r.state.pending_count())
        async with aiohttp.ClientSession() as s, s.ws_connect(r.ws_url) as ws:
            await recv(ws)
            for frame in (deep_list, "[" * 120_000 + "]" * 120_000):
                # the frame itself: like any frame that is not JSON; the depth is bounded before
                # decoding, so a raised recursion limit (py_ecc sets 100,000) cannot crash us
                limit = sys.getrecursionlimit()
                sys.setrecursionlimit(100_000)
                try:
                    await ws.send_str(frame)
                    reply = await recv(ws)
                finally:
                    sys.setrecursionlimit(limit)
                assert (reply["type"], reply["code"]) == ("error", ResultCode.WS_INVALID_MESSAGE)
                assert "nested" in reply["message"]
            tx = {"tx_type": 14, "tx_info": deep_object}
            await ws.send_json({"type": "jsonapi/sendtx", "id": 1, "data": tx})
            reply = await recv_type(ws, "jsonapi/sendtx")
            assert (reply["id"], reply["code"]) == (1, ResultCode.INVALID_TX_INFO)
            assert reply["message"]
            for types, infos, code in [
                (deep_list, json.dumps([good]), ResultCode.INVALID_PARAM),
                ("[14]", deep_list, ResultCode.INVALID_PARAM),
                ("[14]", json.dumps([deep_object]), ResultCode.INVALID_TX_INFO),
            ]:
                data = {"tx_types": types, "tx_infos": infos}
                await ws.send_json({"type": "jsonapi/sendtxbatch", "id": 2, "data": data})
                reply = await recv_type(ws, "jsonapi/sendtxbatch")
                assert (reply["id"], reply["code"]) == (2, code), reply
            assert (r.state.state_hash(), r.ex.producer.seq, r.state.pending_count()) == before
            await ws.send_json({"type": "ping"})
            assert (await recv(ws))["type"] == "pong"

    with_rig(body)


# ---- slow consumers -----------------------------------------------------------------------------


def stop_reading(ws: aiohttp.ClientWebSocketResponse) -> None:
    """Make a real client stop reading its socket, as a stalled process would. aiohttp's client
    otherwise keeps reading into an unbounded in-memory queue, and has no public switch for this."""
    ws._conn.transport.pause_reading()  # type: ignore[union-attr]


def resume_reading(ws: aiohttp.ClientWebSocketResponse) -> None:
    ws._conn.transport.resume_reading()  # type: ignore[union-attr]


def small_buffer_socket(addr_info: Any) -> socket.socket:
    """A client socket with a tiny receive buffer, so a client that stops reading stalls the
    server's writer after little data."""
    family, type_, proto = addr_info[0], addr_info[1], addr_info[2]
    sock = socket.socket(family, type_, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return sock


async def drive(r: Rig, trader: Trader, fast: BookFollower, stop: Callable[[], bool]) -> int:
    """Eight resting bids at fresh prices per block until ``stop()``; waits for the fast client to
    catch up after each block. Returns the number of blocks."""
    for i in range(1_000):
        if stop():
            return i
        r.ex.run([trader.order(299_900 - i * 8 - k, 1, 0) for k in range(8)])
        await until(lambda: fast.nonce == r.state.books[0].nonce, "the fast client")
    raise AssertionError("the slow client was never conflated or dropped")


SLOW = ApiConfig(ws_queue_limit=4, ws_conflation_limit=10_000, ws_send_buffer_bytes=4096)


def test_a_stalled_client_is_conflated_and_still_sees_an_unbroken_book() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        conn = aiohttp.TCPConnector(socket_factory=small_buffer_socket)
        async with (
            aiohttp.ClientSession() as s,
            aiohttp.ClientSession(connector=conn) as slow_s,
            s.ws_connect(r.ws_url) as fast_ws,
            slow_s.ws_connect(r.ws_url) as slow_ws,
        ):
            fast, slow = BookFollower(), BookFollower()
            await fast_ws.send_json({"type": "subscribe", "channel": "order_book/0"})
            await slow_ws.send_json({"type": "subscribe", "channel": "order_book/0"})
            fast_task = asyncio.create_task(follow(fast_ws, fast))
            await until(lambda: fast.nonce >= 0 and r.fanout.stats().subscriptions == 2, "subs")
            stop_reading(slow_ws)
            await drive(r, ts[0], fast, lambda: r.fanout.stats().conflations >= 20)
            resume_reading(slow_ws)
            slow_task = asyncio.create_task(follow(slow_ws, slow))
            await until(lambda: slow.matches(r.state), "the slow client to catch up")
            stats = r.fanout.stats()
            assert stats.conflations >= 20 and stats.disconnects == 0
            assert slow.updates < fast.updates and fast.matches(r.state)
            fast_task.cancel()
            slow_task.cancel()

    with_rig(body, SLOW)


def test_a_client_stalled_past_the_limit_is_disconnected_and_fast_clients_keep_going() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        conn = aiohttp.TCPConnector(socket_factory=small_buffer_socket)
        async with (
            aiohttp.ClientSession() as s,
            aiohttp.ClientSession(connector=conn) as slow_s,
            s.ws_connect(r.ws_url) as fast_ws,
            slow_s.ws_connect(r.ws_url) as slow_ws,
        ):
            fast = BookFollower()
            await fast_ws.send_json({"type": "subscribe", "channel": "order_book/0"})
            await slow_ws.send_json({"type": "subscribe", "channel": "order_book/0"})
            fast_task = asyncio.create_task(follow(fast_ws, fast))
            await until(lambda: fast.nonce >= 0 and r.fanout.stats().subscriptions == 2, "subs")
            stop_reading(slow_ws)
            await drive(r, ts[0], fast, lambda: r.fanout.stats().disconnects >= 1)
            stats = r.fanout.stats()
            assert stats.conflations >= 30 and stats.connections == 1
            for _ in range(5):  # the survivor keeps receiving an unbroken chain
                r.ex.run([ts[1].order(300_100, 1, 1)])
                await until(lambda: fast.matches(r.state), "the fast client")
            resume_reading(slow_ws)
            closed = None
            for _ in range(10_000):
                msg = await asyncio.wait_for(slow_ws.receive(), WAIT)
                if msg.type != aiohttp.WSMsgType.TEXT:
                    closed = msg
                    break
            assert closed is not None and slow_ws.closed
            if closed.type == aiohttp.WSMsgType.CLOSE:
                assert closed.data == 1008 and "30006" in str(closed.extra)
            fast_task.cancel()

    with_rig(body, ApiConfig(ws_queue_limit=4, ws_conflation_limit=30, ws_send_buffer_bytes=4096))


def test_fanout_stats_are_a_frozen_snapshot() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(r.ws_url) as ws:
            await recv(ws)
            await subscribe(ws, "order_book/0")
            stats = r.fanout.stats()
            assert stats.connections == 1 and stats.subscriptions == 1
            r.ex.run([ts[0].order(299_000, 1, 0)])
            await recv(ws)
            assert r.fanout.stats().offset == stats.offset + 1
            try:
                stats.connections = 5  # type: ignore[misc]
            except AttributeError:
                pass
            else:
                raise AssertionError("FanoutStats must be frozen")

    with_rig(body)


def test_a_message_over_the_size_limit_closes_the_connection_with_1009() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(r.ws_url) as ws:
            await recv(ws)
            await ws.send_str(json.dumps({"type": "ping", "pad": "x" * 2048}))
            msg = await asyncio.wait_for(ws.receive(), WAIT)
            assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1009
        await until(lambda: r.fanout.stats().connections == 0, "the server to forget the client")

    with_rig(body, ApiConfig(ws_max_message_bytes=1024))
