"""Admission control at the replica's door: under overload a tx is refused at once, before its
signature is checked, instead of queueing towards the sequencer until its deadline.

::

    sendTx / jsonapi/sendtx ─► decode ─► Admission.refusal(txs) ─► dry-run (signature) ─► queue
                                          │ the queue's delay over the limit, or an earlier
                                          │ nonce of the key refused here
                                          ▼
                                   23000 (OVERLOADED), HTTP 429: nothing noted, nonce unused

- Signal: ``delay()``, the owner's queueing delay (s): how long the oldest tx on its way to the
  sequencer has waited (``MicroBatcher.delay``) plus the event loop's own lag (:class:`LoopLag`:
  requests waiting in the replica's sockets when it is itself the bottleneck). While it exceeds
  ``max_delay_s`` every tx is refused, so the queue drains: what is admitted waits at most about
  ``max_delay_s`` plus one batch round trip, and the admitted rate follows the sequencer's.
- Nonces: a refused tx consumes nothing, so a later tx of its key can only fail. The refused
  nonce of a key's *next* tx is remembered, and a higher nonce of that key, while the key still
  expects the remembered one, gets the same overload code without its signature check. The
  entry goes when the key moves on or sends that nonce again (at most ``max_keys``, oldest
  dropped); an entry only changes the code of txs that would fail the nonce check anyway.

Cost: one ``delay()`` call per request; per tx one dict lookup while any key is remembered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from raydex.codecs import SKIP_NONCE_FLAG

__all__ = ["Admission", "LoopLag", "NextNonce"]

#: ``(account, api key) -> the nonce the key's next tx must carry`` (None: unknown key)
NextNonce = Callable[[int, int], "int | None"]


class Admission:
    """The door of one replica app (see the module docstring). ``delay`` None or
    ``max_delay_s`` <= 0: every tx is admitted."""

    def __init__(
        self, delay: Callable[[], float] | None, max_delay_s: float, max_keys: int = 10_000
    ) -> None:
        self.delay = delay if max_delay_s > 0 else None
        self.max_delay_s = max_delay_s
        self.max_keys = max_keys
        #: (account, api key) -> the nonce refused here while it was the key's next
        self._held: dict[tuple[int, int], int] = {}
        #: txs refused because the queue's delay was over the limit
        self.refused = 0
        #: txs refused because an earlier nonce of their key was refused here
        self.refused_behind = 0

    def refusal(self, txs: list[Any], next_nonce: NextNonce) -> str | None:
        """Why ``txs`` (one request) are refused at the door, or None to admit them."""
        if self.delay is not None:
            d = self.delay()
            if d > self.max_delay_s:
                self._hold(txs, next_nonce)
                self.refused += len(txs)
                return (
                    f"overloaded: the queue to the sequencer is {1000 * d:.0f} ms deep (limit "
                    f"{1000 * self.max_delay_s:.0f} ms); not executed, nonce not used: send it "
                    "again later"
                )
        held = self._held
        if not held:
            return None
        for tx in txs:
            key = _key(tx)
            n = held.get(key)
            if n is None:
                continue
            # a SkipNonce tx (flag bit set) may leave nonce n unused: not behind it
            if n < tx.nonce < SKIP_NONCE_FLAG and next_nonce(*key) == n:
                self.refused_behind += len(txs)
                return (
                    f"overloaded: nonce {n} of this API key was refused at the door, so nonce "
                    f"{tx.nonce} cannot be next; send {n} again (nextNonce)"
                )
            del held[key]  # the key moved on, or its client sends the refused nonce again
        return None

    def _hold(self, txs: list[Any], next_nonce: NextNonce) -> None:
        held = self._held
        seen: set[tuple[int, int]] = set()
        for tx in txs:
            key = _key(tx)
            if key in seen:
                continue
            seen.add(key)
            if key not in held and tx.nonce == next_nonce(*key):
                if len(held) >= self.max_keys:
                    del held[next(iter(held))]
                held[key] = tx.nonce

    def stats(self) -> dict[str, int]:
        return {
            "refused": self.refused,
            "refused_behind": self.refused_behind,
            "held_keys": len(self._held),
        }


def _key(tx: Any) -> tuple[int, int]:
    return (getattr(tx, "account_index", -1), getattr(tx, "api_key_index", -1))


class LoopLag:
    """How far the event loop runs behind its schedule. ``run()`` (a loop task) sleeps
    ``interval_s`` at a time and notes how late it woke; ``last`` is the smaller of its last two
    wake-ups' lateness, so a lag that lasts counts and one stall that is over (a GC pause, a
    replica booting in the same loop, the process descheduled once) does not refuse the
    requests that follow it. ``now()`` is the larger of ``last`` and how overdue the next wake
    already is, so a loop stuck in a long iteration (a burst of requests) or not scheduled at
    all is seen while it lasts, not only afterwards.
    Cost: 1 / ``interval_s`` wake-ups per second (50 at the default: ~1 ms of CPU per second)."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self.last = 0.0
        self._due: float | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        previous = 0.0
        while True:
            due = self._due = loop.time() + self.interval_s
            await asyncio.sleep(self.interval_s)
            late = max(0.0, loop.time() - due)
            self.last = min(late, previous)
            previous = late

    def now(self) -> float:
        """Seconds the loop is behind (0 before ``run`` started)."""
        due = self._due
        if due is None:
            return 0.0
        return max(self.last, asyncio.get_running_loop().time() - due)
