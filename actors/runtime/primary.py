"""Which sequencer is the primary: the arbiter's answer, turned into data-plane targets.

A follower (the snapshot holder, the committer, a replica) is deployed with the primary's
targets. When a standby takes over (``actors/sequencer/arbiter.py``: a new epoch), the follower
finds the new primary the way the deploy does (the arbiter names it, its status gives its address
and ports) and points its sources and channels there (``transport.retarget``); a source resumes
after the last block it yielded, and the new primary's blocks up to there are the same bytes (the
standby wrote the same records and rebuilt the same frames).

:class:`PrimaryWatch` asks every ``interval_s`` (one small Ray call; the primary's status only for
an epoch it has not resolved yet) and moves the follower whenever the arbiter's primary is not the
one it follows, never to an older epoch's. Outside Ray, or in a deployment without an arbiter, it
finds nothing and does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Literal, NamedTuple

from ..transport import UNIX_QUERY, target_of
from .shell import current_namespace

log = logging.getLogger(__name__)

#: the arbiter actor's name in the deployment's namespace
ARBITER_NAME = "arbiter"
#: how often a watch looks for an arbiter where there is none
NO_ARBITER_S = 5.0
#: listen addresses that mean "every interface": the primary is then reached at its node's IP
_ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})


class PrimaryTargets(NamedTuple):
    """The primary of ``epoch``: its actor name and the targets of its block stream (replicas,
    the committer) and its tx log (the snapshot holder's stamped stream and WAL reads)."""

    epoch: int
    name: str
    blocks: str
    txlog: str


def targets_of(status: dict[str, Any], epoch: int, name: str) -> PrimaryTargets | None:
    """The targets a sequencer's ``status()`` advertises (None while it does not serve)."""
    if not status.get("data_port") or status.get("refused"):
        return None
    host = status.get("data_host") or ""
    if host in _ANY_ADDRESS:
        host = status.get("address") or ""
    plane = status["data_plane"]["plane"]
    unix = status["data_plane"].get("unix") or {}
    return PrimaryTargets(
        epoch,
        name,
        target_of(plane, host, status["data_port"], unix.get("blocks")),
        target_of(plane, host, status["txlog_port"], unix.get("txlog")),
    )


async def _arbiter(namespace: str | None) -> Any:
    """The deployment's arbiter actor, or None (none deployed; outside Ray)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    ns = namespace if namespace is not None else current_namespace()
    try:
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: ray.get_actor(ARBITER_NAME, ns)
        )
    except ValueError:
        return None


async def primary_of(
    arbiter: Any, namespace: str | None = None, newer_than: int = -1
) -> PrimaryTargets | None:
    """The targets of the primary ``arbiter`` names, when its epoch is newer than
    ``newer_than``; None otherwise, or while it does not serve yet."""
    import ray

    view = await arbiter.view.remote()
    name, epoch = str(view["primary"]), int(view["epoch"])
    if not name or epoch <= newer_than:
        return None
    ns = namespace if namespace is not None else current_namespace()
    primary = await asyncio.get_running_loop().run_in_executor(
        None, lambda: ray.get_actor(name, ns)
    )
    return targets_of(await primary.status.remote(), epoch, name)


async def find_primary(namespace: str | None = None) -> PrimaryTargets | None:
    """The current primary's targets, per the deployment's arbiter; None without one (or
    outside Ray, or while the primary does not serve yet)."""
    arbiter = await _arbiter(namespace)
    return None if arbiter is None else await primary_of(arbiter, namespace)


class PrimaryWatch:
    """Calls ``on_new(targets)`` when the arbiter's primary is not the one the follower follows
    (its ``kind`` target, ``following``, compared by address; see the module docstring), never
    for an epoch older than one already seen. ``run`` is a supervised loop."""

    def __init__(
        self,
        on_new: Callable[[PrimaryTargets], Awaitable[None]],
        following: str,
        kind: Literal["blocks", "txlog"] = "blocks",
        interval_s: float = 0.25,
        namespace: str | None = None,
    ) -> None:
        self.on_new = on_new
        self.following = following
        self.kind = kind
        self.interval_s = interval_s
        self.namespace = namespace
        #: the newest epoch whose primary was resolved; 0: none yet
        self.epoch = 0
        self.switches = 0

    async def run(self) -> None:
        arbiter: Any = None
        while True:
            found = None
            try:
                arbiter = arbiter or await _arbiter(self.namespace)
                if arbiter is not None:
                    # its primary's status is asked only for an epoch not resolved yet
                    found = await primary_of(arbiter, self.namespace, self.epoch or -1)
            except Exception as exc:  # the arbiter or the primary unreachable: ask again
                log.debug("primary watch: %r", exc)
            if found is not None and found.epoch >= self.epoch:
                target = found.blocks if self.kind == "blocks" else found.txlog
                if _address(target) != _address(self.following):
                    log.warning("the primary is now %s (epoch %d): following it at %s",
                                found.name, found.epoch, target)  # fmt: skip
                    await self.on_new(found)
                    self.following = target
                    self.switches += 1
                self.epoch = found.epoch
            # no arbiter (a deployment without a standby): look again now and then
            await asyncio.sleep(self.interval_s if arbiter is not None else NO_ARBITER_S)


def _address(target: str) -> str:
    """A target without its Unix-socket part (the same server either way)."""
    return target.partition(UNIX_QUERY)[0]
