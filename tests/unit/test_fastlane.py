"""The replica's fast lane (actors/replica/http/fastlane.py): ``sendTx``/``sendTxBatch`` answered
by a plain HTTP/1.1 protocol exactly as the aiohttp app answers them, and every other request, or
any request the lane does not fully understand, handed to aiohttp with the connection.
Real sockets on 127.0.0.1, a real aiohttp app behind, raw bytes from the client side; every test
on asyncio's event loop and, where it is installed, on uvloop's (Ray then runs the replica
on it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from kit.lane import LaneServer
from kit.loops import loop, run  # noqa: F401  (loop: the autouse fixture)

from raydex.actors.local import LocalExchange, Trader, new_exchange
from raydex.actors.replica import ApiConfig
from raydex.actors.replica.http import fastlane
from raydex.actors.replica.http.fastlane import HANDOFF, MAX_HEAD, parse
from raydex.codecs import ResultCode, tx_to_json_str

WAIT = 10.0


def form(tx: Any) -> bytes:
    return urlencode({"tx_type": "14", "tx_info": tx_to_json_str(tx)}).encode()


FORM = "application/x-www-form-urlencoded"


def post(path: str, body: bytes, ctype: str = FORM, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


class Conn:
    """One raw keep-alive connection; reads whole responses (Content-Length framed)."""

    def __init__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.r, self.w = r, w

    @classmethod
    async def open(cls, port: int) -> Conn:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w)

    async def send(self, data: bytes) -> None:
        self.w.write(data)
        await self.w.drain()

    async def response(self) -> tuple[int, dict[str, str], bytes]:
        head = await asyncio.wait_for(self.r.readuntil(b"\r\n\r\n"), WAIT)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
        body = await asyncio.wait_for(self.r.readexactly(int(headers["content-length"])), WAIT)
        return status, headers, body

    def close(self) -> None:
        self.w.close()


async def lane_rig(
    traders: list[Trader], config: ApiConfig | None = None
) -> tuple[LocalExchange, LaneServer]:
    ex = new_exchange(traders)
    server = LaneServer(ex.serve(config).app)
    await server.start_server()
    return ex, server


def with_lane(body: Callable[[LocalExchange, LaneServer, list[Trader]], Awaitable[None]]) -> None:
    traders = [Trader(10), Trader(11)]

    async def main() -> None:
        ex, server = await lane_rig(traders)
        try:
            await body(ex, server, traders)
        finally:
            await server.close()

    run(main())


def test_pipelined_send_txs_are_answered_in_order_then_a_read_hands_the_connection_over() -> None:
    async def body(ex: LocalExchange, s: LaneServer, ts: list[Trader]) -> None:
        a = ts[0]
        c = await Conn.open(s.port)
        txs = [a.order(299_000 - i, 10, 0) for i in range(3)]
        await c.send(b"".join(post("/api/v1/sendTx", form(tx)) for tx in txs))
        answers = [await c.response() for _ in txs]
        assert [st for st, _, _ in answers] == [200, 200, 200]
        assert all(h["content-type"].startswith("application/json") for _, h, _ in answers)
        assert [json.loads(b)["code"] for _, _, b in answers] == [200, 200, 200]
        lane = s.lane
        assert lane is not None and (lane.served, lane.handoffs) == (3, 0)
        # a read on the same connection: aiohttp answers it, and everything after
        q = f"/api/v1/nextNonce?account_index={a.account}&api_key_index=0"
        await c.send(f"GET {q} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        status, _, raw = await c.response()
        assert (status, json.loads(raw)["nonce"]) == (200, 3)
        await c.send(post("/api/v1/sendTx", form(a.order(299_100, 10, 0))))
        status, _, raw = await c.response()
        assert (status, json.loads(raw)["code"]) == (200, 200)
        assert (lane.served, lane.handoffs) == (3, 1)
        c.close()

    with_lane(body)


def test_a_request_that_arrives_a_byte_at_a_time_is_served_by_the_lane() -> None:
    async def body(ex: LocalExchange, s: LaneServer, ts: list[Trader]) -> None:
        c = await Conn.open(s.port)
        for byte in post("/api/v1/sendTx", form(ts[0].order(299_000, 10, 0))):
            await c.send(bytes([byte]))
        status, _, raw = await c.response()
        assert (status, json.loads(raw)["code"]) == (200, 200)
        assert s.lane is not None and (s.lane.served, s.lane.handoffs) == (1, 0)
        c.close()

    with_lane(body)


@pytest.mark.parametrize(
    "request_bytes, status",
    [
        # chunked framing: aiohttp reads it (and the tx executes)
        (
            b"POST /api/v1/sendTx HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
            200,
        ),
        # a header name with a space before the colon, a duplicate Content-Length, an
        # obs-fold continuation line: aiohttp's parser refuses them
        (b"POST /api/v1/sendTx HTTP/1.1\r\nHost : x\r\nContent-Length: 3\r\n\r\nabc", 400),
        (b"POST /api/v1/sendTx HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc", 400),
        (b"POST /api/v1/sendTx HTTP/1.1\r\nHost: x\r\n y\r\nContent-Length: 0\r\n\r\n", 400),
        # over max_body_bytes: the app's 413 / 20004
        (
            b"POST /api/v1/sendTx HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n\r\n" + b"a" * 300_000,
            413,
        ),
        # a path the lane does not serve
        (b"POST /api/v1/sendTxs HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 404),
    ],
    ids=["chunked", "space-before-colon", "two-lengths", "obs-fold", "too-large", "other-path"],
)
def test_what_the_lane_does_not_fully_understand_is_answered_by_aiohttp(
    request_bytes: bytes, status: int
) -> None:
    async def body(ex: LocalExchange, s: LaneServer, ts: list[Trader]) -> None:
        data = request_bytes
        if b"%x" in data:
            f = form(ts[0].order(299_000, 10, 0))
            data = data.replace(b"%x", b"%x" % len(f)).replace(b"%s", f)
        before = ex.replicas[0][0].state_hash()
        c = await Conn.open(s.port)
        await c.send(data)
        got, _, raw = await c.response()
        assert got == status, raw
        assert s.lane is not None and (s.lane.served, s.lane.handoffs) == (0, 1)
        if status != 200:
            assert ex.replicas[0][0].state_hash() == before
        c.close()

    with_lane(body)


def test_connection_close_is_honoured_and_a_websocket_upgrade_reaches_aiohttp() -> None:
    async def body(ex: LocalExchange, s: LaneServer, ts: list[Trader]) -> None:
        c = await Conn.open(s.port)
        tx = ts[0].order(299_000, 10, 0)
        await c.send(post("/api/v1/sendTx", form(tx), extra="Connection: close\r\n"))
        status, headers, _ = await c.response()
        assert status == 200 and headers["connection"] == "close"
        assert await asyncio.wait_for(c.r.read(), WAIT) == b""  # the server closed it
        async with aiohttp.ClientSession() as http, http.ws_connect(s.make_url("/stream")) as ws:
            assert json.loads((await ws.receive(WAIT)).data)["type"] == "connected"
        assert s.lane is not None and s.lane.handoffs == 1

    with_lane(body)


def test_the_lane_answers_byte_for_byte_what_the_app_answers_through_aiohttp() -> None:
    """Twin exchanges (same traders, same keys): each request goes to the aiohttp app of one and
    through the lane of the other; status, JSON and Retry-After must match, for every outcome a
    ``sendTx*`` can have."""
    traders = [Trader(10), Trader(11)]
    # 25 sendTx (weight 6) per IP, loopback included
    config = ApiConfig(rate_limit_weight_per_minute=150, rate_limit_exempt=())
    a, b = traders
    good = [a.order(299_000, 10, 0), b.order(301_000, 10, 1)]
    batch = [a.order(299_001, 10, 0), a.order(299_002, 10, 0)]
    bad_sig = json.loads(tx_to_json_str(a.order(299_003, 10, 0)))
    bad_sig["BaseAmount"] += 1
    a.nonce = 0
    stale = a.order(299_004, 10, 0)  # signed, with a nonce already used
    batch_body = urlencode(
        {
            "tx_types": json.dumps([14, 14]),
            "tx_infos": json.dumps([tx_to_json_str(t) for t in batch]),
        }
    ).encode()
    forged = urlencode({"tx_type": "14", "tx_info": json.dumps(bad_sig)}).encode()
    json_body = json.dumps({"tx_type": 14, "tx_info": tx_to_json_str(good[1])}).encode()
    requests: list[tuple[str, bytes, str]] = [
        ("/api/v1/sendTx", form(good[0]), FORM),
        ("/api/v1/sendTx", json_body, "application/json"),
        ("/api/v1/sendTxBatch", batch_body, FORM),
        ("/api/v1/sendTx", forged, FORM),
        ("/api/v1/sendTx", forged, FORM),  # a replay: answered from memory
        ("/api/v1/sendTx", form(stale), FORM),
        ("/api/v1/sendTx", b"tx_type=14&tx_info=%FF%FE", FORM),
        ("/api/v1/sendTx", b"\xff\xfe=1", FORM),
        ("/api/v1/sendTx", b"{nope", "application/json"),
        ("/api/v1/sendTx", b"[1, 2]", "application/json"),
        ("/api/v1/sendTx", b"tx_type=14", FORM),
        ("/api/v1/sendTx", b"tx_type=x&tx_info=%7B%7D", FORM),
        ("/api/v1/sendTxBatch", b"tx_types=%5B14%5D&tx_infos=%5B%5D", FORM),
        ("/api/v1/sendTxBatch", b"", FORM),
    ]

    async def main() -> None:
        ex_a, ex_b = new_exchange(traders), new_exchange(traders)
        plain = TestServer(ex_a.serve(config).app, host="127.0.0.1", port=0)
        lane = LaneServer(ex_b.serve(config).app)
        await plain.start_server()
        await lane.start_server()
        try:
            ca, cb = await Conn.open(plain.port or 0), await Conn.open(lane.port)
            for path, body, ctype in requests:
                answers = []
                for c in (ca, cb):
                    await c.send(post(path, body, ctype))
                    status, headers, raw = await c.response()
                    answers.append((status, json.loads(raw), headers.get("retry-after")))
                assert answers[0] == answers[1], (path, body)
            # over the IP budget: 429 with Retry-After from both
            over = []
            for c in (ca, cb):
                for _ in range(200):
                    await c.send(post("/api/v1/sendTx", b"tx_type=14"))
                    status, headers, raw = await c.response()
                    if status == 429:
                        over.append((status, json.loads(raw)["code"], headers.get("retry-after")))
                        break
            assert len(over) == 2 and over[0] == over[1]
            assert over[0][1] == ResultCode.RATE_LIMITED and over[0][2] is not None
            assert lane.lane is not None and lane.lane.handoffs == 0
            # the same txs took effect (blocks carry their own times: no state-hash equality)
            sa, sb = ex_a.replicas[0][0], ex_b.replicas[0][0]
            assert dict(sa.books[0].bids) == dict(sb.books[0].bids) != {}
            assert dict(sa.books[0].asks) == dict(sb.books[0].asks) != {}
            for t in traders:
                assert sa.next_nonce(t.account, 0) == sb.next_nonce(t.account, 0) > 0
            ca.close()
            cb.close()
        finally:
            await plain.close()
            await lane.close()

    run(main())


def test_parse_takes_only_what_it_fully_understands() -> None:
    ok = bytearray(post("/api/v1/sendTxBatch", b"a=1", "application/json; charset=UTF-8"))
    req = parse(ok, 100)
    assert getattr(req, "path", None) == "/api/v1/sendTxBatch" and ok == bytearray()
    # an incomplete head waits, whatever its method: it is handed on only once complete
    for partial in (b"", b"PO", b"G", b"GET /api/v1/info HTTP/1.1\r\nHo",
                    b"POST /api/v1/sendTx HTTP/1.1\r\nContent-Le"):  # fmt: skip
        assert parse(bytearray(partial), 100) is None
    head_only = post("/api/v1/sendTx", b"abc")[:-1]
    assert parse(bytearray(head_only), 100) is None  # the body is still on its way
    refused = [
        b"GET / HTTP/1.1\r\n\r\n",
        # malformed before it is complete: aiohttp's parser answers them (JSON 400)
        b"POST /api/v1/sendTx HTTP/1.1\nHost: x\n",
        b"GET /api/v1/info HTTP/1.1\r\nHost: x\n",
        b"POST /" + b"a" * MAX_HEAD + b" HTTP/1.1",
        b"POST /api/v1/sendTx HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
        b"POST /api/v1/sendTx?x=1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        b"POST /api/v1/sendTx HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=x\r\n"
        b"Content-Length: 0\r\n\r\n",
        b"POST /api/v1/sendTx HTTP/1.1\r\nContent-Type: application/json\r\n\r\n",  # no length
        b"POST /api/v1/sendTx HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
        b"POST /api/v1/sendTx HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
        b"POST /api/v1/sendTx HTTP/1.1\r\nX: \x01\r\nContent-Length: 0\r\n\r\n",
        b"POST /api/v1/sendTx HTTP/1.1\r\nX: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n",
        b"POST /api/v1/sendTx HTTP/1.1\r\n" + b"X: " + b"a" * MAX_HEAD + b"\r\n\r\n",
        b"POST /api/v1/sendTx HTTP/1.1\r\nContent-Length: 101\r\n\r\n",  # over max_body
    ]
    for raw in refused:
        buf = bytearray(raw)
        assert parse(buf, 100) is HANDOFF, raw
        assert buf == bytearray(raw)  # left for aiohttp as it came


def test_an_idle_connection_a_stalled_and_a_trickling_request_head_are_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle keep-alive after ``KEEPALIVE_S``; a head that stalls, or trickles a byte at a time
    (the deadline is never reset by a byte), after ``http_head_timeout_s``: 408 and the close;
    a connection that never sends a byte, the same."""
    monkeypatch.setattr(fastlane, "KEEPALIVE_S", 0.2)

    async def main() -> None:
        trader = Trader(10)
        _, s = await lane_rig([trader], ApiConfig(http_head_timeout_s=0.5))
        try:
            served = await Conn.open(s.port)  # one answer, then nothing
            await served.send(post("/api/v1/sendTx", form(trader.order(299_000, 10, 0))))
            assert (await served.response())[0] == 200
            stalled = await Conn.open(s.port)  # half a head, then nothing
            await stalled.send(b"POST /api/v1/sendTx HTTP/1.1\r\nHost: x\r\n")
            silent = await Conn.open(s.port)
            trickling = await Conn.open(s.port)
            answer = asyncio.create_task(trickling.response())
            head = b"GET /api/v1/info HTTP/1.1\r\nX: " + b"y" * 100
            dripped = 0
            while not answer.done() and dripped < len(head):  # 0.05 s a byte: 10x the deadline
                with contextlib.suppress(ConnectionError):
                    await trickling.send(head[dripped : dripped + 1])
                dripped += 1
                await asyncio.sleep(0.05)
            assert answer.done(), "a trickling head was never cut off"
            answers = [await c.response() for c in (stalled, silent)] + [await answer]
            for status, _, raw in answers:
                assert (status, json.loads(raw)["code"]) == (408, ResultCode.INVALID_PARAM)
            for c in (served, stalled, silent, trickling):
                assert await asyncio.wait_for(c.r.read(), WAIT) == b""
            assert s.lane is not None and not s.lane.connections
            assert s.lane.gate.refused["head_timeout"] == 3 and s.lane.gate.open == 0
        finally:
            await s.close()

    run(main())


