"""Sub-accounts and transfers through a replica's REST API, as the SDK drives them: a master (an L1
deposit's account) opens a sub-account (tx 9); ``accountsByL1Address`` lists both, ``account``
tells them apart (``account_type``); the sub-account gets its API key by a ChangePubKey the
shared L1 address authorises; transfers within one master need no L1 signature, to another
master they need one; other assets and the spot route are refused naming the feature;
``transferFeeInfo`` answers the fee rule. Every answer validated by the SDK's models (strict);
the snapshot holder's fold of the same blocks has the sequencer's state hash. Real aiohttp server
on 127.0.0.1, real client, real BlockProducer."""

from __future__ import annotations

import asyncio
import time
import warnings
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer
from eth_account import Account as EthAccount
from eth_account.messages import encode_defunct

from raydex.actors.local import FAR_MS, LocalExchange, Trader, eth_market
from raydex.actors.sequencer import BlockProducer
from raydex.actors.snapshot.deltas import DeltaState
from raydex.codecs import (
    DEFAULT_CHAIN_ID,
    MAX_ACCOUNT_INDEX,
    ChangePubKey,
    CreateSubAccount,
    L1Deposit,
    RegisterApiKey,
    ResultCode,
    Transfer,
    Verifier,
    decode_block,
    generate_key,
    lighter_info,
    sign_tx,
    signing,
    tx_to_json_str,
    tx_type_of,
)
from raydex.engine import Engine

with warnings.catch_warnings():  # the SDK's own imports of deprecated websockets APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import lighter.models as models

USDC = 1_000_000
OWNER = EthAccount.from_key("0x" + "21" * 32)
STRANGER = EthAccount.from_key("0x" + "43" * 32)
SUB = MAX_ACCOUNT_INDEX  # the first sub-account's index


def _token(t: Trader) -> str:
    message = signing.auth_token_message(int(time.time()) + 600, t.account, t.api_key)
    return f"{message}:{signing.sign(t.seed, signing.auth_token_hash(message)).hex()}"


def _next(t: Trader, tx: Any) -> Any:
    tx = tx._replace(nonce=t.nonce)
    t.nonce += 1
    return sign_tx(tx, t.seed)


def _transfer(t: Trader, to: int, usdc: int, l1: EthAccount | None = None, **kw: Any) -> Transfer:
    fields = {"asset_index": 3, "from_route_type": 0, "to_route_type": 0, "usdc_fee": 0}
    fields.update(kw)
    tx = _next(t, Transfer(t.account, t.api_key, to, usdc_amount=usdc, memo=b"m" * 32,
                           l1_sig=bytes(65), expired_at=FAR_MS, nonce=0, sig=bytes(80),
                           **fields))  # fmt: skip
    if l1 is not None:
        _, info = lighter_info(tx)
        text = signing.transfer_message(info, DEFAULT_CHAIN_ID)
        tx = tx._replace(l1_sig=bytes(l1.sign_message(encode_defunct(text=text)).signature))
    return tx


class Rig:
    def __init__(self, ex: LocalExchange, server: TestServer, http: aiohttp.ClientSession) -> None:
        self.ex, self.server, self.http = ex, server, http

    async def get(self, path: str, auth: str | None = None, **q: Any) -> tuple[int, Any]:
        headers = {"Authorization": auth} if auth else {}
        async with self.http.get(self.server.make_url(path), params=q, headers=headers) as r:
            return r.status, await r.json()

    async def send(self, tx: Any) -> dict[str, Any]:
        form = {"tx_type": str(tx_type_of(type(tx))), "tx_info": tx_to_json_str(tx)}
        async with self.http.post(self.server.make_url("/api/v1/sendTx"), data=form) as r:
            body: dict[str, Any] = await r.json()
        return body


