"""The plain-TCP data plane: the same two streams as gRPC, over ``asyncio`` streams, no HTTP/2.

Same interface and semantics as ``grpc_plane`` (:class:`BlockSource`, :class:`TxChannel`,
:class:`BlockHub` on the publisher), so a follower or a replica switches by constructing
:class:`TcpBlockSource` / :class:`TcpTxChannel` instead of the gRPC ones; only the framing
differs. Every message, both ways, is ``u32 length | u8 kind | body`` (little-endian; the length
counts kind + body)::

    client -> server, first message of a connection:
      HELLO   the deployment's data-plane secret        (empty without one)
    then the server answers REFUSED and closes if the secret is wrong, else the client's next:
      BLOCKS  u64 from_seq | utf-8 subscriber name     the connection becomes a block stream
      TXS     (empty)                                   the connection becomes a tx stream
    block stream, server -> client:
      BLOCK   u64 seq | frame                           one per block, in seq order
      RESYNC  u64 floor                                 from_seq is no longer held; then close
      SLOW    (empty)                                   cut off for falling behind; then close
    tx stream:
      BATCH   u64 batch id | tx batch frame             client -> server
      RESULT  u64 batch id | result frame               server -> client, any order

:class:`TcpBlockSource` reconnects after a broken stream or a cut-off with the same bounded
backoff, resumes from the last seq it yielded + 1, drops duplicates by seq and raises
:class:`ResyncRequired` on RESYNC or a gap. :class:`TcpTxChannel` matches results by batch id;
a broken connection fails every pending ``submit`` with :class:`TxStreamBroken` (at most once:
nothing is resent; the next ``submit`` opens a new connection). The server runs each batch as its
own task (several may be in flight); a malformed message closes that connection only.

Membership and bounds, as the gRPC plane (the rules of ``core.py``): with a ``secret`` the server
compares HELLO's body with it (``admits``: constant time) and refuses anything else (REFUSED, then
close; counted in ``refused``); a refused block source raises :class:`NotAMember`, a refused tx
channel fails its batches with :class:`TxStreamBroken`. Without a secret the server listens on
loopback only. Before the secret matched (``PreAuth``): a connection must send its whole HELLO
within ``hello_timeout_s`` and in at most ``MAX_HELLO`` bytes (its length field says more:
closed unread), and at most ``max_unauthenticated_per_peer`` connections per address (the Unix
socket counts as one) and ``max_unauthenticated`` in all may be waiting for theirs; beyond,
closed at once. Each refusal is counted by reason (``preauth.refused``). At most
``max_inflight_per_stream`` batches per connection and ``max_inflight`` over all connections run
at once (a batch beyond that waits, unread); a message longer than ``max_request_bytes`` closes
the connection.

Why: no HTTP/2 and no gRPC callbacks: one ``write`` and two ``readexactly`` per message, for
less latency and CPU per message than the gRPC plane (``raydex bench transport``; the loadtest's
CPU ledger for the whole deployment). It has no TLS (like the gRPC plane): the secret
authenticates, it does not encrypt; run it inside the deployment's network only. A deployment
chooses it with ``data_plane: tcp`` (``planes.py``; the shipped raydex.yaml does).

Cost: per message one header pack and one copy of the frame (header + frame joined once).

Same host, no TCP: with ``unix_dir`` the server also listens on a Unix-domain socket there,
:func:`unix_path_for` its port (mode 0600, the same protocol, the same secret). A follower given
the path (``tcp://host:port?unix=PATH``, ``planes.target_of``) connects through it when ``host``
is one of its own addresses and the path exists, else over TCP: a loopback TCP round trip
costs more CPU than a Unix-socket one (the kernel runs the whole TCP stack for both ends in the
sender's context; ``raydex bench transport`` measures both). A follower that finds no socket (the
sequencer moved to another node) uses TCP; a socket file left by a dead server is replaced (its
TCP port is ours now, so its owner is gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import struct
import tempfile
from collections.abc import AsyncIterator

from .core import (
    DEFAULT_BACKOFF,
    MAX_HELLO,
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
    TxStreamBroken,
    accept_seq,
    admits,
    check_listen,
)

log = logging.getLogger(__name__)

BLOCKS, TXS, BLOCK, RESYNC, SLOW, BATCH, RESULT, HELLO, REFUSED = range(1, 10)
_HEAD = struct.Struct("<IB")  # length of (kind + body), kind
_HEAD_U64 = struct.Struct("<IBQ")  # the same with the body's leading u64
_U64 = struct.Struct("<Q")
#: the largest message accepted (a WAL range read reply is capped well below this)
MAX_MESSAGE = 64 * 1024 * 1024
#: how long a refused connection is kept half-open for the client to read REFUSED and hang up
REFUSE_LINGER_S = 1.0


class ProtocolError(ConnectionError):
    """The peer sent something this plane does not speak: the connection is closed."""


def _message(kind: int, seq: int, body: bytes = b"") -> bytes:
    return _HEAD_U64.pack(1 + _U64.size + len(body), kind, seq) + body


async def read_message(reader: asyncio.StreamReader, limit: int = MAX_MESSAGE) -> tuple[int, bytes]:
    """``(kind, body)`` of the next message (at most ``limit`` bytes); ``IncompleteReadError`` at a
    clean end."""
    size, kind = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    if not 1 <= size <= limit:
        raise ProtocolError(f"message length {size} out of range")
    body = await reader.readexactly(size - 1) if size > 1 else b""
    return kind, body


async def _discard(reader: asyncio.StreamReader) -> None:
    """Read and drop up to ``MAX_MESSAGE`` bytes, until the peer's end of stream."""
    left = MAX_MESSAGE
    while left > 0 and (chunk := await reader.read(65536)):
        left -= len(chunk)


