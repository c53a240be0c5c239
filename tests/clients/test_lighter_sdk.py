"""lighter-sdk (PyPI ``lighter-sdk``) against raydex with only the host changed.

The SDK's REST classes parse every answer into its pydantic models (strict types, required
fields), so a test passing here means the real client accepts our wire format. Txs here are
signed by raydex's own ``sign_tx`` (Lighter's scheme, through ``Trader``) and sent with the SDK's
own ``TransactionApi`` transport; ``test_lighter_sdk_signer.py`` has the SDK's signer trade.

Each test places orders at its own price levels (asks 3300+, bids 2700-, crosses on BTC), reads
nonces from the server and asserts on what it placed itself, because the stack is shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from raydex.actors.local import Trader
from raydex.codecs import ResultCode, TxType, tx_to_json_str, usdc_to_str

if TYPE_CHECKING:
    from conftest import Exchange

lighter = pytest.importorskip("lighter", reason="pip install lighter-sdk")

WAIT_S = 10.0
CREATE = int(TxType.CREATE_ORDER)
CANCEL = int(TxType.CANCEL_ORDER)


class Sdk:
    """The SDK's API classes on one ``ApiClient`` pointed at the replica."""

    def __init__(self, client: Any) -> None:
        self.order = lighter.OrderApi(client)
        self.account = lighter.AccountApi(client)
        self.tx = lighter.TransactionApi(client)
        self.block = lighter.BlockApi(client)
        self.root = lighter.RootApi(client)

    async def sync_nonce(self, t: Trader) -> int:
        """Set the trader's next nonce from ``nextNonce`` (as a Lighter bot does on start)."""
        t.nonce = (await self.tx.next_nonce(account_index=t.account, api_key_index=t.api_key)).nonce
        return t.nonce

    async def send(self, tx: Any) -> Any:
        return await self.tx.send_tx(tx_type=_tx_type(tx), tx_info=tx_to_json_str(tx))


def _tx_type(tx: Any) -> int:
    return CANCEL if type(tx).__name__ == "CancelOrder" else CREATE


@asynccontextmanager
async def sdk(exchange: Exchange) -> AsyncIterator[Sdk]:
    client = lighter.ApiClient(configuration=lighter.Configuration(host=exchange.base_url))
    try:
        yield Sdk(client)
    finally:
        await client.close()


async def _collateral_of(exchange: Exchange, account: int) -> str:
    """The replica's own cached collateral, as the decimal string the API must show."""
    return usdc_to_str(exchange.replica.state.accounts[account].collateral)


def run(exchange: Exchange, body: Callable[[Sdk], Awaitable[None]]) -> None:
    async def main() -> None:
        async with sdk(exchange) as api:
            await body(api)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_the_sdk_reads_status_and_our_markets_with_their_decimals_and_fees(
    exchange: Exchange,
) -> None:
    async def body(api: Sdk) -> None:
        status = await api.root.status()
        assert status.status == 200 and status.timestamp > 1_700_000_000
        assert (await api.root.info()).contract_address == ""

        books = (await api.order.order_books()).order_books
        assert [(b.market_id, b.symbol, b.status) for b in books] == [
            (0, "ETH", "active"),
            (1, "BTC", "active"),
        ]
        eth = books[0]
        assert (eth.supported_price_decimals, eth.supported_size_decimals) == (2, 4)
        assert (eth.taker_fee, eth.maker_fee, eth.min_base_amount) == (
            "0.000200",
            "0.000000",
            "0.0001",
        )

        detail = (await api.order.order_book_details(market_id=1)).order_book_details
        assert len(detail) == 1 and detail[0].symbol == "BTC"
        assert detail[0].mark_price == "3000.00"
        assert (
            detail[0].maintenance_margin_fraction,
            detail[0].default_initial_margin_fraction,
        ) == (
            120,
            500,
        )

    run(exchange, body)


def test_the_sdk_reads_our_api_key_nonce_and_collateral(exchange: Exchange) -> None:
    carol = exchange.traders[3]

    async def body(api: Sdk) -> None:
        keys = (await api.account.apikeys(account_index=carol.account, api_key_index=255)).api_keys
        assert [(k.account_index, k.api_key_index, k.public_key) for k in keys] == [
            (carol.account, carol.api_key, bytes(carol.pub).hex())
        ]
        accounts = (await api.account.account(by="index", value=str(carol.account))).accounts
        assert len(accounts) == 1 and accounts[0].index == carol.account
        acct = accounts[0]
        assert Decimal(acct.collateral) > 0
        assert acct.collateral == exchange.run(_collateral_of(exchange, carol.account))
        assert [(a.symbol, a.balance) for a in acct.assets] == [("USDC", acct.collateral)]
        assert Decimal(acct.available_balance) <= Decimal(acct.collateral)

    run(exchange, body)


