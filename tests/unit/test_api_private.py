"""The authenticated reads of issue 11 (accountActiveOrders, accountInactiveOrders, trades,
deposit/withdraw/transfer history, positionFunding, liquidations, pnl, accountTxs,
accountLimits, accountMetadata): Lighter's shapes, validated strictly by lighter-sdk's models,
their contents checked against what was done, and every bad token refused with nothing served.
Real aiohttp server on 127.0.0.1, real BlockProducer, real signatures."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from kit.api import with_served
from pydantic import BaseModel

from raydex.actors.local import FAR_MS, LocalExchange, Trader, new_exchange
from raydex.actors.replica import ReplicaState
from raydex.actors.replica.cache.ledger import Ledger, LedgerCaps
from raydex.codecs import (
    ApplyFunding,
    Deposit,
    ResultCode,
    SetMarkPrice,
    Transfer,
    Withdraw,
    sign_tx,
    signing,
    tx_to_json_str,
    tx_type_of,
)

with warnings.catch_warnings():  # the SDK's own imports of deprecated websockets APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import lighter.models as models

T = TypeVar("T")
USDC = 1_000_000


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def token(t: Trader, lifetime_s: int = 600, account: int | None = None) -> str:
    """A Lighter auth token signed by ``t``'s API key."""
    deadline = int(time.time()) + lifetime_s
    message = signing.auth_token_message(
        deadline, t.account if account is None else account, t.api_key
    )
    return f"{message}:{signing.sign(t.seed, signing.auth_token_hash(message)).hex()}"