def _peer_of(writer: asyncio.StreamWriter) -> str:
    """The pre-auth key of a connection: the peer's IP address, or ``"unix"`` for the Unix
    socket (mode 0600: only this host's user reaches it)."""
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "unix"


def _hello(secret: bytes) -> bytes:
    return _HEAD.pack(1 + len(secret), HELLO) + secret


def _host_port(target: str) -> tuple[str, int]:
    host, _, port = target.rpartition(":")
    return host, int(port)


def unix_path_for(port: int, folder: str = "") -> str:
    """The Unix-domain socket of the TCP-plane server on ``port``: one per port on a host (two
    live servers cannot hold one port), in ``folder`` (empty: the temp folder)."""
    return os.path.join(folder or tempfile.gettempdir(), f"raydex-dataplane-{port}.sock")


_LOCAL: dict[str, bool] = {}


def is_local_host(host: str) -> bool:
    """``host`` is an address of this machine (it can be bound here). Cached per host."""
    local = _LOCAL.get(host)
    if local is None:
        try:
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
                probe.bind((host, 0))
            local = True
        except OSError:
            local = False
        _LOCAL[host] = local
    return local


async def open_stream(
    host: str, port: int, unix_path: str | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
    """A connection to the server at ``host:port``: through ``unix_path`` when given, ``host`` is
    this machine and the socket is there (True), else over TCP (False)."""
    if unix_path and is_local_host(host) and os.path.exists(unix_path):
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_unix_connection(unix_path)
            return reader, writer, True
    reader, writer = await asyncio.open_connection(host, port)
    return reader, writer, False


class TcpDataPlaneServer:
    """Serves a :class:`BlockHub` and a tx handler on ``host:port`` (see module docstring).

    ``port=0`` picks a free port; :meth:`start` returns the bound one. :meth:`stop` closes every
    connection (block clients see a broken stream and reconnect). ``secret`` and the bounds: see
    the module docstring (same meaning as :class:`GrpcDataPlaneServer`'s)."""

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
        unix_dir: str | None = None,
        preauth: PreAuth | None = None,
    ) -> None:
        self._bounds = TxBounds(max_inflight_per_stream, max_inflight, max_request_bytes)
        #: connections that have not shown the secret yet (module docstring)
        self.preauth = preauth if preauth is not None else PreAuth()
        self._secret = secret.encode()
        #: a message's length cap: one tx batch frame plus its header
        self._limit = max_request_bytes + 1 + _U64.size
        #: connections refused for no or a wrong secret
        self.refused = 0
        self._hub = hub
        self._tx_handler = tx_handler
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        #: where it also serves a Unix-domain socket (module docstring; "" = the temp folder);
        #: None: TCP only. ``unix_path`` is the socket, once started.
        self._unix_dir = unix_dir
        self.unix_path: str | None = None
        self._unix: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._subs: set[Subscription] = set()

    @property
    def address(self) -> str:
        return f"{self._host}:{self._port}"

    async def start(self) -> int:
        check_listen(self._host, self._secret)
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        self._port = int(self._server.sockets[0].getsockname()[1])
        if self._unix_dir is not None:
            path = self.unix_path = unix_path_for(self._port, self._unix_dir)
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(path).st_mode):  # a dead server's: its port is ours
                    os.unlink(path)
            # bound, made 0600, then listening: no one else may even try the secret (no umask
            # change: it is process-wide, and other threads create files)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(path)
                os.chmod(path, 0o600)
                self._unix = await asyncio.start_unix_server(self._serve, sock=sock)
            except BaseException:
                sock.close()
                raise
        return self._port

    async def stop(self, grace: float = 0.0) -> None:
        """``grace`` is accepted for the gRPC server's signature; TCP streams close at once."""
        for sub in tuple(self._subs):
            sub.close()
        for w in tuple(self._writers):
            w.close()
        for server in (self._server, self._unix):
            if server is not None:
                server.close()
                with contextlib.suppress(Exception):
                    await server.wait_closed()
        if self._unix is not None and self.unix_path:
            with contextlib.suppress(OSError):
                os.unlink(self.unix_path)
        self._server = self._unix = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer_of(writer)
        preauth = self.preauth
        if not preauth.admit(peer):
            writer.close()  # unread: a stranger over the caps gets nothing
            return
        self._writers.add(writer)
        counted = True
        try:
            if not await self._hello(reader, writer, peer):
                return
            preauth.release(peer)  # a member now
            counted = False
            kind, body = await asyncio.wait_for(
                read_message(reader, self._limit), preauth.hello_timeout_s
            )
            if kind == BLOCKS and len(body) >= _U64.size:
                await self._blocks(body, writer)
            elif kind == TXS and self._tx_handler is not None:
                remote = peer != "unix" and not is_local_host(peer)
                await self._txs(reader, writer, self._tx_handler, remote)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the peer went away, stalled or spoke nonsense: this connection only
        finally:
            if counted:
                preauth.release(peer)
            self._writers.discard(writer)
            writer.close()

    async def _hello(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> bool:
        """Read the first message, HELLO, whole within the deadline and at most ``MAX_HELLO``
        bytes, and check its secret; False (counted) when the connection must end: not a
        HELLO, too large or too slow (closed unread), or the wrong secret (REFUSED first)."""
        preauth = self.preauth
        try:
            head = await asyncio.wait_for(reader.readexactly(_HEAD.size), preauth.hello_timeout_s)
            size, kind = _HEAD.unpack(head)
            if kind != HELLO:
                preauth.refuse("not_hello", peer)
                return False
            if not 1 <= size <= 1 + MAX_HELLO:
                preauth.refuse("hello_too_large", peer)
                return False
            body = await asyncio.wait_for(reader.readexactly(size - 1), preauth.hello_timeout_s)
        except TimeoutError:
            preauth.refuse("hello_timeout", peer)
            return False
        if admits(self._secret, body):
            return True
        self.refused += 1
        preauth.refuse("bad_secret", peer)
        writer.write(_HEAD.pack(1, REFUSED))
        await writer.drain()
        # half-close and discard what the client already sent, so the close is a FIN it reads
        # REFUSED before (closing with unread input would reset the connection)
        writer.write_eof()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_discard(reader), REFUSE_LINGER_S)
        return False

    async def _blocks(self, body: bytes, writer: asyncio.StreamWriter) -> None:
        (from_seq,) = _U64.unpack_from(body)
        name = body[_U64.size :].decode("utf-8", "replace")
        try:
            sub = self._hub.subscribe(from_seq, name)
        except ResyncRequired as exc:
            writer.write(_message(RESYNC, max(exc.floor, 0)))
            await writer.drain()
            return
        self._subs.add(sub)
        try:
            async for seq, frame in sub:
                writer.write(_message(BLOCK, seq, frame))
                await writer.drain()  # returns at once below the transport's high-water mark
        finally:
            sub.close()
            self._subs.discard(sub)
        if sub.end_reason is EndReason.SLOW:
            writer.write(_HEAD.pack(1, SLOW))
            await writer.drain()

    async def _txs(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handler: TxHandler,
        remote: bool,
    ) -> None:
        # this connection's batch tasks inherit its order, and whether it comes from another host
        batches = self._bounds.stream(remote)
        limit = self._limit

        async def next_batch() -> bytes:
            kind, body = await read_message(reader, limit)
            if kind != BATCH or len(body) < _U64.size:
                raise ProtocolError(f"expected a batch, got kind {kind}")
            return body

        async def serve(batch_id: int, frame: bytes) -> None:
            try:
                result = await handler(frame)
            except Exception:  # as the gRPC plane: the stream fails, its batches are unknown
                log.exception("tx handler failed on batch %d; closing the tx stream", batch_id)
                writer.close()
                return
            if not writer.is_closing():
                writer.write(_message(RESULT, batch_id, result))

        try:
            while (body := await batches.admit(next_batch)) is not None:
                (batch_id,) = _U64.unpack_from(body)
                batches.start(serve(batch_id, body[_U64.size :]))
        finally:
            batches.cancel()