def test_pipelined_requests_are_all_answered_when_the_client_half_closes() -> None:
    """Three sendTx sent at once, then the client's FIN: all three executed and answered (as
    aiohttp answers them), then the server closes."""

    async def body(ex: LocalExchange, s: LaneServer, ts: list[Trader]) -> None:
        a = ts[0]
        c = await Conn.open(s.port)
        txs = [a.order(299_000 - i, 10, 0) for i in range(3)]
        await c.send(b"".join(post("/api/v1/sendTx", form(tx)) for tx in txs))
        c.w.write_eof()
        answers = [await c.response() for _ in txs]
        assert [json.loads(raw)["code"] for _, _, raw in answers] == [200, 200, 200]
        assert await asyncio.wait_for(c.r.read(), WAIT) == b""
        assert ex.replicas[0][0].next_nonce(a.account, 0) == 3
        assert s.lane is not None and (s.lane.served, s.lane.handoffs) == (3, 0)

    with_lane(body)


MALFORMED = [
    b"POST /api/v1/sendTx HTTP/1.1\nHost: x\nContent-Length: 0\n\n",  # bare LF
    b"GET /api/v1/info HTTP/1.1\nHost: x\n\n",
    b"POST /api/v1/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # request line > 8190
    b"GET /api/v1/info HTTP/1.1\r\nX: " + b"b" * 9000 + b"\r\n\r\n",  # header > 8190
]


