"""What Lighter has and raydex does not execute is refused by name: every such tx type and the
fast-withdraw endpoints answer 21840 ``FEATURE_NOT_SUPPORTED`` with a message naming the feature
(never "unknown tx type"), and change nothing. Real aiohttp server on 127.0.0.1, real client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kit.lane import LaneServer

from raydex.actors.local import Trader, new_exchange
from raydex.codecs import UNSERVED_TX_TYPES, CodecError, ResultCode, tx_from_json

#: a plausible tx_info of each kind (the refusal comes before any field is read)
_INFO = {"AccountIndex": 10, "ApiKeyIndex": 0, "ExpiredAt": 1, "Nonce": 0, "Sig": ""}


def _post_all(requests: list[tuple[str, dict[str, str] | None]]) -> list[tuple[int, Any]]:
    async def main() -> list[tuple[int, Any]]:
        ex = new_exchange([Trader(10)])
        replica = ex.serve()
        server = LaneServer(replica.app)
        await server.start_server()
        before = replica.state.state_hash(), ex.producer.seq
        out = []
        try:
            async with aiohttp.ClientSession() as http:
                for path, form in requests:
                    url = str(server.make_url(path))
                    call = http.post(url, data=form) if form is not None else http.get(url)
                    async with call as r:
                        out.append((r.status, await r.json()))
        finally:
            await server.close()
        assert (replica.state.state_hash(), ex.producer.seq) == before
        return out

    return asyncio.run(asyncio.wait_for(main(), 30))


def test_every_unserved_tx_type_is_refused_naming_its_feature() -> None:
    form = {"tx_info": json.dumps(_INFO)}
    requests: list[tuple[str, dict[str, str] | None]] = [
        ("/api/v1/sendTx", {**form, "tx_type": str(t)}) for t in UNSERVED_TX_TYPES
    ]
    answers = _post_all(requests)
    for (t, feature), (status, reply) in zip(UNSERVED_TX_TYPES.items(), answers, strict=True):
        assert (status, reply["code"]) == (400, ResultCode.FEATURE_NOT_SUPPORTED), t
        assert feature in reply["message"] and "unknown" not in reply["message"]
    names = " ".join(UNSERVED_TX_TYPES.values())
    for feature in ("public pools", "staking", "multi-asset collateral", "integrator fees"):
        assert feature in names
    assert "binary options" in names and "unified account" in names


def test_an_unknown_tx_type_is_still_unknown() -> None:
    with pytest.raises(CodecError, match="unknown tx type 77") as err:
        tx_from_json(77, _INFO)
    assert err.value.code == ResultCode.INVALID_TX_TYPE


def test_fast_withdrawals_are_refused_naming_the_feature() -> None:
    answers = _post_all(
        [
            ("/api/v1/fastwithdraw", {"tx_info": "{}", "to_address": "0x" + "11" * 20}),
            ("/api/v1/fastwithdraw/info", None),
            ("/api/v1/fastbridge/info", None),
        ]
    )
    for status, reply in answers:
        assert (status, reply["code"]) == (400, ResultCode.FEATURE_NOT_SUPPORTED)
        assert "fast withdrawals" in reply["message"]


def test_the_sdks_own_txs_of_unserved_features_are_refused_by_name() -> None:
    vectors = json.loads((Path(__file__).parent / "data" / "lighter_sdk_vectors.json").read_text())
    unserved = [c for c in vectors["cases"] if c["tx_type"] in UNSERVED_TX_TYPES]
    names = {c["name"] for c in unserved}
    assert {"create_public_pool", "mint_shares", "stake_assets", "approve_integrator"} <= names
    assert {"update_account_config", "update_account_asset_config"} <= names
    for c in unserved:
        with pytest.raises(CodecError) as err:
            tx_from_json(c["tx_type"], c["tx_info"])
        assert err.value.code == ResultCode.FEATURE_NOT_SUPPORTED, c["name"]
        assert UNSERVED_TX_TYPES[c["tx_type"]] in str(err.value)