class TcpBlockSource:
    """Replica side of the block stream: implements :class:`BlockSource` (module docstring).

    ``reconnects`` counts streams reopened, ``duplicates`` frames dropped by seq; a server that
    refuses ``secret`` raises :class:`NotAMember` (retrying does not help)."""

    def __init__(
        self,
        target: str,
        *,
        name: str = "",
        secret: str = "",
        backoff: Backoff = DEFAULT_BACKOFF,
        unix_path: str | None = None,
    ) -> None:
        self._target = target
        self._unix_path = unix_path
        self._hello = _hello(secret.encode())
        self._name = name.encode()
        self._backoff = backoff
        self._writers: set[asyncio.StreamWriter] = set()
        self.reconnects = 0
        self.duplicates = 0
        #: the stream open now (or last) goes through the Unix-domain socket
        self.local = False
        #: whether the stream reaches the publisher now (for the follower's status)
        self.link = Link()

    def subscribe(self, from_seq: int) -> AsyncIterator[Frame]:
        return self._stream(from_seq)

    async def close(self) -> None:
        for w in tuple(self._writers):
            w.close()

    async def retarget(self, target: str, unix_path: str | None = None) -> None:
        """Follow another publisher (a sequencer that took over): the open stream is ended now,
        and the next one opens at ``target`` (``unix_path``: its socket on this host) from the
        seq after the last frame yielded."""
        self._target, self._unix_path = target, unix_path
        await self.close()

    async def _stream(self, from_seq: int) -> AsyncIterator[Frame]:
        next_seq = from_seq
        attempt = 0
        unpack = _U64.unpack_from
        while True:
            cause: object = "stream ended"
            writer: asyncio.StreamWriter | None = None
            host, port = _host_port(self._target)  # read again: ``retarget`` may change it
            try:
                reader, writer, self.local = await open_stream(host, port, self._unix_path)
                self.link.opened()
                self._writers.add(writer)
                writer.write(self._hello)
                writer.write(_HEAD.pack(1 + _U64.size + len(self._name), BLOCKS))
                writer.write(_U64.pack(next_seq) + self._name)
                while True:
                    kind, body = await read_message(reader)
                    if kind == BLOCK:
                        (seq,) = unpack(body)
                        if not accept_seq(seq, next_seq):
                            self.duplicates += 1
                            continue
                        attempt = 0
                        next_seq = seq + 1
                        yield seq, body[_U64.size :]
                    elif kind == RESYNC:
                        raise ResyncRequired(next_seq, unpack(body)[0])
                    elif kind == SLOW:
                        cause = "cut off for falling behind"
                        break
                    elif kind == REFUSED:
                        raise NotAMember(f"{self._target} refused us: {NOT_A_MEMBER}")
                    else:
                        raise ProtocolError(f"unexpected message kind {kind}")
            except (OSError, asyncio.IncompleteReadError) as exc:
                cause = exc
            finally:
                if writer is not None:
                    self._writers.discard(writer)
                    writer.close()
            self.link.failed(cause)
            await self._backoff.wait(attempt, cause)
            attempt += 1
            self.reconnects += 1


