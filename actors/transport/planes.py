"""Choosing the data plane: gRPC (the default) or plain TCP, by the sequencer's config and the
scheme of the targets it hands out.

The sequencer serves its streams on the plane its ``SequencerConfig.data_plane`` names; the
deployment gives followers targets of the form ``host:port`` (gRPC) or ``tcp://host:port``
(:func:`target_of`), and every follower builds its source and channel from the target alone
(:func:`block_source`, :func:`tx_channel`), so one knob switches the whole deployment and a
follower needs no config of its own. Both planes keep the same promises (``core.py``).
"""

from __future__ import annotations

from typing import Literal

from .core import DEFAULT_BACKOFF, Backoff, BlockHub, TxHandler
from .grpc_plane import GrpcBlockSource, GrpcDataPlaneServer, GrpcTxChannel
from .tcp_plane import TcpBlockSource, TcpDataPlaneServer, TcpTxChannel

#: the data plane of a deployment: "grpc" (HTTP/2, the default) or "tcp" (asyncio streams)
DataPlane = Literal["grpc", "tcp"]
TCP_SCHEME = "tcp://"

BlockSourceImpl = GrpcBlockSource | TcpBlockSource
TxChannelImpl = GrpcTxChannel | TcpTxChannel
DataPlaneServer = GrpcDataPlaneServer | TcpDataPlaneServer


def target_of(plane: str, host: str, port: int) -> str:
    """The target followers dial for ``plane`` at ``host:port``."""
    return f"{TCP_SCHEME}{host}:{port}" if plane == "tcp" else f"{host}:{port}"


def _split(target: str) -> tuple[bool, str]:
    if target.startswith(TCP_SCHEME):
        return True, target[len(TCP_SCHEME) :]
    return False, target


def block_source(
    target: str, *, name: str = "", secret: str = "", backoff: Backoff = DEFAULT_BACKOFF
) -> BlockSourceImpl:
    """The block source for ``target`` (``tcp://host:port`` or ``host:port`` for gRPC), carrying
    the deployment's data-plane ``secret`` (empty: none)."""
    tcp, address = _split(target)
    if tcp:
        return TcpBlockSource(address, name=name, secret=secret, backoff=backoff)
    return GrpcBlockSource(address, name=name, secret=secret, backoff=backoff)


def tx_channel(target: str, *, secret: str = "") -> TxChannelImpl:
    """The tx channel for ``target`` (as :func:`block_source`)."""
    tcp, address = _split(target)
    if tcp:
        return TcpTxChannel(address, secret=secret)
    return GrpcTxChannel(address, secret=secret)


def data_plane_server(
    plane: str,
    hub: BlockHub,
    tx_handler: TxHandler | None,
    *,
    host: str,
    port: int,
    secret: str = "",
    max_inflight: int = 64,
) -> DataPlaneServer:
    """The publisher's server on ``plane`` ("grpc" or "tcp"): both serve only callers that carry
    ``secret`` (when set) and run at most ``max_inflight`` tx batches at once."""
    if plane == "tcp":
        return TcpDataPlaneServer(
            hub, tx_handler, host=host, port=port, secret=secret, max_inflight=max_inflight
        )
    if plane != "grpc":
        raise ValueError(f"unknown data plane {plane!r} (grpc or tcp)")
    return GrpcDataPlaneServer(
        hub, tx_handler, host=host, port=port, secret=secret, max_inflight=max_inflight
    )
