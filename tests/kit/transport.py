"""Test kit for the data plane: real servers and clients on this host, one adapter per plane.

:class:`Plane` reaches one network plane the way a deployment does: a real server, and followers
built from the target it would hand out (``planes.target_of`` -> ``block_source``/``tx_channel``).
``unix`` is the TCP plane with its Unix-domain socket, which a follower on the same host takes.
Its ``raw_*`` methods speak the plane's wire format by hand, as a stranger who read the source
would, carrying the secret it is given (or none).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeAlias, TypeVar

import grpc
import grpc.aio

from raydex.actors.transport import (
    AUTH_KEY,
    BLOCKS_METHOD,
    TXS_METHOD,
    Backoff,
    BlockHub,
    Frame,
    GrpcBlockSource,
    GrpcDataPlaneServer,
    GrpcTxChannel,
    TcpBlockSource,
    TcpDataPlaneServer,
    TcpTxChannel,
    TxHandler,
    block_source,
    target_of,
    tx_channel,
)
from raydex.actors.transport.tcp_plane import (
    BATCH,
    BLOCK,
    BLOCKS,
    HELLO,
    REFUSED,
    RESULT,
    TXS,
    read_message,
)

T = TypeVar("T")
#: reconnects fast, and gives up on a publisher that never comes back (a test's bound)
FAST = Backoff(initial_s=0.01, max_s=0.1, max_attempts=50)
PLANES = ("grpc", "tcp", "unix")

Server: TypeAlias = GrpcDataPlaneServer | TcpDataPlaneServer
Source: TypeAlias = GrpcBlockSource | TcpBlockSource
Channel: TypeAlias = GrpcTxChannel | TcpTxChannel

#: What a stranger's batch write on gRPC ends with: the call's status, or INTERNAL when the
#: server ended the call (as it opens, before reading) while the write was in flight; grpc aio
#: then reports the failed send locally. ``server.refused`` counts the refusals either way.
GRPC_REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INTERNAL)


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def frame_of(seq: int, size: int = 16) -> bytes:
    return seq.to_bytes(8, "little") * (size // 8)


def publish_range(hub: BlockHub, first: int, last: int, size: int = 16) -> None:
    for seq in range(first, last + 1):
        hub.publish_nowait(seq, frame_of(seq, size))


def published(n: int) -> BlockHub:
    hub = BlockHub()
    publish_range(hub, 1, n)
    return hub


async def take(stream: AsyncIterator[Frame], n: int) -> list[Frame]:
    return [await anext(stream) for _ in range(n)]


def port_of(server: Server) -> int:
    return int(server.address.rpartition(":")[2])


def message(kind: int, body: bytes = b"") -> bytes:
    """One TCP-plane message: ``u32 length | u8 kind | body``."""
    return (1 + len(body)).to_bytes(4, "little") + bytes([kind]) + body


class Plane:
    """One network plane under test: ``grpc``, ``tcp`` or ``unix`` (sockets in ``unix_dir``)."""

    def __init__(self, name: str, unix_dir: str) -> None:
        assert name in PLANES
        self.name = name
        self._unix_dir = unix_dir if name == "unix" else None
        #: followers reach the server through a Unix-domain socket
        self.local = name == "unix"

    def __repr__(self) -> str:
        return self.name

    def server(self, hub: BlockHub, handler: TxHandler | None = None, **kw: Any) -> Server:
        if self.name == "grpc":
            return GrpcDataPlaneServer(hub, handler, **kw)
        return TcpDataPlaneServer(hub, handler, unix_dir=self._unix_dir, **kw)

    @asynccontextmanager
    async def serving(
        self, hub: BlockHub, handler: TxHandler | None = None, **kw: Any
    ) -> AsyncIterator[Server]:
        server = self.server(hub, handler, **kw)
        await server.start()
        try:
            yield server
        finally:
            await server.stop(grace=0)

    def target(self, server: Server) -> str:
        """What the deployment hands followers (``tcp://...?unix=PATH`` on the same host)."""
        plane = "grpc" if self.name == "grpc" else "tcp"
        return target_of(plane, "127.0.0.1", port_of(server), server.unix_path)

    def source(self, server: Server, *, name: str = "", secret: str = "", **kw: Any) -> Source:
        kw.setdefault("backoff", FAST)
        return block_source(self.target(server), name=name, secret=secret, **kw)

    def channel(self, server: Server, *, secret: str = "") -> Channel:
        return tx_channel(self.target(server), secret=secret)

    # -- the wire format by hand ---------------------------------------------------------------

    async def raw_blocks(self, server: Server, secret: str | None) -> int | None:
        """Ask for blocks from seq 1 carrying ``secret`` (None: no credential): the first seq
        sent, or None when refused before any block."""
        if self.name == "grpc":
            async with grpc.aio.insecure_channel(server.address) as ch:
                call = ch.unary_stream(BLOCKS_METHOD)(
                    (1).to_bytes(8, "little"), metadata=_md(secret)
                )
                try:
                    async for reply in call:
                        call.cancel()
                        return int.from_bytes(reply[:8], "little")
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAUTHENTICATED, exc
                    return None
            raise AssertionError("the stream ended without a status")
        first = message(BLOCKS, (1).to_bytes(8, "little") + b"stranger")
        kind, body = await self._raw_tcp(server, secret, first)
        return int.from_bytes(body[:8], "little") if kind == BLOCK else None

    async def raw_batch(self, server: Server, secret: str | None, frame: bytes) -> bytes | None:
        """Submit one batch carrying ``secret``: its result, or None when refused unread."""
        if self.name == "grpc":
            async with grpc.aio.insecure_channel(server.address) as ch:
                call = ch.stream_stream(TXS_METHOD)(metadata=_md(secret))
                try:
                    await call.write((7).to_bytes(8, "little") + frame)
                    reply = await call.read()
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() in GRPC_REFUSED, exc
                    return None
                if reply is grpc.aio.EOF:
                    assert await call.code() in GRPC_REFUSED
                    return None
                call.cancel()
                assert isinstance(reply, bytes) and reply[:8] == (7).to_bytes(8, "little")
                return reply[8:]
        first = message(TXS) + message(BATCH, (7).to_bytes(8, "little") + frame)
        kind, body = await self._raw_tcp(server, secret, first)
        assert kind != RESULT or body[:8] == (7).to_bytes(8, "little")
        return body[8:] if kind == RESULT else None

    async def raw_malformed(self, server: Server) -> None:
        """Open a tx stream with the secret-less server and send what the plane does not
        speak; returns once the server has ended that stream."""
        if self.name == "grpc":
            async with grpc.aio.insecure_channel(server.address) as ch:
                call = ch.stream_stream(TXS_METHOD)()
                await call.write(b"\x01")  # shorter than a batch id
                try:
                    await call.read()
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() != grpc.StatusCode.OK
                    return
                assert await call.code() != grpc.StatusCode.OK
            return
        reader, writer = await self._connect(server)
        writer.write(message(HELLO) + message(TXS) + b"\xff\xff\xff\xff\x01")  # a 4 GB message
        assert await reader.read() == b""  # closed by the server
        writer.close()

    async def _raw_tcp(self, server: Server, secret: str | None, first: bytes) -> tuple[int, bytes]:
        reader, writer = await self._connect(server)
        try:
            writer.write(message(HELLO, (secret or "").encode()) + first)
            kind, body = await read_message(reader)
            if kind == REFUSED:
                assert await reader.read() == b""  # then closed
            return kind, body
        finally:
            writer.close()

    async def _connect(self, server: Server) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.local:
            assert server.unix_path is not None
            return await asyncio.open_unix_connection(server.unix_path)
        return await asyncio.open_connection("127.0.0.1", port_of(server))


def _md(secret: str | None) -> tuple[tuple[str, str], ...] | None:
    return None if secret is None else ((AUTH_KEY, secret),)
