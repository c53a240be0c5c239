"""The gRPC data plane: ``grpc.aio`` generic handlers moving raw bytes, no protobuf.

One server per publisher (the sequencer) hosts two methods of ``raydex.DataPlane``::

    Blocks  unary -> stream   request  u64 from_seq | utf-8 subscriber name
                              response u64 seq | frame            (one message per block)
    Txs     stream <-> stream request  u64 batch id | tx batch frame
                              response u64 batch id | result frame

Integers are little-endian. (De)serializers are identity: a message is the ``bytes`` above, and
the frame inside it is whatever the codecs produced (opaque here).

Block stream status codes: ``OUT_OF_RANGE`` means "resync from a snapshot" (trailing metadata
``raydex-floor`` carries the hub's floor); ``RESOURCE_EXHAUSTED`` means the subscriber was cut off
for falling behind; anything else (``UNAVAILABLE``, ``CANCELLED``, a clean end when the server
stops) is a broken stream. :class:`GrpcBlockSource` reconnects after a broken stream or a cut-off
with bounded backoff, resumes from the last seq it yielded + 1 (the consumer applies a frame before
asking for the next, so that is the last applied seq), drops duplicates by seq, and raises
:class:`ResyncRequired` on ``OUT_OF_RANGE`` or on a gap.

Txs: the server runs each batch through the handler as its own task, so several batches from one
replica may be in flight and their results may come back out of order; the client matches them
by batch id. "At most one batch in flight" is the caller's policy; the server bounds it anyway:
at most ``max_inflight_per_stream`` batches per stream and ``max_inflight`` over all streams run
at once, and while a stream is at its bound the server stops reading it (HTTP/2 flow control then
holds the sender back: nothing is dropped). A request over ``max_request_bytes`` fails its stream
with ``RESOURCE_EXHAUSTED``. A broken tx stream fails every pending ``submit`` with
:class:`TxStreamBroken`; nothing is resent; the next ``submit`` opens a new stream.

Membership: only deployment members may open a stream. With a ``secret`` (generated per
deployment by ``raydex deploy`` and handed to the actors through Ray, never written to a file),
every call must carry it in the ``raydex-auth`` metadata; it is compared in constant time by a
server interceptor, on the call's metadata alone, and a call without it ends with
``UNAUTHENTICATED`` before its request message is read (counted in ``refused``). Before that,
gRPC's own bounds (``PreAuth``'s figures): ``hello_timeout_s`` to complete the HTTP/2 handshake,
request metadata of at most 4 KiB (8 KiB hard), at most ``max_connections`` connections in all
(the plane cannot tell a member's before its first call) and 100 streams per connection, and a
connection with no call for 60 s is closed. Without a secret the server listens on loopback
only (tests, embedded runs): ``start`` refuses any other address. The secret authenticates, it
does not encrypt: on an untrusted network between hosts, put the data plane on a private network
or VPN (or move it to mTLS, which also encrypts), as for Ray's own token-authenticated control
plane.

The order, bound, failure and membership rules above are ``core.py``'s, shared with the TCP plane.

Cost: one copy of each frame per hop to prepend the 8-byte header; the rest is grpc's.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NamedTuple
from urllib.parse import unquote

import grpc
import grpc.aio

from .core import (
    DEFAULT_BACKOFF,
    MAX_INFLIGHT_PER_STREAM,
    NOT_A_MEMBER,
    Backoff,
    BlockHub,
    EndReason,
    Frame,
    Link,
    NotAMember,
    PendingBatches,
    PreAuth,
    ResyncRequired,
    Subscription,
    TxBounds,
    TxHandler,
    accept_seq,
    admits,
    check_listen,
)
from .tcp_plane import is_local_host

SERVICE = "raydex.DataPlane"
BLOCKS_METHOD = f"/{SERVICE}/Blocks"
TXS_METHOD = f"/{SERVICE}/Txs"
FLOOR_KEY = "raydex-floor"
#: call metadata that carries the deployment's data-plane secret
AUTH_KEY = "raydex-auth"

_U64 = struct.Struct("<Q")
_MAX_MESSAGE = 64 * 1024 * 1024

#: Blocks are large and frequent: lift the 4 MB default and keep dead peers detectable.
DEFAULT_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)
#: Client only: grpc's own reconnect backoff starts at 1 s; ours (``Backoff``) drives retries.
CLIENT_OPTIONS: tuple[tuple[str, Any], ...] = (
    *DEFAULT_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 20),
    ("grpc.min_reconnect_backoff_ms", 20),
    ("grpc.max_reconnect_backoff_ms", 1_000),
)
#: Server only: never share a port by accident (tests restart servers on the same port).
SERVER_OPTIONS: tuple[tuple[str, Any], ...] = (*DEFAULT_OPTIONS, ("grpc.so_reuseport", 0))


class GrpcDataPlaneServer:
    """Serves a :class:`BlockHub` (``Blocks``) and a tx handler (``Txs``) on ``host:port``.

    ``port=0`` picks a free port; :meth:`start` returns the bound one. :meth:`stop` ends every
    open block stream (clients see a clean end and reconnect) and cancels the rest after ``grace``.
    ``secret`` and the bounds: see the module docstring. ``max_inflight_per_stream`` above 1 lets
    a member pipeline; ``max_inflight`` caps the work all members can queue on the handler at once
    (a batch beyond it waits, unread). ``max_request_bytes`` caps one tx batch frame.
    """

    def __init__(
        self,
        hub: BlockHub,
        tx_handler: TxHandler | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        secret: str = "",
        max_inflight_per_stream: int = MAX_INFLIGHT_PER_STREAM,
        max_inflight: int = 64,
        max_request_bytes: int = 8 << 20,
        options: Sequence[tuple[str, Any]] = SERVER_OPTIONS,
        preauth: PreAuth | None = None,
        max_connections: int = 1024,
    ) -> None:
        self._bounds = TxBounds(max_inflight_per_stream, max_inflight, max_request_bytes)
        self._hub = hub
        self._tx_handler = tx_handler
        self._host = host
        self._port = port
        self._secret = secret.encode()
        #: the pre-auth bounds (gRPC enforces them as its options; ``refused`` counts by reason)
        self.preauth = preauth if preauth is not None else PreAuth()
        bounds = (
            ("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.server_handshake_timeout_ms", int(self.preauth.hello_timeout_s * 1000)),
            ("grpc.max_allowed_incoming_connections", max_connections),
            ("grpc.max_metadata_size", 4096),
            ("grpc.absolute_max_metadata_size", 8192),
            ("grpc.max_concurrent_streams", 100),
            ("grpc.max_connection_idle_ms", 60_000),
        )
        ours = {key for key, _ in bounds}
        self._options = (*(o for o in options if o[0] not in ours), *bounds)
        self._server: grpc.aio.Server | None = None
        self._subs: set[Subscription] = set()
        #: calls ended UNAUTHENTICATED (no or a wrong secret)
        self.refused = 0
        #: the TCP plane's Unix-domain socket; gRPC serves none
        self.unix_path: str | None = None

    @property
    def address(self) -> str:
        return f"{self._host}:{self._port}"

    async def start(self) -> int:
        check_listen(self._host, self._secret)
        server = grpc.aio.server(options=self._options, interceptors=(_Members(self),))
        handlers: dict[str, grpc.RpcMethodHandler] = {
            "Blocks": grpc.unary_stream_rpc_method_handler(self._blocks),
        }
        if self._tx_handler is not None:
            handlers["Txs"] = grpc.stream_stream_rpc_method_handler(self._txs)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        address = f"{self._host}:{self._port}"
        try:
            self._port = server.add_insecure_port(address)
        except RuntimeError as exc:
            # A server that never started still owns core resources: shut it down here, on this
            # loop, rather than leave it to a finalizer that runs on whatever loop comes next.
            await server.stop(None)
            raise OSError(f"data plane cannot bind {address}: {exc}") from exc
        await server.start()
        self._server = server
        return self._port

    async def stop(self, grace: float = 0.5) -> None:
        for sub in tuple(self._subs):
            sub.close()
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None

    def member(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> bool:
        """A call with ``metadata`` carries the secret (``admits``); else it is counted."""
        if not self._secret:
            return True
        given = b""
        for key, value in metadata or ():
            if key == AUTH_KEY:
                given = value.encode() if isinstance(value, str) else bytes(value)
                break
        if admits(self._secret, given):
            return True
        self.refused += 1
        self.preauth.refuse("bad_secret", "a gRPC caller")
        return False

    async def _blocks(
        self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]
    ) -> AsyncIterator[bytes]:
        if len(request) < _U64.size:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request is u64 from_seq + name")
        (from_seq,) = _U64.unpack_from(request)
        name = request[_U64.size :].decode("utf-8", "replace")
        try:
            sub = self._hub.subscribe(from_seq, name)
        except ResyncRequired as exc:
            context.set_trailing_metadata(((FLOOR_KEY, str(exc.floor)),))
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, str(exc))
        self._subs.add(sub)
        pack = _U64.pack
        try:
            async for seq, frame in sub:
                yield pack(seq) + frame
        finally:
            sub.close()
            self._subs.discard(sub)
        if sub.end_reason is EndReason.SLOW:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, "subscriber fell behind its queue; reconnect"
            )

    async def _txs(
        self,
        requests: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext[bytes, bytes],
    ) -> AsyncIterator[bytes]:
        assert self._tx_handler is not None
        # before the reader task: its batch tasks inherit it (and whether the peer is remote)
        batches = self._bounds.stream(_remote_peer(context.peer()))
        handler = self._tx_handler
        out: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        stream = aiter(requests)

        async def next_request() -> bytes | None:
            request = await anext(stream, None)
            if request is not None and len(request) < _U64.size:
                raise ValueError("a Txs request is u64 batch id + frame")
            return request

        async def serve(batch_id: bytes, frame: bytes) -> None:
            try:
                out.put_nowait(batch_id + await handler(frame))
            except Exception as exc:  # re-raised by the writer below: it fails the stream
                out.put_nowait(exc)

        async def read_all() -> None:
            try:
                while (request := await batches.admit(next_request)) is not None:
                    batches.start(serve(request[:8], request[8:]))
                await batches.drain()
            except Exception as exc:  # re-raised by the writer below: it fails the stream
                out.put_nowait(exc)
            out.put_nowait(None)

        reader = asyncio.create_task(read_all())
        try:
            while (item := await out.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            reader.cancel()
            batches.cancel()


def _remote_peer(peer: str | None) -> bool:
    """gRPC's peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``, ``unix:...``) names another
    host: an address this machine does not have."""
    if not peer or peer.startswith("unix"):
        return False
    _, _, address = unquote(peer).partition(":")
    host = address.rpartition(":")[0].strip("[]")
    return bool(host) and not is_local_host(host)


async def _refuse(
    requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]
) -> None:
    """Every call without the secret: ended UNAUTHENTICATED, its request never read."""
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, NOT_A_MEMBER)


#: a streaming handler, so gRPC reads no request message for it (a unary one would read the
#: whole request, up to ``max_receive_message_length``, before the handler ran)
_REFUSE = grpc.stream_stream_rpc_method_handler(_refuse)


class _Members(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc.aio is untyped here
    """Admits a call on its metadata alone (``GrpcDataPlaneServer.member``), before gRPC reads
    its request message: a stranger's call is handed to ``_REFUSE`` instead."""

    def __init__(self, server: GrpcDataPlaneServer) -> None:
        self.server = server

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        if self.server.member(handler_call_details.invocation_metadata):  # type: ignore[attr-defined]
            return await continuation(handler_call_details)
        return _REFUSE


