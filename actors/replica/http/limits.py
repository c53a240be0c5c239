"""Request budgets of the public API (Lighter's limits), per replica.

::

    request ──► per-IP weighted bucket (REST path weight; WS sendtx as sendTx) ──► 429/23000
            ──► sendTx(Batch): these very bytes refused for a signature lately? ──► that answer,
                                                                 no signature check
            ──► per-account bucket (a tx counts once its dry-run passed) ─────────► 429/23000
    /stream ──► at most ``ws_max_connections_per_ip`` open per IP ───► error 30005, then close

- Token buckets: a key's bucket holds one minute's budget and refills at budget/60 per second.
  A request that does not fit is refused whole, costs nothing, and says when it would fit
  (``Retry-After``).
- Weights are Lighter's: ``sendTx``, ``sendTxBatch``, ``nextNonce`` 6, ``apikeys`` 150,
  ``trades``/``recentTrades`` 600, else 300; opening ``/stream`` is free (its cap is the
  connection count), each ``jsonapi/sendtx*`` frame costs a ``sendTx`` from the same bucket.
- Per account only txs whose dry-run passed are charged (nobody spends another's budget with
  txs it cannot sign); an account out of budget is refused before any signature check.
- A request refused for a bad signature is answered from memory when replayed byte for byte
  within ``rejection_cache_s`` (a key change makes that answer stale for at most as long).
- ``rate_limit_exempt`` addresses (loopback by default) skip every budget and the cap; behind a
  same-host reverse proxy every client is loopback: empty the list there.

Cost: a dict lookup, a move-to-end and a few float operations per request; memory bounded by
``rate_limit_max_keys`` buckets per kind (LRU; an evicted key starts full) and
``rejection_cache_size`` rejections.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from raydex.codecs import ResultCode

from .config import ApiConfig

#: Lighter's endpoint weights (REST path after ``/api/v1/``); others weigh ``DEFAULT_WEIGHT``
REST_WEIGHTS: dict[str, int] = {
    "sendTx": 6,
    "sendTxBatch": 6,
    "nextNonce": 6,
    "publicPools": 50,
    "txFromL1TxHash": 50,
    "accountInactiveOrders": 100,
    "apikeys": 150,
    "transferFeeInfo": 500,
    "trades": 600,
    "recentTrades": 600,
}
DEFAULT_WEIGHT = 300
#: what a WS ``jsonapi/sendtx`` or ``jsonapi/sendtxbatch`` frame costs (as ``sendTx``)
WS_TX_WEIGHT = REST_WEIGHTS["sendTx"]
#: rejections remembered by the bytes of the request (deterministic while the key stands)
CACHED_CODES = frozenset({int(ResultCode.INVALID_SIGNATURE)})


def rest_weight(path: str) -> int:
    """The weight of a request to ``path`` (``/stream`` and unknown paths: see module doc)."""
    if path == "/stream":
        return 0
    return REST_WEIGHTS.get(path.rpartition("/")[2], DEFAULT_WEIGHT)


class TokenBuckets:
    """One token bucket per key: ``per_minute`` capacity, refilled at ``per_minute / 60`` per s.
    ``per_minute`` 0 turns the buckets off (everything fits)."""

    __slots__ = ("_buckets", "capacity", "max_keys", "rate")

    def __init__(self, per_minute: int, max_keys: int) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.max_keys = max_keys
        self._buckets: OrderedDict[Hashable, list[float]] = OrderedDict()

    def _level(self, key: Hashable, now: float) -> list[float]:
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = [self.capacity, now]
            if len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            b[0] = min(self.capacity, b[0] + (now - b[1]) * self.rate)
            b[1] = now
        return b

    def wait(self, key: Hashable, cost: float, now: float) -> float:
        """0.0 if ``cost`` fits now (nothing taken), else the seconds until it would."""
        if self.rate == 0 or cost <= 0:
            return 0.0
        b = self._level(key, now)
        if cost <= b[0]:
            return 0.0
        if cost > self.capacity:
            return 60.0
        return (cost - b[0]) / self.rate

    def take(self, key: Hashable, cost: float, now: float) -> float:
        """Take ``cost`` if it fits (0.0), else take nothing and return the seconds to wait."""
        wait = self.wait(key, cost, now)
        if wait == 0.0 and self.rate and cost > 0:
            self._buckets[key][0] -= cost
        return wait

    def __len__(self) -> int:
        return len(self._buckets)


class RejectionCache:
    """Recent signature rejections by the digest of the request's bytes (bounded, with a TTL)."""

    __slots__ = ("_seen", "max_items", "ttl_s")

    def __init__(self, ttl_s: float, max_items: int) -> None:
        self.ttl_s = ttl_s
        self.max_items = max_items
        self._seen: OrderedDict[bytes, tuple[float, int, str]] = OrderedDict()

    @staticmethod
    def key(*parts: object) -> bytes:
        text = repr(parts).encode("utf-8", "surrogatepass")
        return hashlib.blake2b(text, digest_size=16).digest()

    def __len__(self) -> int:
        return len(self._seen)

    def get(self, key: bytes, now: float) -> tuple[int, str] | None:
        hit = self._seen.get(key)
        if hit is None:
            return None
        if hit[0] <= now:
            del self._seen[key]
            return None
        return hit[1], hit[2]

    def remembers(self, code: int) -> bool:
        """Whether a rejection with ``code`` is kept (so its key is worth computing)."""
        return self.ttl_s > 0 and code in CACHED_CODES

    def put(self, key: bytes, code: int, message: str, now: float) -> None:
        if not self.remembers(code):
            return
        self._seen[key] = (now + self.ttl_s, code, message)
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_items:
            self._seen.popitem(last=False)


