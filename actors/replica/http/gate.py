"""The replica's HTTP door before any request: who may hold a connection open, and for how long.

Every connection to a replica's port is accepted by the fast lane (``fastlane.py``), which counts
it here before it reads a byte:

- **a global cap** below the process's file limit: ``http_max_connections`` open connections at
  most (0: the file limit less a reserve, :func:`auto_max_connections`), so ``accept`` never
  meets "Too many open files" and the process keeps the descriptors its own work needs (the data
  plane, snapshots, Ray). At the cap, the connection that has waited longest for its first
  request head is closed to make room (``evicted``: a trickling head from a flood of many
  addresses, never a client that sent a request); with none waiting, the newcomer is answered
  ``503`` / 23000 and closed at once;
- **a cap per peer address**: ``http_max_connections_per_ip`` open connections from one IP (the
  addresses of ``rate_limit_exempt`` are not counted); one more is answered ``429`` / 23000 with
  ``Retry-After`` and closed;
- **a deadline for a whole request head** (``http_head_timeout_s``, counted from the moment the
  lane starts waiting for it: the connection's start, or the first byte after an answer): never
  reset by a byte, so a head that trickles in is answered ``408`` / 20001 and closed when it runs
  out. aiohttp receives a connection only with a complete head, and then bounds the wait for the
  next one with its keep-alive time (``KEEPALIVE_S``, not reset by a byte either).

Refusals are counted per reason (:data:`REASONS`; ``raydex_http_refusals_total{reason}``) and
logged through a :class:`LogBudget` (one line per reason per 10 s, with the count left out), so a
flood of them cannot flood the log. Cost per connection: two dict updates (open, close).
"""

from __future__ import annotations

import logging
import resource
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from raydex.codecs import ResultCode
from raydex.observability.logbudget import LogBudget

__all__ = [
    "REASONS",
    "ConnectionCaps",
    "OpenConnections",
    "Refusal",
    "auto_max_connections",
    "canned",
]

log = logging.getLogger(__name__)

#: why a connection was refused or closed before its request was answered
Refusal = Literal["per_ip", "total", "evicted", "head_timeout", "bad_head"]
REASONS: tuple[Refusal, ...] = ("per_ip", "total", "evicted", "head_timeout", "bad_head")

#: descriptors kept back from the file limit for the process's own work (at least)
FD_RESERVE = 512


def auto_max_connections() -> int:
    """The global cap when none is configured: the soft file limit less ``FD_RESERVE`` (or an
    eighth of it, when that is more), never below 64."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(64, soft - max(FD_RESERVE, soft // 8))


@dataclass(frozen=True, slots=True)
class ConnectionCaps:
    """The door's bounds (from ``ApiConfig``; see the module docstring)."""

    #: open connections at most (0: :func:`auto_max_connections`)
    max_total: int = 0
    #: open connections per peer IP at most (0: no cap)
    max_per_ip: int = 256
    #: addresses not counted against ``max_per_ip`` (the host's own tools)
    exempt: tuple[str, ...] = ()
    #: seconds a request head may take, whole
    head_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_total < 0 or self.max_per_ip < 0:
            raise ValueError("connection caps must be >= 0 (0: automatic / no cap)")
        if self.head_timeout_s <= 0:
            raise ValueError("http_head_timeout_s must be > 0")


def canned(status: int, reason: str, code: int, message: str, retry_after: bool) -> bytes:
    """A complete HTTP/1.1 answer that closes the connection: the API's JSON error."""
    body = b'{"code":%d,"message":"%s"}' % (code, message.encode())
    head = b"HTTP/1.1 %d %s\r\nContent-Type: application/json; charset=utf-8\r\n" % (
        status,
        reason.encode(),
    )
    head += b"Content-Length: %d\r\nConnection: close\r\n" % len(body)
    if retry_after:
        head += b"Retry-After: 1\r\n"
    return head + b"\r\n" + body


class OpenConnections:
    """Open connections per peer and in all; counts what it refuses (module docstring)."""

    def __init__(self, caps: ConnectionCaps | None = None) -> None:
        self.caps = caps if caps is not None else ConnectionCaps()
        self.max_total = self.caps.max_total or auto_max_connections()
        self.open = 0
        self.per_ip: Counter[str] = Counter()
        self._exempt = frozenset(self.caps.exempt)
        #: refusals by reason (all of ``REASONS``, from 0)
        self.refused: Counter[str] = Counter(dict.fromkeys(REASONS, 0))
        self.logs = LogBudget(log)
        cap = self.caps.max_per_ip
        self._answers: dict[Refusal, bytes] = {
            "per_ip": canned(
                429, "Too Many Requests", int(ResultCode.RATE_LIMITED),
                f"too many connections from this IP ({cap} open); retry in 1 s", True,
            ),
            "total": canned(
                503, "Service Unavailable", int(ResultCode.RATE_LIMITED),
                f"too many connections to this replica ({self.max_total} open); retry in 1 s",
                True,
            ),
            "head_timeout": canned(
                408, "Request Timeout", int(ResultCode.INVALID_PARAM),
                f"request head not complete within {self.caps.head_timeout_s:g} s", False,
            ),
            "evicted": canned(
                408, "Request Timeout", int(ResultCode.INVALID_PARAM),
                "request head not complete; closed to make room for another connection", False,
            ),
        }  # fmt: skip

    def admit(self, ip: str | None) -> Refusal | None:
        """Count a connection from ``ip`` that opens now; or why it cannot be (nothing counted:
        the caller makes room, or writes :meth:`refuse`'s answer and closes)."""
        if self.open >= self.max_total:
            return "total"
        counted = ip is not None and self.caps.max_per_ip and ip not in self._exempt
        if counted and self.per_ip[ip] >= self.caps.max_per_ip:  # type: ignore[index]
            return "per_ip"
        self.open += 1
        if counted:
            self.per_ip[ip] += 1  # type: ignore[index]
        return None

    def release(self, ip: str | None) -> None:
        """A connection :meth:`admit` counted has closed."""
        self.open -= 1
        if ip is not None and ip in self.per_ip:
            left = self.per_ip[ip] - 1
            if left > 0:
                self.per_ip[ip] = left
            else:
                del self.per_ip[ip]

    def refuse(self, reason: Refusal, ip: str | None) -> bytes:
        """Count (and, within the log budget, log) a refusal; the answer that says it."""
        self.refused[reason] += 1
        self.logs.warning(
            reason, "replica HTTP: connection from %s refused or closed (%s); %d refused so far",
            ip, reason, self.refused[reason],
        )  # fmt: skip
        return self._answers.get(reason, b"")

    def stats(self) -> dict[str, object]:
        return {
            "open": self.open,
            "max": self.max_total,
            "max_per_ip": self.caps.max_per_ip,
            "peers": len(self.per_ip),
            "refused": dict(self.refused),
            "logs_suppressed": sum(self.logs.suppressed.values()),
        }