def test_an_order_sent_through_the_sdk_rests_in_the_book_it_reads(exchange: Exchange) -> None:
    alice = exchange.traders[1]

    async def body(api: Sdk) -> None:
        nonce = await api.sync_nonce(alice)
        coi = exchange.next_coi()
        reply = await api.send(alice.order(330_000, 250, is_ask=1, coi=coi))
        assert reply.code == 200 and len(reply.tx_hash) == 80

        assert (await api.tx.next_nonce(account_index=alice.account, api_key_index=0)).nonce == (
            nonce + 1
        )
        book = await api.order.order_book_orders(market_id=0, limit=100)
        ours = [
            o for o in book.asks if o.owner_account_index == alice.account and o.price == "3300.00"
        ]
        assert [(o.initial_base_amount, o.remaining_base_amount) for o in ours] == [
            ("0.0250", "0.0250")
        ]
        assert book.total_asks >= 1

        tx = await api.tx.tx(by="hash", value=reply.tx_hash)
        assert (tx.hash, tx.type, tx.status, tx.account_index, tx.nonce) == (
            reply.tx_hash,
            CREATE,
            2,
            alice.account,
            nonce,
        )
        height = (await api.block.current_height()).height
        assert height >= tx.block_height >= 1

        # cancel it again through the SDK: the book the SDK reads no longer has it
        cancel = await api.send(alice.cancel(ours[0].order_index))
        assert cancel.code == 200
        book = await api.order.order_book_orders(market_id=0, limit=100)
        assert all(o.order_index != ours[0].order_index for o in book.asks)

    run(exchange, body)


def test_a_batch_sent_through_the_sdk_executes_every_tx(exchange: Exchange) -> None:
    alice = exchange.traders[1]

    async def body(api: Sdk) -> None:
        nonce = await api.sync_nonce(alice)
        txs = [
            alice.order(270_000 - i * 100, 100, is_ask=0, coi=exchange.next_coi()) for i in range(3)
        ]
        reply = await api.tx.send_tx_batch(
            tx_types=json.dumps([CREATE] * 3),
            tx_infos=json.dumps([tx_to_json_str(t) for t in txs]),
        )
        assert reply.code == 200 and len(reply.tx_hash) == 3
        assert (await api.tx.next_nonce(account_index=alice.account, api_key_index=0)).nonce == (
            nonce + 3
        )
        book = await api.order.order_book_orders(market_id=0, limit=100)
        prices = {o.price for o in book.bids if o.owner_account_index == alice.account}
        assert {"2700.00", "2699.00", "2698.00"} <= prices

    run(exchange, body)


def test_a_cross_shows_up_in_recent_trades_and_in_both_accounts_positions(
    exchange: Exchange,
) -> None:
    bob, carol = exchange.traders[2], exchange.traders[3]

    async def body(api: Sdk) -> None:
        await api.sync_nonce(bob)
        await api.sync_nonce(carol)
        # carol sells, bob buys (the ccxt tests cross the same way, so signs stay put)
        maker = await api.send(
            carol.order(301_000, 40, is_ask=1, market=1, coi=exchange.next_coi())
        )
        taker = await api.send(bob.order(301_000, 40, is_ask=0, market=1, coi=exchange.next_coi()))
        assert (maker.code, taker.code) == (200, 200)

        trades = (await api.order.recent_trades(market_id=1, limit=10)).trades
        mine = [t for t in trades if t.tx_hash == taker.tx_hash]
        assert len(mine) == 1
        t = mine[0]
        assert (t.price, t.size, t.usd_amount) == ("3010.00", "0.0040", "12.040000")
        assert (t.ask_account_id, t.bid_account_id, t.is_maker_ask) == (
            carol.account,
            bob.account,
            True,
        )
        assert t.market_id == 1 and t.market_symbol == "BTC"

        for who, sign in ((bob, 1), (carol, -1)):
            acct = (await api.account.account(by="index", value=str(who.account))).accounts[0]
            pos = {p.market_id: p for p in acct.positions}[1]
            assert (pos.symbol, pos.sign) == ("BTC", sign)
            assert Decimal(pos.position) >= Decimal("0.0040")

    run(exchange, body)


def test_a_stale_nonce_comes_back_as_the_sdks_error_with_our_code(exchange: Exchange) -> None:
    alice = exchange.traders[1]

    async def body(api: Sdk) -> None:
        nonce = await api.sync_nonce(alice)
        alice.nonce = nonce - 1 if nonce > 0 else nonce + 5
        stale = alice.order(340_000, 1, is_ask=1, coi=exchange.next_coi())
        with pytest.raises(lighter.exceptions.BadRequestException) as err:
            await api.send(stale)
        assert err.value.status == 400
        assert json.loads(err.value.body)["code"] == int(ResultCode.INVALID_NONCE)
        assert (
            await api.tx.next_nonce(account_index=alice.account, api_key_index=0)
        ).nonce == nonce

    run(exchange, body)


