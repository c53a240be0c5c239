"""The arbiter: who is the primary, in which epoch, and whether the standby may take over.

::

    primary ──acquire(name) at start, renew(name, epoch) every ttl/3──►┌────────────────────┐
            ──standby_sync(name, epoch, standby, in_sync)─────────────►│ Arbiter            │
    standby ──take_over(name, epoch, primary_dead)────────────────────►│ epoch, primary,    │
                                                                       │ standby, in_sync,  │
                                                                       │ lease expiry       │
                                                                       └─────── GCS KV ─────┘

One detached named actor on the head node (``ArbiterActor``), so its calls are serialized: each
one is a compare-and-set on ``(epoch, primary)``. Its state is written to Ray's GCS key-value
store after every change and read back when Ray restarts the actor, so an epoch never goes back.

Rules (``Arbiter``, pure: time comes in as ``now``):
- ``acquire``: a start. Granted to the primary of the current epoch (a restart) or to anyone
  while no epoch was granted yet (the first start: epoch 1). It marks the standby out of sync:
  a restarted primary has to see the standby ack again before the standby may take over.
- ``renew``: granted only to the primary of the current epoch; extends the lease by ``ttl_s``.
  Refused means fenced: another sequencer took over; the caller stops sequencing.
- ``standby_sync``: the primary says its standby holds every acknowledged block (``in_sync``), or
  that it is about to acknowledge blocks the standby does not hold (out of sync: a degraded
  primary asks this *before* it does). Granted to the current primary only.
- ``take_over``: granted to the named standby only while it is in sync, the epoch it saw is the
  current one, and the lease has lapsed or Ray reports the primary's node dead. The epoch goes up
  by one and the standby is the primary; the old primary's ``renew`` and its replication requests
  (the standby fences them) are refused from then on.

So at most one sequencer acknowledges in an epoch, and a takeover never loses an acknowledged
block: the standby may only take over while it holds every block the primary acknowledged
(replicated durability, ``replication.py``), and the primary acknowledges without it only after
the arbiter recorded that the standby may not take over.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from ..runtime import ARBITER_NAME

log = logging.getLogger(__name__)

__all__ = ["ARBITER_NAME", "DEFAULT_LEASE_S", "Arbiter", "ArbiterActor", "ArbiterState",
           "Fenced", "Verdict"]  # fmt: skip

#: the lease a primary renews (seconds): a standby may take over this long after the last renewal
DEFAULT_LEASE_S = 3.0


class Fenced(RuntimeError):
    """The arbiter names another primary: this sequencer may not sequence."""


class Verdict(NamedTuple):
    """An arbiter's answer: granted or not, and the state after the call."""

    granted: bool
    epoch: int
    primary: str
    reason: str = ""


@dataclass(slots=True)
class ArbiterState:
    epoch: int = 0
    primary: str = ""
    standby: str = ""
    in_sync: bool = False


class Arbiter:
    """The compare-and-set rules (see module docstring); no Ray, no clock of its own."""

    def __init__(self, ttl_s: float = DEFAULT_LEASE_S, state: ArbiterState | None = None) -> None:
        self.ttl_s = ttl_s
        self.state = state or ArbiterState()
        #: when the primary's lease lapses (the caller's clock; 0: no lease yet)
        self.expires = 0.0
        self.takeovers = 0

    def _verdict(self, granted: bool, reason: str = "") -> Verdict:
        return Verdict(granted, self.state.epoch, self.state.primary, reason)

    def acquire(self, name: str, now: float) -> Verdict:
        s = self.state
        if s.epoch and s.primary != name:
            return self._verdict(False, f"{s.primary!r} is the primary of epoch {s.epoch}")
        s.epoch = max(s.epoch, 1)
        s.primary = name
        s.in_sync = False
        self.expires = now + self.ttl_s
        return self._verdict(True)

    def renew(self, name: str, epoch: int, now: float) -> Verdict:
        s = self.state
        if (s.epoch, s.primary) != (epoch, name):
            return self._verdict(False, f"{s.primary!r} is the primary of epoch {s.epoch}")
        self.expires = now + self.ttl_s
        return self._verdict(True)

    def standby_sync(self, name: str, epoch: int, standby: str, in_sync: bool) -> Verdict:
        s = self.state
        if (s.epoch, s.primary) != (epoch, name):
            return self._verdict(False, f"{s.primary!r} is the primary of epoch {s.epoch}")
        s.standby, s.in_sync = standby, in_sync
        return self._verdict(True)

    def take_over(self, name: str, epoch: int, now: float, primary_dead: bool = False) -> Verdict:
        s = self.state
        if s.primary == name and s.epoch == epoch + 1:
            return self._verdict(True, "already the primary")  # a retried call
        if s.standby != name:
            return self._verdict(False, f"the standby is {s.standby or 'none'!r}")
        if not s.in_sync:
            return self._verdict(False, "the standby is out of sync: it may lack acked blocks")
        if s.epoch != epoch:
            return self._verdict(False, f"epoch {epoch} is not the current {s.epoch}")
        if not primary_dead and now < self.expires:
            return self._verdict(False, f"the primary's lease runs {self.expires - now:.2f} s more")
        s.epoch += 1
        s.primary, s.standby, s.in_sync = name, "", False
        self.expires = now + self.ttl_s
        self.takeovers += 1
        return self._verdict(True)

    def view(self, now: float) -> dict[str, Any]:
        return {**asdict(self.state), "lease_left_s": round(self.expires - now, 3)}


