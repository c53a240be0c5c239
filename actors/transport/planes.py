"""Choosing the data plane: gRPC (``DEFAULT_DATA_PLANE``) or plain TCP, by the sequencer's config
and the scheme of the targets it hands out.

The sequencer serves its streams on the plane its ``SequencerConfig.data_plane`` names; the
deployment gives followers targets of the form ``host:port`` (gRPC) or ``tcp://host:port``
(:func:`target_of`), and every follower builds its source and channel from the target alone
(:func:`block_source`, :func:`tx_channel`), so one knob switches the whole deployment and a
follower needs no config of its own. Both planes keep the same promises (``core.py``).
"""

from __future__ import annotations

from typing import Literal

from .core import DEFAULT_BACKOFF, Backoff, BlockHub, PreAuth, TxHandler
from .grpc_plane import GrpcBlockSource, GrpcDataPlaneServer, GrpcTxChannel
from .tcp_plane import TcpBlockSource, TcpDataPlaneServer, TcpTxChannel

#: the data plane of a deployment: "grpc" (HTTP/2) or "tcp" (asyncio streams)
DataPlane = Literal["grpc", "tcp"]
#: The one default (``SequencerConfig.data_plane``, hence a spec that names no plane): gRPC.
#: A target without a scheme is a gRPC one, so followers need no default of their own.
DEFAULT_DATA_PLANE: DataPlane = "grpc"
TCP_SCHEME = "tcp://"

BlockSourceImpl = GrpcBlockSource | TcpBlockSource
TxChannelImpl = GrpcTxChannel | TcpTxChannel
DataPlaneServer = GrpcDataPlaneServer | TcpDataPlaneServer


UNIX_QUERY = "?unix="


def target_of(plane: str, host: str, port: int, unix_path: str | None = None) -> str:
    """The target followers dial for ``plane`` at ``host:port``; on the TCP plane ``unix_path``
    (the server's Unix-domain socket, ``tcp_plane``) rides along as ``?unix=PATH`` for followers
    on the same host."""
    if plane != "tcp":
        return f"{host}:{port}"
    return f"{TCP_SCHEME}{host}:{port}" + (f"{UNIX_QUERY}{unix_path}" if unix_path else "")


def _split(target: str) -> tuple[bool, str, str | None]:
    """(tcp, host:port, unix path or None) of a target."""
    if target.startswith(TCP_SCHEME):
        address, _, unix = target[len(TCP_SCHEME) :].partition(UNIX_QUERY)
        return True, address, unix or None
    return False, target, None


def block_source(
    target: str, *, name: str = "", secret: str = "", backoff: Backoff = DEFAULT_BACKOFF
) -> BlockSourceImpl:
    """The block source for ``target`` (``tcp://host:port`` or ``host:port`` for gRPC), carrying
    the deployment's data-plane ``secret`` (empty: none)."""
    tcp, address, unix = _split(target)
    if tcp:
        return TcpBlockSource(address, name=name, secret=secret, backoff=backoff, unix_path=unix)
    return GrpcBlockSource(address, name=name, secret=secret, backoff=backoff)


def tx_channel(target: str, *, secret: str = "") -> TxChannelImpl:
    """The tx channel for ``target`` (as :func:`block_source`)."""
    tcp, address, unix = _split(target)
    if tcp:
        return TcpTxChannel(address, secret=secret, unix_path=unix)
    return GrpcTxChannel(address, secret=secret)


async def retarget(endpoint: object, target: str) -> bool:
    """Point a source or channel made by :func:`block_source` / :func:`tx_channel` at another
    publisher of the same plane (a sequencer that took over): its open stream ends, the next
    opens at ``target``; a block source resumes after the last frame it yielded. False (nothing
    done) for an endpoint that cannot be pointed elsewhere (the Ray plane's, a test's)."""
    move = getattr(endpoint, "retarget", None)
    if move is None:
        return False
    _, address, unix = _split(target)
    await move(address, unix)
    return True


def data_plane_server(
    plane: str,
    hub: BlockHub,
    tx_handler: TxHandler | None,
    *,
    host: str,
    port: int,
    secret: str = "",
    max_inflight: int = 64,
    unix_dir: str | None = None,
    preauth: PreAuth | None = None,
    max_connections: int = 1024,
) -> DataPlaneServer:
    """The publisher's server on ``plane`` ("grpc" or "tcp"): both serve only callers that carry
    ``secret`` (when set), bound what a caller can hold before it showed it (``preauth``; gRPC
    also caps its connections at ``max_connections``), and run at most ``max_inflight`` tx
    batches at once; the TCP one also listens on a Unix-domain socket in ``unix_dir`` when given
    ("" = the temp folder), for followers on the same host."""
    if plane == "tcp":
        return TcpDataPlaneServer(
            hub,
            tx_handler,
            host=host,
            port=port,
            secret=secret,
            max_inflight=max_inflight,
            unix_dir=unix_dir,
            preauth=preauth,
        )
    if plane != "grpc":
        raise ValueError(f"unknown data plane {plane!r} (grpc or tcp)")
    return GrpcDataPlaneServer(
        hub,
        tx_handler,
        host=host,
        port=port,
        secret=secret,
        max_inflight=max_inflight,
        preauth=preauth,
        max_connections=max_connections,
    )
