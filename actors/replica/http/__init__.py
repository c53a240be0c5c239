"""The replica's door: Lighter's REST API, the tx submission path, and what guards them.

=============  ==================================================================================
``public``     ``PublicReads``: markets, books, trades, accounts, txs, blocks, candles, fundings
``private``    ``PrivateReads``: an account's orders, fills, flows, fundings, pnl (auth tokens)
``context``    ``ReadContext``: what both read: the caches, the knobs, the counters
``submit``     ``TxSubmission``: sendTx/sendTxBatch (REST, fast lane, WS frames): decode, door,
               dry-run, execute
``fastlane``   ``sendTx``/``sendTxBatch`` over plain HTTP/1.1 in front of aiohttp; the door every
               connection passes first
``gate``       connection caps per IP and in all, the request head's deadline
``auth``       Lighter auth tokens: who may read an account's private data (REST and WebSocket)
``limits``     request budgets: per-IP weights, per-account txs, WS connections, replayed refusals
``admission``  the overload door: txs refused at once while the queue to the sequencer is deep
``errors``     ``ApiError`` and its kin, the error answers and the middleware that gives them
``params``     query parameters, JSON and form bodies, parsed without escaping
``config``     ``ApiConfig``: the API's knobs (limits, queues, ports, deadlines)
=============  ==================================================================================

The WebSocket endpoint (``ws``) goes through this door too: the same budgets, auth and
submission.
"""

from .admission import Admission, LoopLag
from .auth import AuthError, KeySource, authenticate, require_account, token_of
from .config import ApiConfig
from .context import ReadContext
from .errors import (
    ApiError,
    OutcomePending,
    Overloaded,
    RateLimited,
    bad_requests,
    code_name,
    error_middleware,
    error_response,
    json_error_protocols,
    json_response,
)
from .fastlane import KEEPALIVE_S, FastLaneServer, FastSend, RequestSpan
from .gate import REASONS, ConnectionCaps, OpenConnections
from .limits import WS_TX_WEIGHT, Limits, RejectionCache, rest_weight
from .params import MAX_JSON_DEPTH, int_param, parse_form, parse_json
from .private import PrivateReads
from .public import CommitmentSource, PublicReads
from .submit import DryRunProbe, ExecuteTxs, TxSubmission, reply_id

__all__ = [
    "KEEPALIVE_S",
    "MAX_JSON_DEPTH",
    "REASONS",
    "WS_TX_WEIGHT",
    "Admission",
    "ApiConfig",
    "ApiError",
    "AuthError",
    "CommitmentSource",
    "ConnectionCaps",
    "DryRunProbe",
    "ExecuteTxs",
    "FastLaneServer",
    "FastSend",
    "KeySource",
    "Limits",
    "LoopLag",
    "OpenConnections",
    "OutcomePending",
    "Overloaded",
    "PrivateReads",
    "PublicReads",
    "RateLimited",
    "ReadContext",
    "RejectionCache",
    "RequestSpan",
    "TxSubmission",
    "authenticate",
    "bad_requests",
    "code_name",
    "error_middleware",
    "error_response",
    "int_param",
    "json_error_protocols",
    "json_response",
    "parse_form",
    "parse_json",
    "reply_id",
    "require_account",
    "rest_weight",
    "token_of",
]
