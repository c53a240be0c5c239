"""The fast lane: ``sendTx``/``sendTxBatch`` over keep-alive HTTP/1.1 without aiohttp's
per-request machinery, in front of the same app.

::

    client ──TCP──► FastLane (asyncio.Protocol, one per connection)
                      │ POST /api/v1/sendTx | /api/v1/sendTxBatch, HTTP/1.1, Content-Length,
                      │ a urlencoded or JSON body:  the app's ``fast_send`` ─► response bytes
                      └ anything else: aiohttp's RequestHandler takes the connection, with every
                        byte read so far, for the rest of its life (reads, WebSocket, multipart)

Why: aiohttp's per-request machinery (request and response objects, middlewares, router, header
multidicts, payload writer) costs more CPU than the request; the lane keeps aiohttp for all but
the one request shape a trading client sends thousands of times per connection.

- The lane serves a request only when it understands all of it: exact method, path and
  version, token header names with visible ASCII values, one ``Host``, one ``Content-Length`` up
  to ``max_body_bytes``, no ``Transfer-Encoding``/``Expect``/``Upgrade``, a urlencoded (utf-8) or
  JSON ``Content-Type``. Anything else goes to aiohttp unread, between requests only, for good.
- The answer is the app's (:meth:`TxSubmission.fast_send`): same budgets, codes, bodies and
  statuses. Requests on a connection are answered in order (reading pauses past
  ``MAX_BUFFER``); one with nothing in progress for ``KEEPALIVE_S`` is closed; a client that
  goes away mid-request does not cancel it (the answer is dropped).
- ``hooks.request_span`` wraps a request carrying ``traceparent``, as tracing does on aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any, Protocol

__all__ = [
    "HANDOFF",
    "MAX_BUFFER",
    "MAX_HEAD",
    "FastLaneServer",
    "FastSend",
    "RequestSpan",
    "parse",
]

log = logging.getLogger(__name__)


class FastSend(Protocol):
    """``(path, peer IP, content type, body) -> (HTTP status, JSON body, Retry-After or None)``"""

    def __call__(
        self, path: str, ip: str | None, content_type: str, body: bytes
    ) -> Awaitable[tuple[int, bytes, str | None]]: ...


#: (request name, headers) -> a context around the request (tracing), or None
RequestSpan = Callable[[str, Mapping[str, str]], contextlib.AbstractContextManager[Any]]

#: longest request head (request line and headers) the lane reads; longer goes to aiohttp
MAX_HEAD = 8190
#: bytes buffered (pipelined requests) before reading pauses
MAX_BUFFER = 1 << 20
#: seconds a connection in the lane may sit without a request in progress before it is closed
#: (aiohttp's keep-alive timeout)
KEEPALIVE_S = 75.0

_PATHS = {b"/api/v1/sendTx": "/api/v1/sendTx", b"/api/v1/sendTxBatch": "/api/v1/sendTxBatch"}
_FORM = "application/x-www-form-urlencoded"
_TYPES = {
    _FORM: _FORM,
    _FORM + "; charset=utf-8": _FORM,
    "application/json": "application/json",
    "application/json; charset=utf-8": "application/json",
}
#: headers whose presence sends the request to aiohttp (framing or semantics the lane skips)
_REFUSED = frozenset((b"transfer-encoding", b"expect", b"upgrade"))
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


class _Date:
    """The ``Date`` header's value, formatted once per second."""

    __slots__ = ("second", "value")

    def __init__(self) -> None:
        self.second = -1
        self.value = b""

    def now(self) -> bytes:
        t = int(time.time())
        if t != self.second:
            self.second = t
            self.value = email.utils.formatdate(t, usegmt=True).encode()
        return self.value


class _Request:
    __slots__ = ("body", "close", "content_type", "headers", "path")

    def __init__(
        self, path: str, content_type: str, body: bytes, close: bool, headers: dict[str, str]
    ) -> None:
        self.path = path
        self.content_type = content_type
        self.body = body
        self.close = close
        self.headers = headers


#: what ``parse`` returns for a request aiohttp must answer
HANDOFF = object()


def parse(buf: bytearray, max_body: int) -> _Request | object | None:
    """The first request in ``buf`` (consumed) if the lane serves it, ``HANDOFF`` if not (``buf``
    untouched), None if more bytes are needed to tell."""
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
    if end < 0:
        if len(buf) > MAX_HEAD or (buf and not buf.startswith(b"POST "[: len(buf)])):
            return HANDOFF
        return None
    head = bytes(buf[:end])
    if not head.isascii():
        return HANDOFF
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[0] != b"POST" or parts[2] != b"HTTP/1.1":
        return HANDOFF
    path = _PATHS.get(parts[1])
    if path is None:
        return HANDOFF
    length = -1
    ctype: str | None = None
    close = False
    host = False  # HTTP/1.1 requires exactly one (aiohttp answers 400 without)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or not _TOKEN.issuperset(name):
            return HANDOFF  # obs-fold, a space before the colon, a bad name
        name = name.lower()
        value = value.strip(b" \t")
        if any(c < 0x20 or c == 0x7F for c in value):
            return HANDOFF
        if name in _REFUSED:
            return HANDOFF
        if name == b"content-length":
            if length >= 0 or not value.isdigit() or len(value) > 12:
                return HANDOFF
            length = int(value)
        elif name == b"content-type":
            if ctype is not None:
                return HANDOFF
            ctype = _TYPES.get(value.decode().lower())
            if ctype is None:
                return HANDOFF
        elif name == b"host":
            if host:
                return HANDOFF
            host = True
        elif name == b"connection":
            close = value.lower() == b"close"
        elif name == b"traceparent":
            headers["traceparent"] = value.decode()
        elif name == b"tracestate":
            headers["tracestate"] = value.decode()
    if length < 0 or length > max_body or ctype is None or not host:
        return HANDOFF
    if len(buf) < end + 4 + length:
        return None
    body = bytes(buf[end + 4 : end + 4 + length])
    del buf[: end + 4 + length]
    return _Request(path, ctype, body, close, headers)