class TcpTxChannel:
    """Replica side of the tx stream: implements :class:`TxChannel` (module docstring)."""

    #: batches sent one after another execute in that order (one stream; the sequencer starts
    #: its batches in arrival order)
    ordered = True

    def __init__(self, target: str, *, secret: str = "", unix_path: str | None = None) -> None:
        self._target = target
        self._unix_path = unix_path
        #: the connection open now (or last) goes through the Unix-domain socket
        self.local = False
        self._hello = _hello(secret.encode())
        self._conn: _TxConn | None = None
        self._readers: set[asyncio.Task[None]] = set()
        self._next_id = 0
        self._lock = asyncio.Lock()

    async def submit(self, frame: bytes) -> bytes:
        async with self._lock:  # one connection opened at a time; writes never interleave
            conn = await self._ensure()
            self._next_id += 1
            batch_id = self._next_id
            future = conn.pending.add(batch_id)
            try:
                conn.writer.write(_message(BATCH, batch_id, frame))
                await conn.writer.drain()
            except (ConnectionError, RuntimeError) as exc:
                raise conn.pending.unsent(batch_id) from exc
        return await future

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.writer.close()
            self._conn = None
        for task in tuple(self._readers):
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)

    async def retarget(self, target: str, unix_path: str | None = None) -> None:
        """Send to another publisher from now on; batches in flight fail (``TxStreamBroken``:
        their outcome is learnt from the blocks)."""
        self._target, self._unix_path = target, unix_path
        await self.close()

    async def _ensure(self) -> _TxConn:
        conn = self._conn
        if conn is None or conn.writer.is_closing():
            host, port = _host_port(self._target)
            try:
                reader, writer, self.local = await open_stream(host, port, self._unix_path)
            except OSError as exc:
                raise TxStreamBroken(f"cannot open the tx stream: {exc}") from exc
            writer.write(self._hello + _HEAD.pack(1, TXS))
            conn = self._conn = _TxConn(writer, PendingBatches())
            task = asyncio.create_task(self._read(reader, conn))
            self._readers.add(task)
            task.add_done_callback(self._readers.discard)
        return conn

    async def _read(self, reader: asyncio.StreamReader, conn: _TxConn) -> None:
        cause: object = "stream ended"
        try:
            while True:
                kind, body = await read_message(reader)
                if kind == REFUSED:
                    cause = NOT_A_MEMBER
                    break
                if kind != RESULT or len(body) < _U64.size:
                    raise ProtocolError(f"expected a result, got kind {kind}")
                (batch_id,) = _U64.unpack_from(body)
                conn.pending.resolve(batch_id, body[_U64.size :])
        except (OSError, asyncio.IncompleteReadError) as exc:
            cause = exc
        except asyncio.CancelledError:
            cause = "channel closed"
            raise
        finally:
            if self._conn is conn:
                self._conn = None
            conn.writer.close()
            conn.pending.fail(cause)


class _TxConn:
    __slots__ = ("pending", "writer")

    def __init__(self, writer: asyncio.StreamWriter, pending: PendingBatches):
        self.writer = writer
        self.pending = pending
