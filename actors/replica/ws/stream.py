"""The ``/stream`` endpoint: one WebSocket connection's frames in, its replies and updates out.

Frames: ``ping``; ``subscribe``/``unsubscribe`` (``Fanout.subscribe``: a private account channel
takes an ``auth`` token); ``jsonapi/sendtx``/``sendtxbatch`` (``TxSubmission.ws_tx``: ``tx_info``
a JSON string or object, batches' lists as JSON strings or lists, the ``id`` at the top or in
``data``, as Lighter's examples send them). Anything else, or a frame that is not JSON, is
answered with an error frame (30000). A connection beyond the per-IP cap gets error 30005 and is
closed (1008). Tx frames are pipelined: each one's dry-run runs on arrival, in order, and its
reply goes out when its block lands; at most ``ws_max_inflight_txs`` per connection (21506
beyond), each charged to the IP's budget as a ``sendTx`` (23000 beyond). Everything a connection
gets goes through the fan-out's queue.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from aiohttp import WSCloseCode, WSMsgType, web

from raydex.codecs import ResultCode

from ..cache import ReplicaState
from ..http import (
    WS_TX_WEIGHT,
    ApiConfig,
    ApiError,
    Limits,
    RateLimited,
    TxSubmission,
    parse_json,
    reply_id,
)
from .fanout import Client, Fanout

__all__ = ["Stream"]

_encode = msgspec.json.Encoder().encode
_OK = int(ResultCode.OK)


class Stream:
    """The ``/stream`` handler of one app: its connections go through ``fanout``."""

    def __init__(
        self,
        state: ReplicaState,
        fanout: Fanout,
        limits: Limits,
        config: ApiConfig,
        txs: TxSubmission,
    ) -> None:
        self.state = state
        self.fanout = fanout
        self.limits = limits
        self.config = config
        self.txs = txs

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=self.config.ws_max_message_bytes)
        await ws.prepare(request)
        ip = request.remote
        if not self.limits.ws_open(ip):
            cap = self.config.ws_max_connections_per_ip
            error = _ws_error(ResultCode.WS_TOO_MANY_CONNECTIONS, f"at most {cap} per IP")
            await ws.send_str(_encode(error).decode())
            await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"too many connections")
            return ws
        fanout = self.fanout
        c = fanout.connect(ws, request.transport)
        fanout.send(c, {"type": "connected", "seq": self.state.seq})
        inflight: set[asyncio.Task[None]] = set()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    fanout.send(c, _ws_error(ResultCode.WS_INVALID_MESSAGE, "text frames only"))
                    continue
                await self._on_message(c, msg.data, inflight, ip)
                if c.closed:
                    break
        finally:
            fanout.disconnect(c)
            self.limits.ws_closed(ip)
        return ws

    async def _on_message(
        self, c: Client, text: str, inflight: set[asyncio.Task[None]], ip: str | None = None
    ) -> None:
        fanout = self.fanout
        try:
            obj = parse_json(text, int(ResultCode.WS_INVALID_MESSAGE), "the message")
        except ApiError as e:
            fanout.send(c, _ws_error(e.code, e.message))
            return
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "ping":
            fanout.send(c, {"type": "pong"})
        elif kind in ("subscribe", "unsubscribe"):
            if kind == "subscribe":
                code, message = fanout.subscribe(c, obj.get("channel"), obj.get("auth"))
            else:
                code, message = fanout.unsubscribe(c, obj.get("channel"))
            if code != _OK:
                fanout.send(c, _ws_error(code, message))
        elif kind in ("jsonapi/sendtx", "jsonapi/sendtxbatch"):
            # Pipelined: the tx's dry-run (which advances the pending nonce) runs now, in arrival
            # order, before the task's first await; the reply goes out when its block lands, so
            # one connection can have many txs in flight instead of one per block.
            if len(inflight) >= self.config.ws_max_inflight_txs:
                # answered like any tx reply (its id and type), so the client knows which tx
                # was refused and that its nonce was not consumed
                code = int(ResultCode.TOO_MANY_PENDING_TXS)
                reply = {"code": code, "message": "too many txs in flight on this connection"}
                fanout.send(c, {**reply, "type": kind, "id": reply_id(obj)})
                return
            wait = self.limits.charge_ip(ip, WS_TX_WEIGHT)
            if wait:
                reply = RateLimited(wait, "requests from this IP").body(False)
                fanout.send(c, {**reply, "type": kind, "id": reply_id(obj)})
                return
            task = asyncio.get_running_loop().create_task(self._ws_tx_reply(c, kind, obj, ip))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        else:
            fanout.send(c, _ws_error(ResultCode.WS_INVALID_MESSAGE, f"unknown type {kind!r}"))

    async def _ws_tx_reply(
        self, c: Client, kind: str, obj: dict[str, Any], ip: str | None = None
    ) -> None:
        self.fanout.send(c, await self.txs.ws_tx(kind, obj, ip))


def _ws_error(code: int, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"code": int(code), "message": message},
        "code": int(code),
        "message": message,
    }