class GrpcBlockSource:
    """Replica side of ``Blocks``: implements :class:`BlockSource` (see module docstring).

    ``reconnects`` counts streams reopened, ``duplicates`` frames dropped by seq.
    """

    def __init__(
        self,
        target: str,
        *,
        name: str = "",
        secret: str = "",
        backoff: Backoff = DEFAULT_BACKOFF,
        options: Sequence[tuple[str, Any]] = CLIENT_OPTIONS,
    ) -> None:
        self._target = target
        self._name = name.encode()
        self._metadata = _auth_metadata(secret)
        self._backoff = backoff
        self._options = tuple(options)
        self._channel: grpc.aio.Channel | None = None
        self.reconnects = 0
        #: streams through a Unix-domain socket (the TCP plane's); gRPC is always network
        self.local = False
        self.duplicates = 0
        #: whether the stream reaches the publisher: up from its channel being ready or a frame
        self.link = Link()

    def subscribe(self, from_seq: int) -> AsyncIterator[Frame]:
        return self._stream(from_seq)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def retarget(self, target: str, unix_path: str | None = None) -> None:
        """Follow another publisher (a sequencer that took over) from the next reconnect on:
        the open stream is ended now, and the next one opens at ``target`` from the seq after
        the last frame yielded (``unix_path`` is the TCP plane's; ignored)."""
        self._target = target
        await self.close()

    def _open(self, from_seq: int) -> grpc.aio.UnaryStreamCall[bytes, bytes]:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self._target, options=self._options)
        method = self._channel.unary_stream(BLOCKS_METHOD)
        call = method(_U64.pack(from_seq) + self._name, metadata=self._metadata)
        return call  # type: ignore[no-any-return]

    async def _stream(self, from_seq: int) -> AsyncIterator[Frame]:
        next_seq = from_seq
        attempt = 0
        unpack = _U64.unpack_from
        while True:
            call = self._open(next_seq)
            cause: object = "stream ended"
            try:
                async for message in call:
                    self.link.opened()
                    (seq,) = unpack(message)
                    if not accept_seq(seq, next_seq):
                        self.duplicates += 1
                        continue
                    attempt = 0
                    next_seq = seq + 1
                    yield seq, message[_U64.size :]
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.OUT_OF_RANGE:
                    raise ResyncRequired(next_seq, _floor_of(exc)) from None
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    raise NotAMember(f"{self._target} refused us: {exc.details()}") from None
                cause = exc.code()
            finally:
                call.cancel()
            self.link.failed(cause)
            await self._backoff.wait(attempt, cause)
            attempt += 1
            self.reconnects += 1


