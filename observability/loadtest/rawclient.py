"""The load generator's HTTP/1.1 and WebSocket clients: pre-encoded bytes over asyncio protocols.

The generator runs on the machine it measures, so what it spends per tx is charged to the
deployment's CPU ledger like everyone else's. aiohttp's client builds a request object, a header
multidict and a response object per request and wakes a coroutine per WebSocket message; here a
request is one ``transport.write`` of bytes built from the plan's pre-encoded body, and an answer
is parsed in ``data_received`` and handed over by resolving one future (REST) or calling one
function (WebSocket), with no task per message.

::

    HttpConnection   keep-alive, pipelined: requests are written back to back, answers come back
                     in request order (HTTP/1.1) and resolve the callers' futures in that order
                     to (status, body), or with ``post_answer`` to an ``Answer`` that also says
                     whether it carried ``Retry-After``; bodies by Content-Length (what aiohttp's
                     server sends for every answer raydex gives); anything else is a
                     ProtocolError that fails the connection
    WsConnection     RFC 6455 client: the handshake (its Sec-WebSocket-Accept checked), masked
                     frames with a fresh random key per frame, text/binary messages (fragmented
                     ones reassembled) to ``on_message`` from ``data_received``, pings answered,
                     a close frame answered and the connection closed

A lost connection fails every answer still owed with ``ConnectionError``; it is not reopened
here (the caller decides: :func:`reopen`). With ``answer_timeout_s`` an HTTP connection fails an
answer owed that long with ``TimeoutError`` (one timer per connection, not one per request as
``asyncio.wait_for`` would arm); the connection stays usable, and the late answer, when it comes,
is matched to its request and dropped. Loopback and trusted test servers only: no TLS, no
proxies, no redirects, no compression.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast

__all__ = ["FORM", "Answer", "HttpConnection", "ProtocolError", "WsConnection"]

FORM = b"application/x-www-form-urlencoded"
_END = b"\r\n\r\n"
_MAX_HEAD = 64 << 10
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class ProtocolError(ConnectionError):
    """The server said something this client does not speak (or nothing it can parse)."""


class Answer(NamedTuple):
    """An HTTP answer with the one header the loadtest reads: ``Retry-After`` (None: absent)."""

    status: int
    body: bytes
    retry_after: bytes | None


def _head_value(head: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case, with the colon) in a lower-cased head."""
    i = head.find(b"\r\n" + name)
    if i < 0:
        return None
    i += 2 + len(name)
    j = head.find(b"\r\n", i)
    return head[i : j if j >= 0 else len(head)].strip()


def _take_head(buf: bytearray, what: str) -> bytes | None:
    """The head of the HTTP answer at the front of ``buf`` (lower case, without its blank line),
    taken off the buffer; None while it is incomplete. ProtocolError past 64 KiB."""
    end = buf.find(_END)
    if end < 0:
        if len(buf) > _MAX_HEAD:
            raise ProtocolError(f"{what} head is over 64 KiB")
        return None
    head = bytes(buf[:end]).lower()
    del buf[: end + 4]
    return head


class HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection (see the module docstring)."""

    def __init__(self, host: str, port: int, answer_timeout_s: float | None = None) -> None:
        self._host = f"{host}:{port}".encode()
        self._transport: asyncio.Transport | None = None
        #: the callers' futures in request order, each with the loop time it was sent and
        #: whether it wants an ``Answer`` (with ``Retry-After``) rather than (status, body)
        self._owed: deque[tuple[asyncio.Future[Any], float, bool]] = deque()
        self._timeout = answer_timeout_s
        self._watch: asyncio.TimerHandle | None = None
        self._buf = bytearray()
        self._status = 0
        self._retry_after: bytes | None = None
        self._need = -1  # body bytes of the answer being read; -1: its head is being read
        #: why the connection is gone (None while it is usable)
        self.lost: BaseException | None = None

    @classmethod
    async def open(
        cls, host: str, port: int, timeout_s: float = 10.0, answer_timeout_s: float | None = None
    ) -> HttpConnection:
        """Connect within ``timeout_s``; ``answer_timeout_s``: see the module docstring."""
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: cls(host, port, answer_timeout_s), host, port),
            timeout_s,
        )
        return conn

    # ---- requests

    def post(
        self, path: str, body: bytes, content_type: bytes = FORM,
        headers: Mapping[str, str] | None = None,
    ) -> asyncio.Future[tuple[int, bytes]]:  # fmt: skip
        """Send ``POST path`` now; the future resolves to (status, body) when it is answered."""
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode() if headers else b""
        return self._send(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s"
            % (path.encode(), self._host, content_type, len(body), extra, body)
        )

    def post_answer(
        self, path: str, body: bytes, content_type: bytes = FORM
    ) -> asyncio.Future[Answer]:
        """``post`` resolving to an :class:`Answer` (status, body, ``Retry-After``)."""
        return self._send(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (path.encode(), self._host, content_type, len(body), body),
            full=True,
        )

    def get(self, target: str) -> asyncio.Future[tuple[int, bytes]]:
        """Send ``GET target`` (path and query) now; resolves to (status, body)."""
        return self._send(b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), self._host))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _send(self, data: bytes, full: bool = False) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        t = self._transport
        if self.lost is not None or t is None or t.is_closing():
            fut.set_exception(ConnectionError(f"connection lost: {self.lost!r}"))
            return fut
        now = loop.time()
        self._owed.append((fut, now, full))
        if self._timeout is not None and self._watch is None:
            self._watch = loop.call_at(now + self._timeout, self._expire)
        t.write(data)
        return fut

    def _expire(self) -> None:
        """Fail the answers owed ``answer_timeout_s`` or longer (oldest first: the deque is in
        send order); look again when the oldest still owed is due."""
        self._watch = None
        assert self._timeout is not None
        now = asyncio.get_running_loop().time()
        for fut, sent, _ in self._owed:
            if sent + self._timeout > now:
                self._watch = asyncio.get_running_loop().call_at(sent + self._timeout, self._expire)
                return
            if not fut.done():
                fut.set_exception(TimeoutError(f"no answer within {self._timeout:g} s"))

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buf += data
        try:
            while self._answer():
                pass
        except (ProtocolError, ValueError) as exc:
            self._fail(ProtocolError(f"unparsable answer: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("closed by the server"))

    def _fail(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc
        while self._owed:
            fut, _, _ = self._owed.popleft()
            if not fut.done():
                fut.set_exception(ConnectionError(str(exc)))
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _answer(self) -> bool:
        """Parse one answer off the buffer if it is all there; True if one was."""
        buf = self._buf
        if self._need < 0:
            head = _take_head(buf, "an answer's")
            if head is None:
                return False
            if not head.startswith(b"http/1.") or len(head) < 12:
                raise ProtocolError(f"not an HTTP/1.x answer: {head[:40]!r}")
            self._status = int(head[9:12])
            self._retry_after = _head_value(head, b"retry-after:") if self._status >= 400 else None
            length = _head_value(head, b"content-length:")
            if length is None:
                raise ProtocolError("an answer without Content-Length")
            self._need = int(length)
        if len(buf) < self._need:
            return False
        body = bytes(buf[: self._need])
        del buf[: self._need]
        self._need = -1
        if not self._owed:
            raise ProtocolError("an answer to no request")
        fut, _, full = self._owed.popleft()
        if not fut.done():  # failed already: no answer within answer_timeout_s
            answer = Answer(self._status, body, self._retry_after)
            fut.set_result(answer if full else (self._status, body))
        return True


class WsConnection(asyncio.Protocol):
    """One WebSocket client connection (see the module docstring). ``on_message`` gets every
    text or binary message's payload bytes, in order, from the event loop's read callback."""

    def __init__(
        self, host: str, port: int, path: str, on_message: Callable[[bytes], None]
    ) -> None:
        self._request = (
            b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self._key = base64.b64encode(os.urandom(16))
        self._request %= (path.encode(), host.encode(), port, self._key)
        self.on_message = on_message
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._parts: list[bytes] = []
        self._open = False
        loop = asyncio.get_running_loop()
        #: resolves when the handshake is done (or fails with why not)
        self.ready: asyncio.Future[None] = loop.create_future()
        #: resolves when the connection is gone (its value: why, None for a clean close)
        self.closed: asyncio.Future[BaseException | None] = loop.create_future()

    @classmethod
    async def open(
        cls, host: str, port: int, path: str, on_message: Callable[[bytes], None],
        timeout_s: float = 10.0,
    ) -> WsConnection:  # fmt: skip
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: cls(host, port, path, on_message), host, port),
            timeout_s,
        )
        try:
            await asyncio.wait_for(asyncio.shield(conn.ready), timeout_s)
        except BaseException:
            conn.abort()
            raise
        return conn

    @property
    def is_open(self) -> bool:
        return self._open and not self.closed.done()

    def send_text(self, data: bytes) -> None:
        """One text message (``data`` is UTF-8); dropped silently once the connection is gone
        (``closed`` says so)."""
        self._frame(0x1, data)

    def close(self) -> None:
        """A close frame (1000), then the connection is closed."""
        if self._open and self._transport is not None and not self._transport.is_closing():
            self._frame(0x8, (1000).to_bytes(2, "big"))
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _frame(self, opcode: int, data: bytes) -> None:
        t = self._transport
        if t is None or t.is_closing():
            return
        n = len(data)
        if n < 126:
            head = bytes((0x80 | opcode, 0x80 | n))
        elif n < 65536:
            head = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
        else:
            head = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
        key = os.urandom(4)  # RFC 6455 5.3: a fresh, unpredictable key per frame
        stream = (key * (n // 4 + 1))[:n]
        masked = (int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")).to_bytes(
            n, "little"
        )
        t.write(head + key + masked)

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport = transport
        transport.write(self._request)

    def connection_lost(self, exc: Exception | None) -> None:
        self._open = False
        if not self.ready.done():
            self.ready.set_exception(exc or ConnectionResetError("closed before the handshake"))
        if not self.closed.done():
            self.closed.set_result(exc)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        try:
            if not self._open and not self._handshake():
                return
            self._messages()
        except ProtocolError as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            if not self.closed.done():
                self.closed.set_result(exc)
            self.abort()

    def _handshake(self) -> bool:
        head = _take_head(self._buf, "the handshake answer's")
        if head is None:
            return False
        accept = base64.b64encode(hashlib.sha1(self._key + _WS_GUID).digest()).lower()
        if not head.startswith(b"http/1.1 101"):
            status = head.split(b"\r\n", 1)[0]
            raise ProtocolError(f"no WebSocket upgrade: {status!r}")
        if _head_value(head, b"sec-websocket-accept:") != accept:
            raise ProtocolError("the server's Sec-WebSocket-Accept does not match the key")
        self._open = True
        self.ready.set_result(None)
        return True

    def _messages(self) -> None:
        buf = self._buf
        while len(buf) >= 2:
            b0, b1 = buf[0], buf[1]
            if b1 & 0x80:
                raise ProtocolError("a masked frame from the server")
            if b0 & 0x70:
                raise ProtocolError("a frame with RSV bits (no extension was negotiated)")
            n, at = b1 & 0x7F, 2
            if n == 126:
                if len(buf) < 4:
                    return
                n, at = int.from_bytes(buf[2:4], "big"), 4
            elif n == 127:
                if len(buf) < 10:
                    return
                n, at = int.from_bytes(buf[2:10], "big"), 10
            if len(buf) < at + n:
                return
            payload = bytes(buf[at : at + n])
            del buf[: at + n]
            opcode, fin = b0 & 0x0F, b0 & 0x80
            if opcode in (0x0, 0x1, 0x2):  # continuation, text, binary
                if not fin:
                    self._parts.append(payload)
                    continue
                if self._parts:
                    self._parts.append(payload)
                    payload = b"".join(self._parts)
                    self._parts.clear()
                self.on_message(payload)
            elif opcode == 0x9:  # ping
                self._frame(0xA, payload)
            elif opcode == 0x8:  # close: answer it and go
                self._frame(0x8, payload[:2])
                self._open = False
                if self._transport is not None:
                    self._transport.close()
                return
            elif opcode != 0xA:
                raise ProtocolError(f"unknown opcode {opcode}")