def test_a_master_opens_a_sub_account_keys_it_and_moves_money_to_it() -> None:
    master, other = Trader(1), Trader(2)
    l1 = bytes.fromhex(OWNER.address[2:])

    async def main() -> None:
        ex = LocalExchange(BlockProducer(Engine(), None, Verifier()))
        ex.run([eth_market(0), L1Deposit(l1, 100 * USDC), RegisterApiKey(1, 0, master.pub)], True)
        ex.run([L1Deposit(bytes.fromhex(STRANGER.address[2:]), 5 * USDC)], True)
        ex.run([RegisterApiKey(2, 0, other.pub)], True)
        replica = ex.serve()
        server = TestServer(replica.app, host="127.0.0.1", port=0)
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as http:
                await _story(Rig(ex, server, http), master, other)
        finally:
            await server.close()
        # a replica booted from the snapshot now, and the holder's fold of every block, agree
        st = replica.state
        booted = ex.serve().state
        assert (booted.masters, booted.sub_accounts) == (st.masters, st.sub_accounts)
        assert booted.state_hash() == st.state_hash()
        folded = DeltaState()
        for frame in ex.frames:
            folded.apply(decode_block(frame).events)
        assert folded.state_hash() == ex.producer.engine.state_hash()

    asyncio.run(asyncio.wait_for(main(), 60))


async def _story(r: Rig, master: Trader, other: Trader) -> None:
    reply = await r.send(_next(master, CreateSubAccount(1, 0, FAR_MS, 0, bytes(80))))
    assert reply["code"] == 200, reply
    status, subs = await r.get("/api/v1/accountsByL1Address", l1_address=OWNER.address)
    assert status == 200
    models.SubAccounts.model_validate(subs, strict=True)
    assert [(a["index"], a["account_type"]) for a in subs["sub_accounts"]] == [(1, 0), (SUB, 1)]
    assert {a["l1_address"] for a in subs["sub_accounts"]} == {OWNER.address}
    _, acc = await r.get("/api/v1/account", by="index", value=SUB)
    models.DetailedAccounts.model_validate(acc, strict=True)
    assert acc["accounts"][0]["account_type"] == 1

    # its key: Lighter's ChangePubKey, signed by the new key, L1Sig by the shared address
    sub = Trader(SUB)
    seed, pub = generate_key()
    sub.seed, sub.pub = seed, pub
    text = signing.change_pub_key_message(pub, 0, SUB, 0)
    l1_sig = bytes(OWNER.sign_message(encode_defunct(text=text)).signature)
    change = sign_tx(ChangePubKey(SUB, 0, pub, l1_sig, FAR_MS, 0, bytes(80)), seed)
    assert (await r.send(change))["code"] == 200
    sub.nonce = 1

    assert (await r.send(_transfer(master, SUB, 40 * USDC)))["code"] == 200  # same master
    assert (await r.send(_transfer(sub, 1, 5 * USDC)))["code"] == 200
    st = r.ex.replicas[0][0]
    assert (st.accounts[1].collateral, st.accounts[SUB].collateral) == (65 * USDC, 35 * USDC)

    refused = await r.send(_transfer(master, 2, USDC))  # another master, no L1 signature
    assert refused["code"] == ResultCode.INVALID_L1_SIGNATURE
    master.nonce -= 1  # (refused by the dry-run: its nonce is not used)
    forged = await r.send(_transfer(master, 2, USDC, l1=STRANGER))
    assert forged["code"] == ResultCode.INVALID_L1_SIGNATURE
    master.nonce -= 1
    assert (await r.send(_transfer(master, 2, USDC, l1=OWNER)))["code"] == 200

    spot = await r.send(_transfer(master, SUB, USDC, to_route_type=1))
    assert spot["code"] == ResultCode.FEATURE_NOT_SUPPORTED and "spot" in spot["message"]
    master.nonce -= 1
    asset = await r.send(_transfer(master, SUB, USDC, asset_index=1))
    assert asset["code"] == ResultCode.FEATURE_NOT_SUPPORTED and "asset 1" in asset["message"]
    master.nonce -= 1

    for to in (SUB, 2, None):
        q = {"account_index": 1} if to is None else {"account_index": 1, "to_account_index": to}
        status, fee = await r.get("/api/v1/transferFeeInfo", _token(master), **q)
        assert status == 200, fee
        models.TransferFeeInfo.model_validate(fee, strict=True)
        assert fee["transfer_fee_usdc"] == 0
    status, denied = await r.get("/api/v1/transferFeeInfo", account_index=1)
    assert status == 401 and denied["code"] == ResultCode.AUTH_REQUIRED