def test_the_sdk_ws_client_sees_our_order_and_our_account_change(exchange: Exchange) -> None:
    """``WsClient`` keeps its own book from ``subscribed`` + ``update`` messages; the ask we place
    must appear in it, and the account channel must report the new open order."""
    bob = exchange.traders[2]
    books: list[dict[str, Any]] = []
    accounts: list[dict[str, Any]] = []
    ws = lighter.WsClient(
        ws_url=exchange.ws_url,
        order_book_ids=[0],
        account_ids=[bob.account],
        on_order_book_update=lambda market, book: books.append(
            {"market": market, "asks": [dict(a) for a in book["asks"]]}
        ),
        on_account_update=lambda account, msg: accounts.append(msg),
    )

    async def until(cond: Callable[[], bool], what: str) -> None:
        for _ in range(int(WAIT_S / 0.01)):
            if cond():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the WsClient never saw {what}")

    async def body(api: Sdk) -> None:
        task = asyncio.get_running_loop().create_task(ws.run_async())
        try:
            await until(lambda: bool(books) and bool(accounts), "its subscription snapshots")
            assert books[0]["market"] == "0" and accounts[0]["type"] == "subscribed/account_all"
            orders_before = accounts[-1]["total_order_count"]

            await api.sync_nonce(bob)
            reply = await api.send(bob.order(345_600, 70, is_ask=1, coi=exchange.next_coi()))
            assert reply.code == 200

            def has_ask() -> bool:
                return bool(books) and {"price": "3456.00", "size": "0.0070"} in books[-1]["asks"]

            await until(has_ask, "the ask in its order book")
            await until(
                lambda: accounts[-1]["total_order_count"] == orders_before + 1,
                "the account's new open order",
            )
            assert accounts[-1]["type"] == "update/account_all"
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            if ws.ws is not None:
                await ws.ws.close()

    run(exchange, body)


def test_the_sdk_reads_block_commitments_up_to_the_current_height(exchange: Exchange) -> None:
    alice = exchange.traders[1]

    async def body(api: Sdk) -> None:
        await api.sync_nonce(alice)
        reply = await api.send(alice.order(262_000, 10, is_ask=0, coi=exchange.next_coi()))
        height = (await api.tx.tx(by="hash", value=reply.tx_hash)).block_height
        for _ in range(int(WAIT_S / 0.01)):  # the committer trails the replica (off the hot path)
            with contextlib.suppress(lighter.exceptions.NotFoundException):
                found = (await api.block.block(by="height", value=str(height))).blocks
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"no commitment for height {height}")
        assert [b.height for b in found] == [height]
        assert len(found[0].commitment) == 64 and found[0].size >= 1

        latest = (await api.block.blocks(limit=3)).blocks
        heights = [b.height for b in latest]
        assert len(heights) == 3 and heights == sorted(heights, reverse=True)
        assert heights[0] >= height

    run(exchange, body)


def test_the_sdk_reads_candles_funding_stats_txs_and_announcements(exchange: Exchange) -> None:
    """``CandlestickApi`` (candles, fundings), ``FundingApi``, ``OrderApi.exchange_stats``,
    ``TransactionApi`` (txs, blockTxs, tx with its info), ``AnnouncementApi``: each parses our
    answer into its pydantic model."""
    bob, carol = exchange.traders[2], exchange.traders[3]

    async def body(api: Sdk) -> None:
        client = api.order.api_client
        candles_api = lighter.CandlestickApi(client)
        await api.sync_nonce(bob)
        await api.sync_nonce(carol)
        order = carol.order(302_200, 20, is_ask=1, market=1, coi=exchange.next_coi())
        await api.send(order)
        taker = await api.send(bob.order(302_200, 20, is_ask=0, market=1, coi=exchange.next_coi()))
        assert taker.code == 200
        trade = next(t for t in (await api.order.recent_trades(market_id=1, limit=20)).trades
                 if t.tx_hash == taker.tx_hash)  # fmt: skip
        now = trade.timestamp
        got = await candles_api.candles(
            market_id=1, resolution="1m", start_timestamp=now - 60_000, end_timestamp=now,
            count_back=0,
        )  # fmt: skip
        assert got.r == "1m"
        candle = got.c[-1]
        assert candle.t == now - now % 60_000 and candle.l <= 3022.0 <= candle.h
        fundings = await candles_api.fundings(
            market_id=1, resolution="1h", start_timestamp=0, end_timestamp=now // 1000,
            count_back=10,
        )  # fmt: skip
        assert fundings.resolution == "1h"
        rates = await lighter.FundingApi(client).funding_rates()
        assert {(r.market_id, r.exchange) for r in rates.funding_rates} == {
            (0, "lighter"),
            (1, "lighter"),
        }
        stats = await api.order.exchange_stats()
        assert stats.total == 2 and stats.daily_trades_count >= 1
        tx = await api.tx.tx(by="hash", value=taker.tx_hash)
        assert json.loads(tx.info)["Price"] == 302_200
        block = await api.tx.block_txs(by="block_height", value=str(tx.block_height))
        assert taker.tx_hash in [t.hash for t in block.txs]
        recent = await api.tx.txs(limit=100)
        assert recent.txs and all(1 <= t.type <= 64 for t in recent.txs)
        assert (await lighter.AnnouncementApi(client).announcement()).announcements == []

    run(exchange, body)
