"""What the read handlers share: the caches, the knobs, the counters, and the success answer.

A success answer carries ``code`` 200 and the ``seq`` of the block it reflects, and counts as a
cache hit unless the handler read something else (a commitment from the committer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from raydex.codecs import MAX_MARKET_INDEX, ResultCode
from raydex.observability.metrics import ApiCounters

from ..cache import ReplicaState
from .config import ApiConfig
from .errors import ApiError, json_response
from .params import int_param

__all__ = ["ReadContext"]

_OK = int(ResultCode.OK)


class ReadContext:
    """One app's caches, knobs and counters, shared by its public and private reads."""

    def __init__(self, state: ReplicaState, counters: ApiCounters, config: ApiConfig) -> None:
        self.state = state
        self.counters = counters
        self.config = config

    def ok(self, body: dict[str, Any], cached: bool = True) -> web.Response:
        """A success answer; ``cached``: it was read from the caches (counted as a hit)."""
        if cached:
            self.counters.cache_hits += 1
        body["code"] = _OK
        body["seq"] = self.state.seq
        return json_response(body)

    def market(self, q: Mapping[str, Any]) -> int:
        """The ``market_id`` parameter, a market of the caches (404 else)."""
        mi = int_param(q, "market_id", 0, MAX_MARKET_INDEX)
        if mi not in self.state.markets:
            raise ApiError(int(ResultCode.MARKET_NOT_FOUND), f"market {mi} not found", 404)
        return mi

    def markets(self, q: Mapping[str, Any]) -> list[int]:
        """``market_id``'s market, or every market when it is 255 or absent."""
        mi = int_param(q, "market_id", 0, 255, default=255)
        if mi == 255:
            return sorted(self.state.markets)
        return [self.market(q)]