class Rig:
    def __init__(self, ex: LocalExchange, state: ReplicaState, server: TestServer) -> None:
        self.ex, self.state, self.server = ex, state, server
        self.http: aiohttp.ClientSession

    async def get(
        self, path: str, auth: str | None = None, header: bool = True, **params: Any
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": auth} if auth and header else {}
        if auth and not header:
            params["auth"] = auth
        url = str(self.server.make_url(path))
        async with self.http.get(url, params=params, headers=headers) as r:
            return r.status, await r.json()

    async def valid(
        self, model: type[BaseModel], path: str, t: Trader, **params: Any
    ) -> dict[str, Any]:
        status, body = await self.get(path, token(t), **params)
        assert status == 200, (path, body)
        model.model_validate(body, strict=True)
        return body

    async def send(self, tx: Any) -> dict[str, Any]:
        form = {"tx_type": str(tx_type_of(type(tx))), "tx_info": tx_to_json_str(tx)}
        async with self.http.post(str(self.server.make_url("/api/v1/sendTx")), data=form) as r:
            body: dict[str, Any] = await r.json()
        assert body["code"] == 200, body
        return body

    async def signed(self, t: Trader, tx: Any) -> dict[str, Any]:
        t.nonce += 1
        return await self.send(sign_tx(tx, t.seed))


def with_rig(body: Callable[[Rig, list[Trader]], Awaitable[None]], n: int = 2) -> None:
    with_served([Trader(10 + i) for i in range(n)], Rig, body)


# ---- orders and fills ---------------------------------------------------------------------------


def test_open_and_closed_orders_and_own_fills_are_served_in_lighters_shapes() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        await r.send(a.order(310_000, 700, 1, coi=77))  # rests, then partly filled
        await r.send(a.order(320_000, 100, 1, coi=78))  # rests, then cancelled
        await r.send(b.order(310_000, 300, 0))  # takes 300 of the first ask
        _, mine = await r.get("/api/v1/accountActiveOrders", token(a), account_index=a.account)
        second = next(o for o in mine["orders"] if o["client_order_index"] == 78)
        await r.send(a.cancel(second["order_index"]))

        active = await r.valid(
            models.Orders, "/api/v1/accountActiveOrders", a, account_index=a.account, market_id=0
        )
        [o] = active["orders"]
        assert (o["client_order_index"], o["status"], o["side"]) == (77, "open", "sell")
        assert (o["remaining_base_amount"], o["filled_base_amount"]) == ("0.0400", "0.0300")
        assert o["filled_quote_amount"] == "93.000000"  # 0.03 x 3100

        done = await r.valid(
            models.Orders, "/api/v1/accountInactiveOrders", a,
            account_index=a.account, market_id=0, limit=10,
        )  # fmt: skip
        assert [(o["client_order_index"], o["status"]) for o in done["orders"]] == [
            (78, "canceled")
        ]
        taker = await r.valid(
            models.Orders, "/api/v1/accountInactiveOrders", b, account_index=b.account, limit=10
        )
        [t] = taker["orders"]
        assert (t["status"], t["filled_base_amount"], t["is_ask"]) == ("filled", "0.0300", False)

        fills = await r.valid(
            models.Trades, "/api/v1/trades", a, account_index=a.account, sort_by="timestamp",
            limit=10,
        )  # fmt: skip
        [f] = fills["trades"]
        assert (f["price"], f["size"], f["ask_account_id"], f["bid_account_id"]) == (
            "3100.00", "0.0300", a.account, b.account,
        )  # fmt: skip
        bids_only = await r.valid(
            models.Trades, "/api/v1/trades", a, account_index=a.account, ask_filter=0
        )
        assert bids_only["trades"] == []  # a sold
        # without an account: the market's tape, public
        status, tape = await r.get("/api/v1/trades", market_id=0, limit=5)
        assert status == 200 and len(tape["trades"]) == 1
        models.Trades.model_validate(tape, strict=True)

    with_rig(body)


# ---- flows, funding, pnl, txs -------------------------------------------------------------------


def test_deposits_withdrawals_and_transfers_are_listed_with_their_amounts() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        r.ex.run([Deposit(a.account, 25 * USDC)], operator=True)
        await r.signed(a, Withdraw(a.account, 0, 3, 0, 7 * USDC, FAR_MS, a.nonce, bytes(80)))
        await r.signed(
            a,
            Transfer(
                a.account,
                0,
                b.account,
                3,
                0,
                0,
                3 * USDC,
                0,
                bytes(32),
                bytes(65),
                FAR_MS,
                a.nonce,
                bytes(80),
            ),
        )

        deposits = await r.valid(
            models.DepositHistory, "/api/v1/deposit/history", a, account_index=a.account
        )
        # newest first: this test's deposit, then the setup's
        assert [d["amount"] for d in deposits["deposits"]][:1] == ["25.000000"]
        withdraws = await r.valid(
            models.WithdrawHistory, "/api/v1/withdraw/history", a, account_index=a.account
        )
        assert [(w["amount"], w["status"]) for w in withdraws["withdraws"]] == [
            ("7.000000", "completed")
        ]
        out = await r.valid(
            models.TransferHistory, "/api/v1/transfer/history", a, account_index=a.account
        )
        [o] = out["transfers"]
        assert (o["type"], o["amount"], o["from_account_index"], o["to_account_index"]) == (
            "L2TransferOutflow", "3.000000", a.account, b.account,
        )  # fmt: skip
        into = await r.valid(
            models.TransferHistory, "/api/v1/transfer/history", b, account_index=b.account
        )
        assert [i["type"] for i in into["transfers"]] == ["L2TransferInflow"]

        pnl = await r.valid(
            models.AccountPnL, "/api/v1/pnl", a, by="index", value=a.account, resolution="1d"
        )
        total_in = sum(p["inflow"] for p in pnl["pnl"])
        total_out = sum(p["outflow"] for p in pnl["pnl"])
        assert total_out == 10 and total_in >= 25

        txs = await r.valid(
            models.Txs, "/api/v1/accountTxs", a, by="account_index", value=a.account, limit=10
        )
        assert [t["type"] for t in txs["txs"]][:2] == [12, 13]  # newest first

    with_rig(body)


def test_the_cheap_account_reads_and_empty_histories_validate() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a = ts[0]
        await r.valid(models.AccountLimits, "/api/v1/accountLimits", a, account_index=a.account)
        meta = await r.valid(
            models.AccountMetadatas, "/api/v1/accountMetadata", a, by="index", value=a.account
        )
        assert meta["account_metadatas"][0]["account_index"] == a.account
        fundings = await r.valid(
            models.PositionFundings, "/api/v1/positionFunding", a, account_index=a.account
        )
        assert fundings["position_fundings"] == []
        liq = await r.valid(
            models.LiquidationInfos, "/api/v1/liquidations", a, account_index=a.account
        )
        assert liq["liquidations"] == []

    with_rig(body)


# ---- refusals -----------------------------------------------------------------------------------

PRIVATE = [
    ("/api/v1/accountActiveOrders", {"market_id": 0}),
    ("/api/v1/accountInactiveOrders", {"limit": 10}),
    ("/api/v1/trades", {}),
    ("/api/v1/deposit/history", {}),
    ("/api/v1/withdraw/history", {}),
    ("/api/v1/transfer/history", {}),
    ("/api/v1/positionFunding", {}),
    ("/api/v1/liquidations", {}),
    ("/api/v1/accountLimits", {}),
]


def test_every_private_read_refuses_missing_foreign_expired_and_forged_tokens() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        forged = token(a)[:-4] + ("0000" if not token(a).endswith("0000") else "1111")
        cases = [
            (None, 401, ResultCode.AUTH_REQUIRED),
            (token(b), 403, ResultCode.AUTH_ACCOUNT_MISMATCH),
            (token(b, account=a.account), 401, ResultCode.INVALID_SIGNATURE),
            (token(a, lifetime_s=-5), 401, ResultCode.AUTH_EXPIRED),
            (token(a, lifetime_s=9 * 3600), 401, ResultCode.AUTH_DEADLINE_TOO_FAR),
            (forged, 401, ResultCode.INVALID_SIGNATURE),
            ("not-a-token", 401, ResultCode.AUTH_MALFORMED),
        ]
        for path, params in PRIVATE:
            for tok, status, code in cases:
                got, reply = await r.get(path, tok, account_index=a.account, **params)
                assert (got, reply["code"]) == (status, code), (path, tok, reply)
                assert set(reply) == {"code", "message"}, reply  # nothing served
        # accountTxs names its account in ``value``: the same refusals, nothing of the list served
        for tok, status, code in cases:
            got, reply = await r.get(
                "/api/v1/accountTxs", tok, by="account_index", value=a.account, limit=10
            )
            assert (got, reply["code"]) == (status, code), ("accountTxs", tok, reply)
            assert set(reply) == {"code", "message"}, reply
        # the same token works as the ``auth`` parameter
        status, reply = await r.get(
            "/api/v1/deposit/history", token(a), header=False, account_index=a.account
        )
        assert status == 200 and reply["code"] == 200
        status, reply = await r.get(
            "/api/v1/pnl", token(b), by="index", value=a.account, resolution="1h"
        )
        assert (status, reply["code"]) == (403, ResultCode.AUTH_ACCOUNT_MISMATCH)

    with_rig(body)


def test_bad_parameters_of_private_reads_get_a_clear_code() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a = ts[0]
        tok = token(a)
        for path, params in [
            ("/api/v1/accountInactiveOrders", {"account_index": a.account}),  # limit required
            ("/api/v1/accountInactiveOrders", {"account_index": a.account, "limit": 1000}),
            ("/api/v1/trades", {"account_index": a.account, "cursor": "abc"}),
            ("/api/v1/trades", {"account_index": a.account, "sort_by": "size"}),
            ("/api/v1/pnl", {"by": "index", "value": a.account, "resolution": "5m"}),
            ("/api/v1/accountActiveOrders", {"account_index": "x"}),
        ]:
            status, reply = await r.get(path, tok, **params)
            assert (status, reply["code"]) == (400, ResultCode.INVALID_PARAM), (path, reply)
        status, reply = await r.get("/api/v1/accountActiveOrders", tok, account_index=999)
        assert (status, reply["code"]) == (404, ResultCode.ACCOUNT_NOT_FOUND)

    with_rig(body)


# ---- the ledger's bounds and resyncs -------------------------------------------------------------


def test_the_ledger_keeps_at_most_its_caps_and_survives_a_resync_with_the_gap_recorded() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        r.state.ledger = Ledger(LedgerCaps(orders=3, trades=2), from_seq=r.state.seq + 1)
        r.state.ledger.last_seq = r.state.seq
        for i in range(5):
            await r.send(a.order(305_000 + i, 10, 1))
            await r.send(b.order(305_000 + i, 10, 0))
        log = r.state.ledger.log(a.account)
        assert log is not None and len(log.orders) == 3 and len(log.trades) == 2
        seq = r.state.seq
        # a resync to a snapshot taken further on keeps the log and records the skipped blocks
        fresh = ReplicaState.from_records(list(r.state.records()), seq + 5, r.state.height)
        r.state.reload(fresh)
        assert r.state.ledger.gaps == [(seq + 1, seq + 5)]
        assert r.state.ledger.log(a.account) is log
        # a block at or below what the ledger holds is never logged twice
        before = len(log.orders)
        r.state.ledger.add_block((), (), seq, 0)
        assert r.state.ledger.pending == 0 and len(log.orders) == before

    with_rig(body)


def test_the_ledger_keeps_at_most_max_entries_over_all_accounts_forgetting_the_least_active() -> (
    None
):
    """The entry budget bounds memory however many accounts trade: past it, the least recently
    active account's whole log goes (its reads start empty), the counts stay exact."""

    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b, c = ts
        ledger = r.state.ledger = Ledger(LedgerCaps(max_entries=24), from_seq=r.state.seq + 1)
        ledger.last_seq = r.state.seq
        for i in range(3):  # a and b trade with each other: both logs grow
            await r.send(a.order(305_000 + i, 10, 1))
            await r.send(b.order(305_000 + i, 10, 0))
        ledger.catch_up()

        def held() -> int:
            return sum(
                len(x) for log in ledger._logs.values()
                for x in (log.orders, log.trades, log.flows, log.fundings, log.liquidations,
                          log.txs, log.pnl)
            )  # fmt: skip

        assert ledger.entries == held() <= 24 + 8  # one block's entries past the check at most
        for i in range(3):  # now c trades: the least recently active logs make room
            await r.send(c.order(305_000 + i, 10, 1))
            await r.send(b.order(305_000 + i, 10, 0))
        ledger.catch_up()
        assert ledger.entries == held() <= 24 + 8
        assert ledger.dropped >= 1
        assert ledger.log(a.account) is None  # a was the least recently active: forgotten
        log_b, log_c = ledger.log(b.account), ledger.log(c.account)
        assert log_b is not None and log_c is not None  # the active ones are kept
        assert log_b.entries >= 1 and log_c.entries >= 1

    with_rig(body, n=3)


def test_a_fresh_replica_serves_active_orders_from_its_snapshot_and_history_from_then_on() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a = ts[0]
        await r.send(a.order(330_000, 10, 1, coi=5))
        fresh = ReplicaState.from_records(list(r.state.records()), r.state.seq, r.state.height)
        assert fresh.ledger.from_seq == r.state.seq + 1 and fresh.ledger.log(a.account) is None
        assert [o.client_order_index for o in fresh.accounts[a.account].orders.values()] == [5]

    with_rig(body)


@pytest.mark.parametrize("cap", ["orders", "max_accounts", "max_entries"])
def test_ledger_caps_below_one_are_refused(cap: str) -> None:
    with pytest.raises(ValueError, match=cap):
        LedgerCaps(**{cap: 0})


def test_funding_payments_and_a_liquidation_show_in_the_accounts_history() -> None:
    traders = [Trader(20), Trader(21), Trader(22)]

    async def main() -> None:
        short, long_, bidder = traders
        ex = new_exchange(traders, usdc=100 * USDC)
        replica = ex.serve()
        server = TestServer(replica.app, host="127.0.0.1", port=0)
        await server.start_server()
        try:
            r = Rig(ex, replica.state, server)
            async with aiohttp.ClientSession() as http:
                r.http = http
                await r.send(short.order(300_000, 1000, 1))
                await r.send(long_.order(300_000, 1000, 0))  # long 0.1 ETH at 3000
                await r.send(bidder.order(250_000, 1000, 0))  # the book that takes it over
                ex.run([ApplyFunding(0, 100_000)], operator=True)  # 0.1%: longs pay 0.30
                ex.run([SetMarkPrice(0, 150_000)], operator=True)  # under maintenance

                paid = await r.valid(
                    models.PositionFundings, "/api/v1/positionFunding", long_,
                    account_index=long_.account,
                )  # fmt: skip
                [p] = paid["position_fundings"]
                assert (p["change"], p["position_side"], p["position_size"]) == (
                    "-0.300000", "long", "0.1000",
                )  # fmt: skip
                got = await r.valid(
                    models.PositionFundings, "/api/v1/positionFunding", short,
                    account_index=short.account,
                )  # fmt: skip
                assert [g["change"] for g in got["position_fundings"]] == ["0.300000"]

                liq = await r.valid(
                    models.LiquidationInfos, "/api/v1/liquidations", long_,
                    account_index=long_.account,
                )  # fmt: skip
                [x] = liq["liquidations"]
                assert (x["trade"]["price"], x["trade"]["size"]) == ("2500.00", "0.1000")
                assert x["trade"]["ask_account_id"] == long_.account  # a long is sold
                pnl = await r.valid(
                    models.AccountPnL, "/api/v1/pnl", long_, by="index", value=long_.account,
                    resolution="1h",
                )  # fmt: skip
                assert sum(e["trade_pnl"] for e in pnl["pnl"]) == -50  # (2500 - 3000) x 0.1
        finally:
            await server.close()

    run(main())


def test_account_orders_finds_open_and_closed_orders_by_client_order_index() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a = ts[0]
        await r.send(a.order(310_000, 100, 1, coi=41))
        await r.send(a.order(320_000, 100, 1, coi=42))
        _, mine = await r.get("/api/v1/accountActiveOrders", token(a), account_index=a.account)
        await r.send(a.cancel(next(o for o in mine["orders"] if o["client_order_index"] == 42)[
            "order_index"]))  # fmt: skip
        # no account_index: the token's account
        got = await r.valid(models.Orders, "/api/v1/accountOrders", a,
                            client_order_indexes="41,42,43")  # fmt: skip
        assert [(o["client_order_index"], o["status"]) for o in got["orders"]] == [
            (41, "open"), (42, "canceled"),
        ]  # fmt: skip
        for bad in ("", "1,x", ",".join(["1"] * 21)):
            status, reply = await r.get(
                "/api/v1/accountOrders", token(a), account_index=a.account, client_order_indexes=bad
            )
            assert (status, reply["code"]) == (400, ResultCode.INVALID_PARAM), bad
        status, reply = await r.get("/api/v1/accountOrders", None, client_order_indexes="41")
        assert (status, reply["code"]) == (401, ResultCode.AUTH_REQUIRED)

    with_rig(body)


def test_a_resync_to_an_older_snapshot_replays_blocks_without_logging_them_twice() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a = ts[0]
        st = r.state
        old, old_seq = list(st.records()), st.seq
        first = r.ex.run([Deposit(a.account, 5 * USDC)], operator=True)
        # the replica resyncs to the snapshot from before that block, and the block comes again
        st.reload(ReplicaState.from_records(old, old_seq, st.height))
        r.ex.deliver(first.frame)
        r.ex.run([Deposit(a.account, 7 * USDC)], operator=True)
        deposits = await r.valid(
            models.DepositHistory, "/api/v1/deposit/history", a, account_index=a.account
        )
        # each deposit once, with its own amount (the replayed block moved the mirrors only)
        assert [d["amount"] for d in deposits["deposits"]][:2] == ["7.000000", "5.000000"]
        assert st.ledger.gaps == []

    with_rig(body)


def test_own_fills_page_through_next_cursor_newest_first() -> None:
    async def body(r: Rig, ts: list[Trader]) -> None:
        a, b = ts
        for i in range(5):
            await r.send(a.order(305_000 + i, 10, 1))
            await r.send(b.order(305_000 + i, 10, 0))
        seen: list[int] = []
        cursor: str | None = None
        for _ in range(5):
            params: dict[str, Any] = {"account_index": a.account, "limit": 2}
            if cursor is not None:
                params["cursor"] = cursor
            page = await r.valid(models.Trades, "/api/v1/trades", a, **params)
            seen += [t["trade_id"] for t in page["trades"]]
            cursor = page.get("next_cursor")
            if cursor is None:
                break
        assert len(seen) == 5 and seen == sorted(seen, reverse=True)
        status, reply = await r.get(
            "/api/v1/deposit/history", token(a), account_index=a.account, cursor="7"
        )
        assert (status, reply["code"]) == (400, ResultCode.INVALID_PARAM)

    with_rig(body)