@pytest.mark.parametrize("fast_lane", [True, False], ids=["fast-lane", "aiohttp-only"])
@pytest.mark.parametrize("raw", MALFORMED, ids=["bare-lf-post", "bare-lf-get", "line", "header"])
def test_malformed_heads_get_the_api_json_400_whoever_answers(raw: bytes, fast_lane: bool) -> None:
    async def main() -> None:
        _, s = await lane_rig([Trader(10)], ApiConfig(fast_lane=fast_lane))
        try:
            c = await Conn.open(s.port)
            await c.send(raw)
            status, headers, body = await c.response()
            reply = json.loads(body)
            assert (status, reply["code"]) == (400, ResultCode.INVALID_PARAM), reply
            assert reply["message"].startswith("bad HTTP request: ")
            assert headers["content-type"].startswith("application/json")
            assert await asyncio.wait_for(c.r.read(), WAIT) == b""
        finally:
            await s.close()

    run(main())


def test_connections_over_the_per_ip_and_the_global_cap_are_refused_and_counted() -> None:
    async def main() -> None:
        cfg = ApiConfig(http_max_connections_per_ip=3, rate_limit_exempt=())
        _, s = await lane_rig([Trader(10)], cfg)
        try:
            held = [await Conn.open(s.port) for _ in range(3)]
            over = await Conn.open(s.port)
            status, headers, raw = await over.response()
            assert (status, json.loads(raw)["code"], headers["retry-after"]) == (
                429, ResultCode.RATE_LIMITED, "1",
            )  # fmt: skip
            assert await asyncio.wait_for(over.r.read(), WAIT) == b""
            held.pop().close()  # one closes: its place is free again
            await asyncio.sleep(0.1)
            again = await Conn.open(s.port)
            await again.send(post("/api/v1/sendTx", b"tx_type=14"))
            assert (await again.response())[0] == 400  # served (a bad tx), not refused
            assert s.lane is not None and s.lane.gate.refused["per_ip"] == 1
            for c in (*held, again):
                c.close()
        finally:
            await s.close()
        # the global cap counts every address, exempt ones too. At the cap the connection that
        # has waited longest for its first head makes room (408, "evicted"); when every one has
        # sent a request, the newcomer is answered 503 and closed
        _, s = await lane_rig([Trader(10)], ApiConfig(http_max_connections=2))
        try:
            silent = await Conn.open(s.port)
            await asyncio.sleep(0.05)
            served = await Conn.open(s.port)
            await served.send(post("/api/v1/sendTx", b"tx_type=14"))
            assert (await served.response())[0] == 400  # a request answered: not evictable
            newcomer = await Conn.open(s.port)
            status, _, raw = await silent.response()
            assert (status, json.loads(raw)["code"]) == (408, ResultCode.INVALID_PARAM)
            assert "make room" in json.loads(raw)["message"]
            await newcomer.send(post("/api/v1/sendTx", b"tx_type=14"))
            assert (await newcomer.response())[0] == 400  # admitted, served
            over = await Conn.open(s.port)
            status, _, raw = await over.response()
            assert (status, json.loads(raw)["code"]) == (503, ResultCode.RATE_LIMITED)
            assert s.lane is not None and s.lane.gate.open == 2
            assert (s.lane.gate.refused["total"], s.lane.gate.refused["evicted"]) == (1, 1)
            for c in (silent, served, newcomer, over):
                c.close()
        finally:
            await s.close()

    run(main())
