"""Random form fields and JSON bodies sent to sendTx / sendTxBatch / the WS never produce a 500:
every answer is a JSON object with an integer code, and the caches stay consistent with no
pending nonce left behind. One real aiohttp server on 127.0.0.1 for the whole module."""

from __future__ import annotations

import asyncio
import json
import string
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.lane import LaneServer

from raydex.actors.local import Trader, new_exchange
from raydex.actors.replica import ApiConfig
from raydex.codecs import tx_to_json


class Live:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.trader = Trader(10)
        ex = new_exchange([self.trader, Trader(11)])
        replica = ex.serve(ApiConfig(max_body_bytes=16 * 1024))
        self.state = replica.state
        self.server = LaneServer(replica.app)  # sendTx* via the fast lane
        self.loop.run_until_complete(self.server.start_server())
        self.http = self.loop.run_until_complete(self._session())
        self.template = tx_to_json(self.trader.order(299_000, 10, 0))

    async def _session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

    def post(self, path: str, **kw: Any) -> tuple[int, Any]:
        async def go() -> tuple[int, Any]:
            async with self.http.post(self.server.make_url(path), **kw) as r:
                text = await r.text()
                return r.status, json.loads(text)

        return self.loop.run_until_complete(asyncio.wait_for(go(), 10))

    def ws_exchange(self, messages: list[str]) -> list[Any]:
        async def go() -> list[Any]:
            out = []
            async with self.http.ws_connect(self.server.make_url("/stream")) as ws:
                await ws.receive_json(timeout=5)
                for m in messages:
                    await ws.send_str(m)
                    out.append(await ws.receive_json(timeout=5))
            return out

        return self.loop.run_until_complete(asyncio.wait_for(go(), 20))

    def close(self) -> None:
        self.loop.run_until_complete(self.http.close())
        self.loop.run_until_complete(self.server.close())
        self.loop.close()


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    lv = Live()
    yield lv
    lv.close()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def tx_infos(draw: st.DrawFn, template: dict[str, Any]) -> str:
    """A valid CreateOrder's JSON with keys replaced, dropped or added; or any text."""
    if draw(st.booleans()):
        return draw(st.text(max_size=120))
    obj = dict(template)
    for key in draw(st.lists(st.sampled_from(sorted(obj)), max_size=3)):
        if draw(st.booleans()):
            obj[key] = draw(json_values)
        else:
            obj.pop(key, None)
    if draw(st.booleans()):
        obj[draw(st.text(max_size=10))] = draw(json_values)
    return json.dumps(obj)


KEY_CHARS = string.ascii_letters + "_"
tx_types = st.integers(-3, 300).map(str) | st.text(max_size=8)
OK_STATUSES = {200, 400, 404, 413}
FUZZ = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def check(live: Live, status: int, body: Any) -> None:
    assert status in OK_STATUSES, (status, body)
    assert isinstance(body, dict) and isinstance(body.get("code"), int)
    live.state.validate()
    assert live.state.pending_count() == 0


@FUZZ
@given(data=st.data())
def test_random_send_tx_forms_never_produce_a_server_error(live: Live, data: st.DataObject) -> None:
    form: dict[str, str] = {}
    if data.draw(st.booleans()):
        form["tx_type"] = data.draw(tx_types)
    if data.draw(st.booleans()):
        form["tx_info"] = data.draw(tx_infos(live.template))
    form.update(
        data.draw(
            st.dictionaries(
                st.text(KEY_CHARS, min_size=1, max_size=8), st.text(max_size=20), max_size=2
            )
        )
    )
    if data.draw(st.booleans()):
        multipart = aiohttp.FormData()
        for k, v in form.items():
            multipart.add_field(k, v)
        status, body = live.post("/api/v1/sendTx", data=multipart)
    else:
        status, body = live.post("/api/v1/sendTx", data=form)
    check(live, status, body)


@FUZZ
@given(body=json_values, as_json=st.booleans())
def test_random_json_bodies_never_produce_a_server_error(
    live: Live, body: Any, as_json: bool
) -> None:
    raw = json.dumps(body).encode() if as_json else json.dumps(body).encode()[::-1]
    status, reply = live.post(
        "/api/v1/sendTx", data=raw, headers={"Content-Type": "application/json"}
    )
    check(live, status, reply)


@FUZZ
@given(types=st.lists(tx_types, max_size=4) | json_values, data=st.data())
def test_random_batches_never_produce_a_server_error(
    live: Live, types: Any, data: st.DataObject
) -> None:
    infos = data.draw(st.lists(tx_infos(live.template), max_size=4) | json_values)
    form = {"tx_types": json.dumps(types), "tx_infos": json.dumps(infos)}
    status, body = live.post("/api/v1/sendTxBatch", data=form)
    check(live, status, body)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    messages=st.lists(json_values.map(json.dumps) | st.text(max_size=40), min_size=1, max_size=4)
)
def test_random_websocket_messages_get_an_answer_and_never_close_the_socket(
    live: Live, messages: list[str]
) -> None:
    replies = live.ws_exchange(messages)
    assert all(isinstance(r, dict) and "type" in r for r in replies)
    live.state.validate()