class FastLaneServer:
    """The protocol factory of the replica's listening sockets (``loop.create_server(lane, ...)``):
    every connection starts in the lane; ``aiohttp_factory`` (the runner's ``web.Server``) makes
    the protocol a handed-off connection continues with."""

    def __init__(
        self,
        aiohttp_factory: Callable[[], asyncio.Protocol],
        send: FastSend,
        max_body: int,
        request_span: RequestSpan | None = None,
    ) -> None:
        self.aiohttp_factory = aiohttp_factory
        self.send = send
        self.max_body = max_body
        self.request_span = request_span
        self.connections: set[FastLane] = set()
        self.date = _Date()
        #: requests the lane answered, and connections it handed to aiohttp
        self.served = 0
        self.handoffs = 0

    def __call__(self) -> FastLane:
        return FastLane(self)

    def close(self) -> None:
        """Close every connection still in the lane (the owner stops; aiohttp's are the
        runner's to close)."""
        for c in tuple(self.connections):
            c.abort()


class FastLane(asyncio.Protocol):
    """One connection while it is in the lane (see the module docstring)."""

    def __init__(self, server: FastLaneServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.buf = bytearray()
        self.task: asyncio.Task[None] | None = None
        self.paused = False
        self.closing = False
        self.last = 0.0  # loop time of the last bytes in or answer out
        self.idle: asyncio.TimerHandle | None = None

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        self.server.connections.add(self)
        loop = asyncio.get_running_loop()
        self.last = loop.time()
        self.idle = loop.call_later(KEEPALIVE_S, self._idle_check)

    def data_received(self, data: bytes) -> None:
        self.last = asyncio.get_running_loop().time()
        self.buf += data
        if len(self.buf) > MAX_BUFFER and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        if self.task is None:
            self._next()

    def eof_received(self) -> bool | None:
        self.closing = True
        if self.task is None:
            self._close()
        return True  # half-closed: an answer in flight still goes out

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        self._stop_idle()

    def _idle_check(self) -> None:
        """Close a connection that has sat ``KEEPALIVE_S`` with no request in progress (an
        idle keep-alive, or a request head that stopped arriving); else look again later."""
        loop = asyncio.get_running_loop()
        quiet = loop.time() - self.last
        if self.task is None and quiet >= KEEPALIVE_S:
            self.idle = None
            self._close()
            return
        self.idle = loop.call_later(max(KEEPALIVE_S - quiet, 1.0), self._idle_check)

    def _stop_idle(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    # ---- requests

    def _next(self) -> None:
        """Serve the next complete request in the buffer, hand the connection off, or wait."""
        if self.closing:
            return
        req = parse(self.buf, self.server.max_body)
        if req is None:
            if self.paused and self.transport is not None:
                self.transport.resume_reading()
                self.paused = False
            return
        if req is HANDOFF:
            self._handoff()
            return
        assert isinstance(req, _Request)
        self.task = asyncio.get_running_loop().create_task(self._serve(req))

    async def _serve(self, req: _Request) -> None:
        server = self.server
        try:
            span = server.request_span
            if span is not None and "traceparent" in req.headers:
                with span(req.path.rpartition("/")[2], req.headers):
                    status, body, retry_after = await server.send(
                        req.path, self.peer, req.content_type, req.body
                    )
            else:
                status, body, retry_after = await server.send(
                    req.path, self.peer, req.content_type, req.body
                )
            content_type = b"application/json; charset=utf-8"
        except Exception:  # a bug: answered like aiohttp answers an unhandled exception
            log.exception("fast lane: %s failed", req.path)
            status, body, retry_after = 500, b"500 Internal Server Error", None
            content_type = b"text/plain; charset=utf-8"
        server.served += 1
        t = self.transport
        if t is not None and not t.is_closing():
            head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nDate: %s\r\n" % (
                status,
                _REASONS.get(status, b""),
                content_type,
                len(body),
                server.date.now(),
            )
            if retry_after is not None:
                head += b"Retry-After: %s\r\n" % retry_after.encode()
            if req.close:
                head += b"Connection: close\r\n"
            t.write(head + b"\r\n" + body)
        self.last = asyncio.get_running_loop().time()
        self.task = None
        if req.close or self.closing:
            self._close()
        else:
            self._next()

    def _handoff(self) -> None:
        """aiohttp takes the connection and everything read so far; the lane forgets it."""
        t = self.transport
        assert t is not None
        self.server.connections.discard(self)
        self.server.handoffs += 1
        self._stop_idle()  # aiohttp keeps its own keep-alive time
        proto = self.server.aiohttp_factory()
        t.set_protocol(proto)
        proto.connection_made(t)
        if self.buf:
            data, self.buf = bytes(self.buf), bytearray()
            proto.data_received(data)
        if self.paused:
            self.paused = False
            t.resume_reading()
        self.transport = None

    def _close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()