def _auth_metadata(secret: str) -> tuple[tuple[str, str], ...] | None:
    return ((AUTH_KEY, secret),) if secret else None


def _floor_of(exc: grpc.aio.AioRpcError) -> int:
    for key, value in exc.trailing_metadata() or ():
        if key == FLOOR_KEY:
            return int(value)
    return -1


class GrpcTxChannel:
    """Replica side of ``Txs``: implements :class:`TxChannel` (see module docstring)."""

    #: batches sent one after another execute in that order (one stream; the sequencer starts
    #: its batches in arrival order)
    ordered = True

    def __init__(
        self,
        target: str,
        *,
        secret: str = "",
        options: Sequence[tuple[str, Any]] = CLIENT_OPTIONS,
    ) -> None:
        self._target = target
        self.local = False  # as GrpcBlockSource.local
        self._metadata = _auth_metadata(secret)
        self._options = tuple(options)
        self._channel: grpc.aio.Channel | None = None
        self._stream: _TxStream | None = None
        self._readers: set[asyncio.Task[None]] = set()
        self._next_id = 0
        self._write_lock = asyncio.Lock()

    async def submit(self, frame: bytes) -> bytes:
        async with self._write_lock:
            stream = self._ensure_stream()
            self._next_id += 1
            batch_id = self._next_id
            future = stream.pending.add(batch_id)
            try:
                await stream.call.write(_U64.pack(batch_id) + frame)
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
                # the server may have ended the call as it opened (a stranger: refused on its
                # metadata before any message is read) while this write was in flight
                raise stream.pending.unsent(batch_id, await _ended_why(stream.call)) from exc
        return await future

    async def close(self) -> None:
        if self._stream is not None:
            self._stream.call.cancel()
            self._stream = None
        await asyncio.gather(*self._readers, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def retarget(self, target: str, unix_path: str | None = None) -> None:
        """Send to another publisher from now on; batches in flight fail (``TxStreamBroken``:
        their outcome is learnt from the blocks)."""
        self._target = target
        await self.close()

    def _ensure_stream(self) -> _TxStream:
        stream = self._stream
        if stream is None or stream.call.done():
            if self._channel is None:
                self._channel = grpc.aio.insecure_channel(self._target, options=self._options)
            call: grpc.aio.StreamStreamCall[bytes, bytes] = self._channel.stream_stream(TXS_METHOD)(
                metadata=self._metadata
            )
            stream = self._stream = _TxStream(call, PendingBatches())
            reader = asyncio.create_task(self._read(stream))
            self._readers.add(reader)
            reader.add_done_callback(self._readers.discard)
        return stream

    async def _read(self, stream: _TxStream) -> None:
        cause: object = "stream ended"
        try:
            while (message := await stream.call.read()) is not grpc.aio.EOF:
                assert isinstance(message, bytes)
                (batch_id,) = _U64.unpack_from(message)
                stream.pending.resolve(batch_id, message[_U64.size :])
        except grpc.aio.AioRpcError as exc:
            cause = exc.code()
            if cause == grpc.StatusCode.UNAUTHENTICATED:
                cause = NOT_A_MEMBER
        except asyncio.CancelledError:
            cause = "channel closed"
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
        finally:
            if self._stream is stream:
                self._stream = None
            stream.pending.fail(cause)


async def _ended_why(call: grpc.aio.StreamStreamCall[bytes, bytes]) -> object:
    """Why a call whose write failed ended: ``NOT_A_MEMBER`` for UNAUTHENTICATED, else its
    status code (None when it has not ended within a second)."""
    try:
        code = await asyncio.wait_for(call.code(), 1.0)
    except (TimeoutError, grpc.aio.AioRpcError):
        return None
    return NOT_A_MEMBER if code == grpc.StatusCode.UNAUTHENTICATED else code


class _TxStream(NamedTuple):
    call: grpc.aio.StreamStreamCall[bytes, bytes]
    pending: PendingBatches
