"""A replica app served as ``ReplicaService`` serves it: through the door and the fast lane (the
connection caps and head deadline of its ``ApiConfig``), aiohttp behind.

:class:`LaneServer` has the face of aiohttp's ``TestServer`` (``start_server``, ``make_url``,
``close``), so a test written against one runs against the other."""

from __future__ import annotations

import asyncio

from aiohttp import web
from yarl import URL

from raydex.actors.replica import API_CONFIG, FAST_SEND, FastLaneServer
from raydex.actors.replica.http import (
    KEEPALIVE_S,
    ConnectionCaps,
    OpenConnections,
    json_error_protocols,
)


class LaneServer:
    def __init__(self, app: web.Application, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app, self.host, self.port = app, host, port
        self.runner: web.AppRunner | None = None
        self.lane: FastLaneServer | None = None
        self.server: asyncio.AbstractServer | None = None

    async def start_server(self) -> None:
        self.runner = web.AppRunner(
            self.app, handle_signals=False, access_log=None, keepalive_timeout=KEEPALIVE_S
        )
        await self.runner.setup()
        assert self.runner.server is not None
        api = self.app[API_CONFIG]
        caps = ConnectionCaps(
            api.http_max_connections,
            api.http_max_connections_per_ip,
            api.rate_limit_exempt,
            api.http_head_timeout_s,
        )
        self.lane = FastLaneServer(
            json_error_protocols(self.runner.server),
            self.app[FAST_SEND],
            api.max_body_bytes,
            gate=OpenConnections(caps),
            serve=api.fast_lane,
        )
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(self.lane, self.host, self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    def make_url(self, path: str) -> URL:
        return URL(f"http://{self.host}:{self.port}{path}")

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        if self.lane is not None:
            self.lane.close()
        if self.runner is not None:
            await self.runner.cleanup()
