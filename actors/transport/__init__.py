"""The data plane: blocks down, tx batches up, behind one small interface.

::

     replica actor                                   sequencer actor
    ┌──────────────────────┐   Txs (batch id|frame)  ┌──────────────────────────────┐
    │ TxChannel.submit ────┼────────────────────────►│ TxHandler(frame) -> result   │
    │                      │◄────────────────────────┤                              │
    │                      │   Blocks (seq|frame)    │ BlockHub: ring + per-        │
    │ BlockSource          │◄────────────────────────┤ subscriber bounded queues    │
    │  .subscribe(from_seq)│   one long-lived stream │  .publish(seq, frame)        │
    └──────────────────────┘   per replica           └──────────────────────────────┘

Three implementations with identical semantics, compared by ``raydex bench transport``:

- gRPC (``grpc.aio``, generic handlers, identity serializers, no protobuf):
  :class:`GrpcDataPlaneServer` on the publisher, :class:`GrpcBlockSource` and
  :class:`GrpcTxChannel` on each replica.
- plain TCP (``asyncio`` streams, length-prefixed frames, no HTTP/2): :class:`TcpDataPlaneServer`
  on the publisher, :class:`TcpBlockSource` and :class:`TcpTxChannel` on each replica.
- plain Ray actor calls: :class:`RayBlockFanout` on the publisher (``open_blocks`` /
  ``submit`` methods), :class:`RayBlockSource` and :class:`RayTxChannel` on each replica
  (``on_block`` / ``on_block_stream_closed`` methods).

Which network plane a deployment uses is one knob, ``SequencerConfig.data_plane`` (gRPC or TCP;
``DEFAULT_DATA_PLANE`` when unset, ``planes.py``): the sequencer serves on it and hands out
``host:port`` or ``tcp://host:port`` targets, from which every follower builds its source and
channel (:func:`block_source`, :func:`tx_channel`). The Ray plane is wired by hand (benchmarks).

Guarantees of every :class:`BlockSource`: frames come in seq order from ``from_seq`` with no gap
and no duplicate, across reconnects; when that cannot be kept (``from_seq`` older than the
publisher's ring, or a gap), the iterator raises :class:`ResyncRequired` and the replica rebuilds
from a snapshot, then subscribes again. The publisher never blocks on a subscriber: one that falls
``queue_size`` frames behind is cut off and reconnects (replay from the ring, or resync).

Tx batches are delivered at most once; a broken stream fails in-flight batches with
:class:`TxStreamBroken` and the caller learns their outcome from the blocks. How many batches a
replica keeps in flight is its own policy; a network plane's server bounds it anyway (per stream
and in total) and caps a batch frame's size.

Membership: a network plane's server with the deployment's secret (``new_secret``, made by
``raydex deploy``) serves only callers that carry it (gRPC: ``AUTH_KEY`` metadata; TCP: the
HELLO message); a client with a wrong one gets :class:`NotAMember`, and without a secret a server
listens on loopback only. Before a caller has shown the secret, :class:`PreAuth` bounds what it
can hold (HELLO size and deadline, connections per peer and in all). Ray-call transports are
authenticated by Ray itself (cluster membership). These shared rules are written once, in
``core.py``, and called by every plane.
"""

from __future__ import annotations

from .core import (
    MAX_HELLO,
    MAX_INFLIGHT_PER_STREAM,
    PREAUTH_REASONS,
    TX_STREAM,
    Backoff,
    BlockHub,
    BlockSink,
    BlockSource,
    EndReason,
    Frame,
    HubStats,
    Link,
    NotAMember,
    PreAuth,
    ResyncRequired,
    StreamOrder,
    Subscription,
    TransportError,
    TransportUnavailable,
    TxChannel,
    TxHandler,
    TxStreamBroken,
    new_secret,
)
from .grpc_plane import (
    AUTH_KEY,
    BLOCKS_METHOD,
    SERVICE,
    TXS_METHOD,
    GrpcBlockSource,
    GrpcDataPlaneServer,
    GrpcTxChannel,
)
from .planes import (
    DEFAULT_DATA_PLANE,
    TCP_SCHEME,
    UNIX_QUERY,
    DataPlane,
    block_source,
    data_plane_server,
    retarget,
    target_of,
    tx_channel,
)
from .ray_plane import (
    OpenReply,
    RayBlockFanout,
    RayBlockSource,
    RayTxChannel,
)
from .tcp_plane import TcpBlockSource, TcpDataPlaneServer, TcpTxChannel

__all__ = [
    "MAX_HELLO",
    "MAX_INFLIGHT_PER_STREAM",
    "PREAUTH_REASONS",
    "TX_STREAM",
    "StreamOrder",
    "AUTH_KEY",
    "BLOCKS_METHOD",
    "DEFAULT_DATA_PLANE",
    "SERVICE",
    "TCP_SCHEME",
    "UNIX_QUERY",
    "TXS_METHOD",
    "Backoff",
    "BlockHub",
    "BlockSink",
    "BlockSource",
    "DataPlane",
    "EndReason",
    "Frame",
    "GrpcBlockSource",
    "GrpcDataPlaneServer",
    "GrpcTxChannel",
    "HubStats",
    "Link",
    "NotAMember",
    "OpenReply",
    "PreAuth",
    "RayBlockFanout",
    "RayBlockSource",
    "RayTxChannel",
    "ResyncRequired",
    "Subscription",
    "TcpBlockSource",
    "TcpDataPlaneServer",
    "TcpTxChannel",
    "TransportError",
    "TransportUnavailable",
    "TxChannel",
    "TxHandler",
    "TxStreamBroken",
    "block_source",
    "data_plane_server",
    "retarget",
    "target_of",
    "tx_channel",
    "new_secret",
]
