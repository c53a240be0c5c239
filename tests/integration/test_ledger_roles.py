"""The loadtest's CPU ledger follows a role through an actor restart: a named actor (the
sequencer's name) burns CPU, its process is killed inside the window, Ray restarts it, the new
process burns CPU too, and the ledger built from what ``RoleFollower`` resolved during the window
charges the role both processes' CPU (the second one's in full: it was born inside the window).
Built from the pid at the start only, the role would lose the restarted process's time, as a
loadtest whose sequencer was killed at second 1 showed 0.0 µs per tx for the rest of the run."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest
import ray

from raydex.cluster.control import deploy as dep
from raydex.observability.loadtest.ledger import (
    CLK_TCK,
    WindowSampler,
    build_ledger,
    ray_session_of,
)
from raydex.observability.loadtest.roles import RoleFollower, actor_roles

pytestmark = pytest.mark.integration

NS = "raydex-ledger-roles-it"
TICK = 1.0 / CLK_TCK
WAIT_S = 60.0


@ray.remote(num_cpus=0, max_restarts=1)
class _Burner:
    def pid(self) -> int:
        return os.getpid()

    def burn(self, seconds: float) -> float:
        t = time.process_time()
        while time.process_time() - t < seconds:
            pass
        return time.process_time() - t


async def _call_until_up(actor: Any, method: str, *args: Any) -> Any:
    """The call's result once the restarted actor answers it (a call made while Ray still sees
    the old process may fail: it is made again)."""
    from ray.exceptions import RayActorError

    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return await getattr(actor, method).remote(*args)
        except RayActorError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def test_a_role_killed_and_restarted_inside_the_window_keeps_both_processes_cpu(
    ray_session: None,
) -> None:
    actor = _Burner.options(name=dep.SEQUENCER, namespace=NS).remote()
    first_pid = ray.get(actor.pid.remote(), timeout=WAIT_S)

    async def window() -> tuple[WindowSampler, RoleFollower, float, float, int]:
        sampler = WindowSampler(actor_roles(NS))
        follower = RoleFollower(NS, sampler, every_s=0.2)
        stop = asyncio.Event()
        following = asyncio.ensure_future(follower.run(stop))
        sampler.begin()
        burned_first = await actor.burn.remote(0.3)
        sampler.tick()  # the first process's last sight
        os.kill(first_pid, signal.SIGKILL)
        burned_second = await _call_until_up(actor, "burn", 0.3)
        second_pid = await _call_until_up(actor, "pid")
        deadline = time.monotonic() + WAIT_S
        while second_pid not in sampler.roles and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        sampler.tick()
        stop.set()
        await following
        return sampler, follower, burned_first, burned_second, second_pid

    try:
        sampler, follower, burned_first, burned_second, second_pid = asyncio.run(window())
    finally:
        ray.kill(actor, no_restart=True)
    before, after = sampler.end()
    assert second_pid != first_pid and sampler.roles[second_pid] == "sequencer"
    assert follower.restarts == 1
    session = ray_session_of(after.procs, sampler.roles)
    led = build_ledger(before, after, sampler.roles, 1, session=session)
    assert {first_pid, second_pid} <= set(led.pids["sequencer"])
    assert led.by_role["sequencer"] >= burned_first + burned_second - 4 * TICK
    # from the start pid alone the restarted process is someone else's (Ray's)
    start_only = build_ledger(before, after, {first_pid: "sequencer"}, 1, session=session)
    assert start_only.by_role["sequencer"] < burned_first + burned_second - 4 * TICK