@dataclass(frozen=True, slots=True)
class LimitStats:
    """What the limits refused so far (a replica's ``status()`` shows it)."""

    ip_limited: int
    account_limited: int
    ws_refused: int
    replays_answered: int
    ws_connections_by_busiest_ip: int


class Limits:
    """A replica's budgets (see the module docstring); one per app, on the app's event loop."""

    def __init__(self, config: ApiConfig) -> None:
        self.config = config
        self.exempt = frozenset(config.rate_limit_exempt)
        n = config.rate_limit_max_keys
        self.ip = TokenBuckets(config.rate_limit_weight_per_minute, n)
        self.account = TokenBuckets(config.rate_limit_txs_per_account_per_minute, n)
        self.rejections = RejectionCache(config.rejection_cache_s, config.rejection_cache_size)
        self.ws: dict[str, int] = {}
        self.ip_limited = 0
        self.account_limited = 0
        self.ws_refused = 0
        self.replays_answered = 0
        self.clock = time.monotonic

    def exempted(self, ip: str | None) -> bool:
        return ip is None or ip in self.exempt

    def charge_ip(self, ip: str | None, weight: int) -> float:
        """Take ``weight`` from ``ip``'s bucket: 0.0, or the seconds to wait (nothing taken)."""
        if self.exempted(ip):
            return 0.0
        wait = self.ip.take(ip, weight, self.clock())
        if wait:
            self.ip_limited += 1
        return wait

    def account_wait(self, ip: str | None, counts: dict[int, int]) -> float:
        """Seconds until every account of ``counts`` (account -> txs) has room; 0.0 now."""
        if self.exempted(ip):
            return 0.0
        now = self.clock()
        wait = max((self.account.wait(a, n, now) for a, n in counts.items()), default=0.0)
        if wait:
            self.account_limited += 1
        return wait

    def charge_accounts(self, ip: str | None, counts: dict[int, int]) -> None:
        if self.exempted(ip):
            return
        now = self.clock()
        for a, n in counts.items():
            self.account.take(a, n, now)

    def ws_open(self, ip: str | None) -> bool:
        """Count a new WS connection from ``ip``; False (not counted) when at the cap."""
        if self.exempted(ip):
            return True
        assert ip is not None
        n = self.ws.get(ip, 0)
        if n >= self.config.ws_max_connections_per_ip:
            self.ws_refused += 1
            return False
        self.ws[ip] = n + 1
        return True

    def ws_closed(self, ip: str | None) -> None:
        if ip is None or ip not in self.ws:
            return
        n = self.ws[ip] - 1
        if n:
            self.ws[ip] = n
        else:
            del self.ws[ip]

    def holds_rejections(self) -> bool:
        """Any rejection remembered (expired ones included until looked up): until then no
        request can be a replay, and its key need not be computed."""
        return len(self.rejections) > 0

    def replayed(self, key: bytes) -> tuple[int, str] | None:
        hit = self.rejections.get(key, self.clock())
        if hit is not None:
            self.replays_answered += 1
        return hit

    def remembers(self, code: int) -> bool:
        """Whether a rejection with ``code`` is remembered by the request's bytes: the caller
        computes the request's key only then."""
        return self.rejections.remembers(code)

    def remember(self, key: bytes, code: int, message: str) -> None:
        self.rejections.put(key, code, message, self.clock())

    def stats(self) -> LimitStats:
        return LimitStats(
            self.ip_limited,
            self.account_limited,
            self.ws_refused,
            self.replays_answered,
            max(self.ws.values(), default=0),
        )
