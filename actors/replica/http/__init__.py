"""The replica's door: Lighter's REST API, the tx submission path, and what guards them.

=============  ==================================================================================
``config``     ``ApiConfig``: the API's knobs (limits, queues, ports, deadlines)
``auth``       Lighter auth tokens: who may read an account's private data (REST and WebSocket)
``limits``     request budgets: per-IP weights, per-account txs, WS connections, replayed refusals
``admission``  the overload door: txs refused at once while the queue to the sequencer is deep
``fastlane``   ``sendTx``/``sendTxBatch`` over plain HTTP/1.1 in front of aiohttp
=============  ==================================================================================
"""

from .admission import Admission, LoopLag
from .auth import AuthError, KeySource, authenticate, require_account, token_of
from .config import ApiConfig
from .fastlane import FastLaneServer, FastSend, RequestSpan
from .limits import WS_TX_WEIGHT, Limits, RejectionCache, rest_weight

__all__ = [
    "WS_TX_WEIGHT",
    "Admission",
    "ApiConfig",
    "AuthError",
    "FastLaneServer",
    "FastSend",
    "KeySource",
    "Limits",
    "LoopLag",
    "RejectionCache",
    "RequestSpan",
    "authenticate",
    "require_account",
    "rest_weight",
    "token_of",
]
