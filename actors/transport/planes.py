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
    target: str, *, name: str = "", backoff: Backoff = DEFAULT_BACKOFF
) -> BlockSourceImpl:
    """The block source for ``target`` (``tcp://host:port`` or ``host:port`` for gRPC)."""
    tcp, address = _split(target)
    if tcp:
        return TcpBlockSource(address, name=name, backoff=backoff)
    return GrpcBlockSource(address, name=name, backoff=backoff)


def tx_channel(target: str) -> TxChannelImpl:
    """The tx channel for ``target`` (as :func:`block_source`)."""
    tcp, address = _split(target)
    return TcpTxChannel(address) if tcp else GrpcTxChannel(address)


def data_plane_server(
    plane: str, hub: BlockHub, tx_handler: TxHandler | None, *, host: str, port: int
) -> DataPlaneServer:
    """The publisher's server on ``plane`` ("grpc" or "tcp")."""
    if plane == "tcp":
        return TcpDataPlaneServer(hub, tx_handler, host=host, port=port)
    if plane != "grpc":
        raise ValueError(f"unknown data plane {plane!r} (grpc or tcp)")
    return GrpcDataPlaneServer(hub, tx_handler, host=host, port=port)
