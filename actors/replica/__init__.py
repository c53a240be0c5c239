"""The API replica: boots hot from a snapshot, applies the block stream, serves REST + WebSocket.

============  =============================================================================
``service``   ``ReplicaService`` (boot, apply loop, micro-batched ``execute_txs``, the shared
              port; owns its fan-out and counters) and ``ReplicaActor`` (the Ray shell)
``state``     ``ReplicaState``: the caches (books, accounts, keys, trades), ``apply_block``, dry-run
``app``       the aiohttp app: Lighter REST under ``/api/v1/`` and the ``/stream`` WebSocket
``fastlane``  ``sendTx``/``sendTxBatch`` over plain HTTP/1.1 in front of the app (aiohttp: the rest)
``fanout``    WebSocket fan-out: one encode per market per block, bounded per-client queues
``views``     Lighter JSON shapes built from the caches
``hooks``     ``ReplicaHooks``: a ``StepProbe`` and middlewares a measurement plugs in
``config``    ``ApiConfig``: the replica's knobs (limits, queues, ports, deadlines)
============  =============================================================================
"""

from .app import API_CONFIG, FAST_SEND, build_app
from .cache import Applied, GapError, ReplicaState
from .hooks import Middleware, ReplicaHooks, StepProbe
from .http import ApiConfig, ApiError, ExecuteTxs, FastLaneServer, OutcomePending
from .service import ReplicaActor, ReplicaConfig, ReplicaService
from .ws import Fanout

__all__ = [
    "API_CONFIG",
    "ApiConfig",
    "ApiError",
    "Applied",
    "ExecuteTxs",
    "FAST_SEND",
    "Fanout",
    "FastLaneServer",
    "GapError",
    "Middleware",
    "OutcomePending",
    "ReplicaActor",
    "ReplicaConfig",
    "ReplicaHooks",
    "ReplicaService",
    "ReplicaState",
    "StepProbe",
    "build_app",
]
