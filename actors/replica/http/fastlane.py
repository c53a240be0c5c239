"""The fast lane: ``sendTx``/``sendTxBatch`` over keep-alive HTTP/1.1 without aiohttp's
per-request machinery, in front of the same app; and the door every connection passes first.

::

    client ──TCP──► FastLane (asyncio.Protocol, one per connection)
                      │ admitted? (gate.py: per-IP and global caps; else 429/503 and close)
                      │ a whole request head within ``http_head_timeout_s`` (else 408, close)
                      │ POST /api/v1/sendTx | /api/v1/sendTxBatch, HTTP/1.1, Content-Length,
                      │ a urlencoded or JSON body:  the app's ``fast_send`` ─► response bytes
                      └ anything else, with its head complete (or malformed: a bare LF, over
                        ``MAX_HEAD``): aiohttp's RequestHandler takes the connection, with every
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
  ``MAX_BUFFER``), every one of them also after the client half-closed its side (the connection
  closes once no complete request is left); one idle for ``KEEPALIVE_S`` between requests is
  closed; a client that goes away mid-request does not cancel it (the answer is dropped).
- A head the lane cannot serve goes to aiohttp only once it is complete or known to be malformed:
  a bare LF line ending or a head over ``MAX_HEAD`` (8,190 bytes, aiohttp's line limit) is
  answered by aiohttp's parser, in the API's JSON (``errors.json_error_protocols``: HTTP 400,
  20001), the same answer whichever side of the handoff the request lands on.
- ``serve=False`` (``api.fast_lane: false``) keeps the door and hands every complete head over.
- ``hooks.request_span`` wraps a request carrying ``traceparent``, as tracing does on aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any, Protocol, cast

from .gate import OpenConnections

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

#: longest request head (request line and headers) the lane reads; longer goes to aiohttp (which
#: answers 400: its line limit is the same)
MAX_HEAD = 8190
#: bytes buffered (pipelined requests) before reading pauses
MAX_BUFFER = 1 << 20
#: seconds a connection may sit idle between requests before it is closed (the lane's, and the
#: keep-alive time the replica gives aiohttp)
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
#: a control character (a header value must have none: a tab only around it, stripped)
_CTL = re.compile(rb"[\x00-\x1f\x7f]")
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


def _bare_lf(buf: bytearray) -> bool:
    """A line of the (incomplete) head in ``buf`` ends in LF without CR."""
    at = buf.find(b"\n")
    while at >= 0:
        if at == 0 or buf[at - 1] != 0x0D:
            return True
        at = buf.find(b"\n", at + 1)
    return False


def head_complete(buf: bytearray) -> bool:
    """``buf`` starts with a whole request head, or with one aiohttp refuses outright (a bare
    LF, over ``MAX_HEAD``): either way nothing more needs to arrive before it can be handed on."""
    if buf.find(b"\r\n\r\n", 0, MAX_HEAD + 4) >= 0:
        return True
    return len(buf) > MAX_HEAD + 3 or _bare_lf(buf)


def parse(buf: bytearray, max_body: int) -> _Request | object | None:
    """The first request in ``buf`` (consumed) if the lane serves it, ``HANDOFF`` if not (``buf``
    untouched), None if more bytes are needed to tell: a head is handed over only once it is
    complete, or malformed beyond repair (:func:`head_complete`)."""
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
    if end < 0:
        return HANDOFF if head_complete(buf) else None
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
        if _CTL.search(value) is not None:
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
    every connection starts in the lane; ``aiohttp_factory`` (the runner's ``web.Server``, or
    ``errors.json_error_protocols`` of it) makes the protocol a handed-off connection continues
    with. ``gate``: the connection caps and the head deadline (``gate.py``; default: its
    defaults). ``serve=False``: the door only, every complete head goes to aiohttp."""

    def __init__(
        self,
        aiohttp_factory: Callable[[], asyncio.Protocol],
        send: FastSend,
        max_body: int,
        request_span: RequestSpan | None = None,
        *,
        gate: OpenConnections | None = None,
        serve: bool = True,
    ) -> None:
        self.aiohttp_factory = aiohttp_factory
        self.send = send
        self.max_body = max_body
        self.request_span = request_span
        self.gate = gate if gate is not None else OpenConnections()
        self.head_timeout_s = self.gate.caps.head_timeout_s
        self.serve = serve
        #: connections in the lane now (a handed-off one is aiohttp's, counted by ``gate``)
        self.connections: set[FastLane] = set()
        #: connections still waiting for their first request head, oldest first: the ones
        #: closed to make room at the global cap (``gate.py``)
        self.first_heads: dict[FastLane, None] = {}
        self.date = _Date()
        #: requests the lane answered, and connections it handed to aiohttp
        self.served = 0
        self.handoffs = 0

    def __call__(self) -> FastLane:
        return FastLane(self)

    def make_room(self) -> bool:
        """At the global cap: close the connection that has waited longest for its first
        request head (counted ``evicted``, answered 408) and release its place; False when no
        connection is waiting for one."""
        if not self.first_heads:
            return False
        oldest = next(iter(self.first_heads))
        oldest.evict()
        return True

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
        #: the client half-closed: answer what is complete, then close
        self.eof = False
        #: counted by the gate (released when the connection ends, or by the handoff's shim)
        self.admitted = False
        #: a request was answered here (before: the first head is awaited, under its deadline)
        self.answered = False
        self.last = 0.0  # loop time of the last answer out (or the connection's start)
        #: loop time the lane began waiting for the head in ``buf`` (its deadline counts from it)
        self.head_at = 0.0
        self.timer: asyncio.TimerHandle | None = None

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's are not subclasses of ``asyncio.Transport``)
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        server = self.server
        gate = server.gate
        reason = gate.admit(self.peer)
        if reason == "total" and server.make_room():
            reason = gate.admit(self.peer)
        if reason is not None:
            self.closing = True
            transport.write(gate.refuse(reason, self.peer))
            transport.close()
            return
        self.admitted = True
        server.connections.add(self)
        server.first_heads[self] = None
        loop = asyncio.get_running_loop()
        self.last = self.head_at = loop.time()
        self.timer = loop.call_later(self.server.head_timeout_s, self._check_time)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        if not self.buf and self.task is None:
            self.head_at = asyncio.get_running_loop().time()  # a new head starts arriving
        self.buf += data
        if len(self.buf) > MAX_BUFFER and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        if self.task is None:
            self._next()

    def eof_received(self) -> bool | None:
        self.eof = True
        if self.task is None:
            self._next()  # what is complete is still answered; then the connection closes
        return True  # half-closed: the answers still go out

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        self.server.first_heads.pop(self, None)
        self._stop_timer()
        if self.admitted:
            self.admitted = False
            self.server.gate.release(self.peer)

    def evict(self) -> None:
        """Closed to make room at the global cap (``FastLaneServer.make_room``): its place is
        released now, not when the close completes."""
        self.server.first_heads.pop(self, None)
        answer = self.server.gate.refuse("evicted", self.peer)
        if self.admitted:
            self.admitted = False
            self.server.gate.release(self.peer)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)
        self._close()

    def _check_time(self) -> None:
        """The connection's one timer: a head in progress (or the first one awaited) past
        ``head_timeout_s`` since the lane began waiting for it is answered 408 and closed; an
        idle connection between requests is closed after ``KEEPALIVE_S``; a request being
        served is never timed here (the app's deadlines answer it)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.task is not None:
            due = now + self.server.head_timeout_s
        elif self.buf or not self.answered:
            due = self.head_at + self.server.head_timeout_s
            if now >= due:
                self.timer = None
                answer = self.server.gate.refuse("head_timeout", self.peer)
                if self.transport is not None and not self.transport.is_closing():
                    self.transport.write(answer)
                self._close()
                return
        else:
            due = self.last + KEEPALIVE_S
            if now >= due:
                self.timer = None
                self._close()
                return
        self.timer = loop.call_later(max(due - now, 0.05), self._check_time)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    # ---- requests

    def _next(self) -> None:
        """Serve the next complete request in the buffer, hand the connection off, or wait
        (after the client's half-close: close when nothing complete is left)."""
        if self.closing:
            return
        server = self.server
        if server.serve:
            req = parse(self.buf, server.max_body)
        else:
            req = HANDOFF if head_complete(self.buf) else None
        if req is None:
            if self.eof:
                self._close()
            elif self.paused and self.transport is not None:
                self.transport.resume_reading()
                self.paused = False
            return
        server.first_heads.pop(self, None)  # a whole head came: never evicted for room
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
        self.last = self.head_at = asyncio.get_running_loop().time()
        self.answered = True
        self.task = None
        if req.close:
            self._close()
        else:
            self._next()

    def _handoff(self) -> None:
        """aiohttp takes the connection and everything read so far; the lane forgets it (the
        gate's count goes with it, released when the connection ends)."""
        t = self.transport
        assert t is not None
        server = self.server
        server.connections.discard(self)
        server.handoffs += 1
        self._stop_timer()  # aiohttp keeps its own keep-alive time
        proto = server.aiohttp_factory()
        if self.admitted:
            self.admitted = False
            proto = _Handed(proto, server.gate, self.peer)
        t.set_protocol(proto)
        proto.connection_made(t)
        if self.buf:
            data, self.buf = bytes(self.buf), bytearray()
            proto.data_received(data)
        if self.eof:
            proto.eof_received()
        if self.paused:
            self.paused = False
            t.resume_reading()
        self.transport = None

    def _close(self) -> None:
        self.closing = True
        self._stop_timer()
        if self.transport is not None:
            self.transport.close()


class _Handed(asyncio.Protocol):
    """aiohttp's protocol of a handed-off connection, passed every call; releases the gate's
    count of the connection when it ends (one Python call more per read)."""

    __slots__ = ("gate", "inner", "peer")

    def __init__(self, inner: asyncio.Protocol, gate: OpenConnections, peer: str | None) -> None:
        self.inner = inner
        self.gate = gate
        self.peer = peer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gate.release(self.peer)
        self.inner.connection_lost(exc)
