"""The API replica: boots hot from a snapshot, applies the block stream, serves REST + WebSocket.

Rooms, in import order (each imports only those above it; the modules here import the rooms):

==============  ================================================================================
``cache/``      what the replica knows: ``ReplicaState`` and ``apply_block`` (the C cache loop),
                the dry-run, ledger, history, candles, volumes, margin; their rows in one module
``views/``      Lighter's JSON shapes built from the caches
``http/``       the door: public and private REST reads, tx submission (REST, fast lane, WS
                frames), auth tokens, budgets, the overload door, ``ApiConfig``
``ws/``         the ``/stream`` endpoint and the fan-out of every block (the C book renderer)
``app``         ``build_app``: the aiohttp app from ``http/`` and ``ws/``
``batching``    ``MicroBatcher``: txs to the sequencer, batches in flight
``hooks``       ``ReplicaHooks``: a ``StepProbe`` and middlewares a measurement plugs in
``service``     ``ReplicaService`` (boot, apply loop, ``execute_txs``, the ports) and
                ``ReplicaActor`` (the Ray shell)
==============  ================================================================================
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
