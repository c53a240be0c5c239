"""Test kit for the replica's API: a local exchange served by a real aiohttp server on loopback.

:func:`with_served` builds the exchange for ``traders``, serves its replica on 127.0.0.1 (a free
port), hands a test's rig (made by ``make_rig(exchange, replica state, server)``, given an open
``aiohttp.ClientSession`` as ``rig.http``) to ``body``, and closes the server whatever happens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiohttp
from aiohttp.test_utils import TestServer

from raydex.actors.local import LocalExchange, Trader, new_exchange
from raydex.actors.replica import ReplicaState

from .transport import run

R = TypeVar("R")


def with_served(
    traders: Sequence[Trader],
    make_rig: Callable[[LocalExchange, ReplicaState, TestServer], R],
    body: Callable[[R, list[Trader]], Awaitable[None]],
) -> None:
    """Run ``body(rig, traders)`` against a served local exchange (module docstring)."""

    async def main() -> None:
        ex = new_exchange(list(traders))
        replica = ex.serve()
        server = TestServer(replica.app, host="127.0.0.1", port=0)
        await server.start_server()
        try:
            rig: Any = make_rig(ex, replica.state, server)
            async with aiohttp.ClientSession() as http:
                rig.http = http
                await body(rig, list(traders))
        finally:
            await server.close()

    run(main())
