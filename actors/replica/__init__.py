"""The API replica: boots hot from a snapshot, applies the block stream, serves REST + WebSocket.

===========  =============================================================================
``service``  ``ReplicaService`` (boot, apply loop, micro-batched submit; owns its fan-out) and
             ``ReplicaActor`` (the Ray shell)
``state``    ``ReplicaState``: the caches (books, accounts, keys, trades), ``apply_block``, dry-run
``app``      the aiohttp app: Lighter REST under ``/api/v1/`` and the ``/stream`` WebSocket
``fanout``   WebSocket fan-out: one encode per market per block, bounded per-client queues
``views``    Lighter JSON shapes built from the caches
``config``   ``ApiConfig``: the app's knobs (limits, queues), settable from ``raydex.yaml``
===========  =============================================================================
"""

from .app import ApiError, build_app
from .config import ApiConfig
from .fanout import Fanout
from .service import ReplicaActor, ReplicaConfig, ReplicaService
from .state import Applied, GapError, ReplicaState

__all__ = [
    "ApiConfig",
    "ApiError",
    "Applied",
    "Fanout",
    "GapError",
    "ReplicaActor",
    "ReplicaConfig",
    "ReplicaService",
    "ReplicaState",
    "build_app",
]
