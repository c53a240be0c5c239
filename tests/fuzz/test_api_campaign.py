"""The fuzz campaign over the public REST and WebSocket surface (issue 8).

``RAYDEX_FUZZ_INPUTS`` bad inputs (10,000 per CI run; ``make fuzz`` sends 200,000), generated from
``RAYDEX_FUZZ_SEED`` (random unless set; printed, so a failure can be replayed) by
``kit/fuzz_inputs.py``, are sent to one real replica app on 127.0.0.1 over real HTTP and WebSocket
connections, several at a time. Every answer must be:

- REST: HTTP 4xx with a JSON object carrying a Lighter-style ``code`` (a ``ResultCode``, not 200)
  and a message; a 200 only for a read that happened to be valid. Never a 5xx, never a broken
  connection.
- WebSocket: exactly one reply per frame (an ``error`` frame, or a tx reply with a non-200
  code), and the socket still open afterwards (a ping gets its pong). A frame over
  ``ws_max_message_bytes`` is the one exception, as documented in ``ApiConfig``: it is sent on a
  connection of its own and must be answered with the close code 1009 (message too big).

and the replica's state must not change: its state hash, checked every ``CHECK_EVERY`` inputs,
equals the one before the campaign, ``validate()`` passes and no nonce is left pending.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
from typing import Any

import aiohttp
from kit.fuzz_inputs import Campaign, Rest, Ws
from kit.lane import LaneServer

from raydex.actors.local import Trader, new_exchange
from raydex.actors.replica import ApiConfig
from raydex.codecs import ResultCode

INPUTS = int(os.environ.get("RAYDEX_FUZZ_INPUTS", "10000"))
SEED = int(os.environ.get("RAYDEX_FUZZ_SEED", str(random.randrange(2**32))))
CONCURRENCY = 16
CHECK_EVERY = 1_000
WS_SHARE = 0.2
CODES = frozenset(int(c) for c in ResultCode)


class Tally:
    def __init__(self) -> None:
        self.inputs = 0
        self.rejected = 0
        self.valid_reads = 0
        self.by_family: collections.Counter[str] = collections.Counter()
        self.by_code: collections.Counter[int] = collections.Counter()
        self.by_status: collections.Counter[int] = collections.Counter()
        self.failures: list[str] = []

    def fail(self, what: str) -> None:
        if len(self.failures) < 20:
            self.failures.append(what)


async def rest_one(http: aiohttp.ClientSession, base: str, req: Rest, tally: Tally) -> None:
    url = base + req.path
    try:
        async with http.request(
            req.method, url, params=req.query, data=req.body, headers=req.headers
        ) as r:
            status, text = r.status, await r.text()
    except (aiohttp.ClientError, ConnectionError) as exc:
        big = len(req.body or b"") > ApiConfig().max_body_bytes
        if big and isinstance(exc, ConnectionError):
            # the server answered 413 and closed before the client had written the whole body
            tally.inputs += 1
            tally.rejected += 1
            tally.by_family["body_too_big_cut"] += 1
            return
        tally.fail(f"{req.family}: connection error {exc!r} for {str(req)[:300]}")
        return
    tally.inputs += 1
    tally.by_family[req.family] += 1
    tally.by_status[status] += 1
    try:
        body = json.loads(text)
    except ValueError:
        tally.fail(f"{req.family}: not JSON ({status}): {text[:200]!r} for {req}")
        return
    code = body.get("code") if isinstance(body, dict) else None
    if not isinstance(code, int) or code not in CODES:
        tally.fail(f"{req.family}: no Lighter code ({status}): {text[:200]!r}")
        return
    tally.by_code[code] += 1
    if status == 200 and code == 200 and req.may_succeed:
        tally.valid_reads += 1
    elif 400 <= status < 500 and code != 200 and isinstance(body.get("message"), str):
        tally.rejected += 1
    else:
        tally.fail(f"{req.family}: answered {status}/{code}: {text[:200]!r} for {req}")


async def ws_too_big(http: aiohttp.ClientSession, base: str, frame: str, tally: Tally) -> None:
    async with http.ws_connect(base + "/stream") as ws:
        assert (await ws.receive_json(timeout=10))["type"] == "connected"
        try:
            await ws.send_str(frame)
        except ConnectionError:  # closed (1009) by the server before all of it was written
            tally.inputs += 1
            tally.rejected += 1
            tally.by_family["ws_too_big"] += 1
            return
        msg = await ws.receive(timeout=10)
        if msg.type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
            tally.fail(f"ws: a frame over the limit was answered {msg}")
        elif ws.close_code != aiohttp.WSCloseCode.MESSAGE_TOO_BIG:
            tally.fail(f"ws: a frame over the limit closed with {ws.close_code}")
        else:
            tally.inputs += 1
            tally.rejected += 1
            tally.by_family["ws_too_big"] += 1


async def ws_one(http: aiohttp.ClientSession, base: str, req: Ws, tally: Tally) -> None:
    try:
        await _ws_one(http, base, req, tally)
    except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
        tally.fail(f"ws: {exc!r} for {str(req.frames)[:300]}")


async def _ws_one(http: aiohttp.ClientSession, base: str, req: Ws, tally: Tally) -> None:
    limit = ApiConfig().ws_max_message_bytes
    big = [f for f in req.frames if len(f) > limit // 4 and len(f.encode()) > limit]
    for frame in big:
        assert isinstance(frame, str)
        await ws_too_big(http, base, frame, tally)
    req = Ws([f for f in req.frames if f not in big], req.family)
    if not req.frames:
        return
    async with http.ws_connect(base + "/stream") as ws:
        hello = await ws.receive_json(timeout=10)
        assert hello["type"] == "connected"
        for frame in req.frames:
            if isinstance(frame, bytes):
                await ws.send_bytes(frame)
            else:
                await ws.send_str(frame)
        replies = []
        while len(replies) < len(req.frames):
            msg = await ws.receive(timeout=10)
            if msg.type != aiohttp.WSMsgType.TEXT:
                tally.fail(f"ws: connection ended ({msg.type}, {ws.close_code}) after {replies}")
                return
            replies.append(json.loads(msg.data))
        await ws.send_str('{"type": "ping"}')
        pong = await ws.receive(timeout=10)
        if pong.type != aiohttp.WSMsgType.TEXT or json.loads(pong.data).get("type") != "pong":
            tally.fail(f"ws: no pong after the frames: {pong}")
            return
    for reply in replies:
        tally.inputs += 1
        tally.by_family["ws"] += 1
        code = reply.get("code", 200) if isinstance(reply, dict) else None
        if not isinstance(code, int) or (code != 200 and code not in CODES):
            tally.fail(f"ws: reply without a Lighter code: {reply}")
        elif code == 200:
            tally.valid_reads += 1  # a valid subscribe by chance (e.g. "height")
        else:
            tally.by_code[code] += 1
            tally.rejected += 1


def test_every_bad_input_is_answered_with_a_4xx_code_and_changes_nothing() -> None:
    trader = Trader(10)
    ex = new_exchange([trader, Trader(11)])
    replica = ex.serve(ApiConfig())
    state = replica.state
    campaign = Campaign(SEED, trader)
    tally = Tally()

    async def main() -> None:
        server = LaneServer(replica.app)  # as a replica serves it: sendTx* through the fast lane
        await server.start_server()
        base = str(server.make_url("")).rstrip("/")
        before = state.state_hash()
        timeout = aiohttp.ClientTimeout(total=30)
        connector = aiohttp.TCPConnector(limit=CONCURRENCY)
        slots = asyncio.Semaphore(CONCURRENCY)

        async def bounded(coro: Any) -> None:
            async with slots:
                await coro

        try:
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
                sent = 0
                while sent < INPUTS:
                    chunk = []
                    target = min(INPUTS, sent + CHECK_EVERY)
                    while sent < target:
                        if campaign.rng.random() < WS_SHARE:
                            ws = campaign.ws()
                            chunk.append(bounded(ws_one(http, base, ws, tally)))
                            sent += len(ws.frames)
                        else:
                            chunk.append(bounded(rest_one(http, base, campaign.rest(), tally)))
                            sent += 1
                    await asyncio.gather(*chunk)
                    assert not tally.failures, (SEED, *tally.failures)
                    assert state.state_hash() == before, f"state changed (seed {SEED})"
                    state.validate()
                    assert state.pending_count() == 0
        finally:
            await server.close()

    asyncio.run(asyncio.wait_for(main(), 600))
    summary = {
        "seed": SEED,
        "inputs": tally.inputs,
        "rejected": tally.rejected,
        "valid_reads_by_chance": tally.valid_reads,
        "families": dict(tally.by_family),
        "statuses": dict(sorted(tally.by_status.items())),
        "codes": dict(tally.by_code.most_common()),
    }
    print("fuzz campaign:", json.dumps(summary))
    assert not tally.failures, (SEED, tally.failures)
    assert tally.inputs >= INPUTS
    assert tally.rejected >= INPUTS * 0.8, summary
