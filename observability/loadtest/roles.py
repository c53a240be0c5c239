"""Which process holds each role of a deployment, followed through restarts during a window.

::

    actor_roles(namespace)         before the window: pid -> role of every raydex actor on
                                   this driver's node (another host's pids mean nothing here)
    RoleFollower.run(stop)         during it, every ``every_s``: each named actor asked for its
      actor.__ray_call__(pid_of)     pid (awaited on the loop: nothing blocks); a pid not seen
      ─► WindowSampler.follow()      before (Ray restarted the actor) joins the actor's role

The CPU ledger charges a role every process that held it in the window
(``ledger.WindowSampler.follow``), so a sequencer killed at second 1 and restarted by Ray is
charged its first process until its last sample and its second one from its start (it was born
inside the window), instead of 0 for the rest of the run.

Limits: an actor is asked once per ``every_s`` (at most one question outstanding per actor), so a
process that lives less than that between two restarts may never be seen (its CPU is then
``unattributed``); a restarted actor answers only once it is up again. Cost: one actor call per
actor per ``every_s``, charged to the generator's row.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from .ledger import WindowSampler

__all__ = ["RoleFollower", "actor_roles", "pid_of", "role_of_actor"]

log = logging.getLogger(__name__)


def pid_of(actor: Any) -> tuple[int, str]:
    """Runs inside an actor (``__ray_call__``): its process id and its Ray node's id."""
    import ray

    return os.getpid(), ray.get_runtime_context().get_node_id()


def role_of_actor(name: str) -> str:
    """The CPU ledger's role for a raydex actor name."""
    from raydex.cluster.control import deploy as dep

    fixed = {dep.SEQUENCER: "sequencer", dep.SNAPSHOT: "snapshot holder",
             dep.COMMITTER: "committer"}  # fmt: skip
    if name in fixed:
        return fixed[name]
    return "replica " + name.removeprefix(dep.REPLICA_PREFIX)


def actor_roles(namespace: str) -> dict[int, str]:
    """pid -> ledger role of every raydex actor of ``namespace`` on this driver's node: the CPU
    ledger, the memory sampler and py-spy read this machine's ``/proc``, where another host's
    pid is some other process or none (``raydex loadtest --address`` on a cluster)."""
    import ray

    from raydex.cluster.control import deploy as dep

    here = ray.get_runtime_context().get_node_id()
    names = sorted(dep.named_actors(namespace))
    refs = [ray.get_actor(n, namespace=namespace).__ray_call__.remote(pid_of) for n in names]
    found: list[tuple[int, str]] = ray.get(refs, timeout=60)
    return {
        int(pid): role_of_actor(n)
        for n, (pid, node) in zip(names, found, strict=True)
        if node == here
    }


class RoleFollower:
    """Keeps ``sampler``'s roles current while :meth:`run` runs (see the module docstring).
    ``resolved`` counts the answers, ``restarts`` the pids that joined a role after the first."""

    def __init__(self, namespace: str, sampler: WindowSampler, every_s: float = 1.0) -> None:
        self.namespace = namespace
        self.sampler = sampler
        self.every_s = every_s
        self.resolved = 0
        self.restarts = 0
        #: this driver's Ray node (set by :meth:`run`): actors elsewhere are not followed
        self.here = ""
        self._asking: dict[str, asyncio.Task[None]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Ask every named actor of the namespace for its pid every ``every_s`` until ``stop``."""
        import ray

        from raydex.cluster.control import deploy as dep

        ns = self.namespace
        self.here = ray.get_runtime_context().get_node_id()
        handles = {n: ray.get_actor(n, namespace=ns) for n in dep.named_actors(ns)}
        try:
            while not stop.is_set():
                for name, handle in handles.items():
                    if name not in self._asking:
                        self._asking[name] = asyncio.ensure_future(self._ask(name, handle))
                with_stop = asyncio.ensure_future(stop.wait())
                await asyncio.wait([with_stop], timeout=self.every_s)
                with_stop.cancel()
        finally:
            for task in tuple(self._asking.values()):
                task.cancel()

    async def _ask(self, name: str, handle: Any) -> None:
        from ray.exceptions import RayError

        try:
            pid, node = await handle.__ray_call__.remote(pid_of)
        except RayError as exc:  # dead or restarting: it is asked again next time
            log.debug("role follower: %s did not answer: %r", name, exc)
            return
        finally:
            self._asking.pop(name, None)
        if node != self.here:  # another host's process: not in this machine's /proc
            return
        self.resolved += 1
        role = role_of_actor(name)
        roles = self.sampler.roles
        if roles.get(pid) != role:
            if role in roles.values():
                self.restarts += 1
            self.sampler.follow({pid: role})