class ArbiterActor:
    """Ray shell of :class:`Arbiter` (wrap with ``ray.remote``, detached, on the head node): its
    state is kept in the GCS key-value store under ``key``, written after every change and read
    back at a restart (the lease then starts afresh, so a restart never shortens it)."""

    def __init__(self, key: str, ttl_s: float = DEFAULT_LEASE_S) -> None:
        self.key = key.encode()
        state = ArbiterState()
        raw = self._kv_get()
        if raw:
            state = ArbiterState(**json.loads(raw))
            log.warning("arbiter restarted: epoch %d, primary %r", state.epoch, state.primary)
        self.arbiter = Arbiter(ttl_s, state)
        self.arbiter.expires = time.monotonic() + ttl_s

    def _kv_get(self) -> bytes | None:
        from ray.experimental import internal_kv

        got: bytes | None = internal_kv._internal_kv_get(self.key)
        return got

    def _kept(self, verdict: Verdict, before: ArbiterState) -> Verdict:
        from ray.experimental import internal_kv

        if self.arbiter.state != before:
            try:
                internal_kv._internal_kv_put(self.key, json.dumps(asdict(self.arbiter.state)))
            except BaseException:  # not kept: not granted (the caller sees the error)
                self.arbiter.state = before
                raise
        return verdict

    def _copy(self) -> ArbiterState:
        return ArbiterState(**asdict(self.arbiter.state))

    def acquire(self, name: str) -> Verdict:
        before = self._copy()
        return self._kept(self.arbiter.acquire(name, time.monotonic()), before)

    def renew(self, name: str, epoch: int) -> Verdict:
        return self.arbiter.renew(name, epoch, time.monotonic())

    def standby_sync(self, name: str, epoch: int, standby: str, in_sync: bool) -> Verdict:
        before = self._copy()
        return self._kept(self.arbiter.standby_sync(name, epoch, standby, in_sync), before)

    def take_over(self, name: str, epoch: int, primary_dead: bool = False) -> Verdict:
        before = self._copy()
        verdict = self.arbiter.take_over(name, epoch, time.monotonic(), primary_dead)
        if verdict.granted:
            log.warning("arbiter: %r takes over as the primary of epoch %d", name, verdict.epoch)
        return self._kept(verdict, before)

    def view(self) -> dict[str, Any]:
        return self.arbiter.view(time.monotonic())

    def forget(self) -> None:
        """Delete the kept state (``raydex down``): the next deployment starts at epoch 1."""
        from ray.experimental import internal_kv

        internal_kv._internal_kv_del(self.key)
        self.arbiter = Arbiter(self.arbiter.ttl_s)

    def status(self) -> dict[str, Any]:
        """:meth:`view` with a one-line ``repr`` (``raydex status``)."""
        v = self.view()
        line = f"arbiter epoch={v['epoch']} primary={v['primary'] or '-'} "
        line += f"standby={v['standby'] or '-'} in_sync={v['in_sync']}"
        return {**v, "repr": line}
