"""ccxt's ``lighter`` exchange (``ccxt`` REST and ``ccxt.pro`` WebSocket) against raydex.

Only ``urls.api`` changes (``root``/``public``/``private`` for REST, ``ws`` for ccxt.pro). What
works without Lighter's own signatures: ``fetch_status``, ``fetch_time``, ``load_markets`` (it
reads ``orderBookDetails`` and ``assetDetails``), ``fetch_currencies``, ``fetch_order_book``,
``fetch_ticker(s)``, ``fetch_balance`` / ``fetch_positions`` / ``fetch_accounts`` given an
``accountIndex``, recent trades through the implicit ``publicGetRecentTrades`` (this ccxt has no
public ``fetch_trades`` for lighter), ``watch_order_book``, ``watch_trades``, ``watch_ticker`` and
``watch_tickers``. Txs are signed
with raydex's ``sign_tx`` (Lighter's Schnorr/ECgFp5 scheme) and sent through ccxt's own transport
(``publicPostSendTx``); ccxt's own ``create_order`` (its bundled Lighter signer) is not driven
here yet.

Each test places orders at its own price levels and asserts on what it placed itself (the stack
is shared with the lighter-sdk tests).
"""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from raydex.actors.local import Trader
from raydex.codecs import TxType, tx_to_json_str

if TYPE_CHECKING:
    from conftest import Exchange

ccxt = pytest.importorskip("ccxt", reason="pip install ccxt")
ccxt_pro = pytest.importorskip("ccxt.pro")

ETH, BTC = "ETH/USDC:USDC", "BTC/USDC:USDC"
CREATE = int(TxType.CREATE_ORDER)
WAIT_S = 10.0


def _urls(exchange: Exchange) -> dict[str, Any]:
    base = exchange.base_url
    return {"api": {"root": base, "public": base, "private": base, "ws": exchange.ws_url}}


@pytest.fixture(scope="module")
def ccxt_lighter(exchange: Exchange) -> Any:
    ex = ccxt.lighter({"urls": _urls(exchange), "timeout": 10_000, "enableRateLimit": False})
    ex.load_markets()
    return ex


def _send(ex: Any, t: Trader, tx: Any) -> dict[str, Any]:
    reply: dict[str, Any] = ex.publicPostSendTx({"tx_type": CREATE, "tx_info": tx_to_json_str(tx)})
    return reply


def _sync_nonce(ex: Any, t: Trader) -> None:
    q = {"account_index": t.account, "api_key_index": t.api_key}
    t.nonce = int(ex.publicGetNextNonce(q)["nonce"])


def test_ccxt_reads_status_time_and_our_markets_with_precision_and_fees(
    ccxt_lighter: Any,
) -> None:
    ex = ccxt_lighter
    assert ex.fetch_status()["status"] == "ok"
    assert ex.fetch_time() > 1_700_000_000_000
    assert sorted(ex.markets) == [BTC, ETH]
    eth = ex.market(ETH)
    assert (eth["id"], eth["type"], eth["settle"], eth["active"]) == ("0", "swap", "USDC", True)
    assert eth["precision"] == {"amount": 0.0001, "price": 0.01}
    assert (eth["taker"], eth["maker"], eth["limits"]["amount"]["min"]) == (0.0002, 0.0, 0.0001)
    assert eth["limits"]["cost"]["max"] is None
    assert ex.fetch_currencies()["USDC"]["precision"] == 0.000001


def test_ccxt_order_book_shows_the_orders_we_sent_through_its_transport(
    exchange: Exchange, ccxt_lighter: Any
) -> None:
    ex = ccxt_lighter
    alice = exchange.traders[1]
    _sync_nonce(ex, alice)
    assert (
        _send(ex, alice, alice.order(335_500, 120, is_ask=1, coi=exchange.next_coi()))["code"]
        == 200
    )
    assert (
        _send(ex, alice, alice.order(264_500, 30, is_ask=0, coi=exchange.next_coi()))["code"] == 200
    )
    book = ex.fetch_order_book(ETH, 100)
    assert book["symbol"] == ETH
    assert [3355.0, 0.012] in book["asks"]
    assert [2645.0, 0.003] in book["bids"]
    assert book["asks"] == sorted(book["asks"]) and book["bids"] == sorted(
        book["bids"], reverse=True
    )


def test_ccxt_parses_our_trades_ticker_balance_and_positions_after_a_cross(
    exchange: Exchange, ccxt_lighter: Any
) -> None:
    ex = ccxt_lighter
    bob, carol = exchange.traders[2], exchange.traders[3]
    _sync_nonce(ex, bob)
    _sync_nonce(ex, carol)
    assert (
        _send(ex, carol, carol.order(302_500, 60, 1, market=1, coi=exchange.next_coi()))["code"]
        == 200
    )
    taker = _send(ex, bob, bob.order(302_500, 60, 0, market=1, coi=exchange.next_coi()))
    assert taker["code"] == 200

    raw = ex.publicGetRecentTrades({"market_id": 1, "limit": 20})["trades"]
    trades = [
        t for t in ex.parse_trades(raw, ex.market(BTC)) if t["info"]["tx_hash"] == taker["tx_hash"]
    ]
    assert len(trades) == 1
    t = trades[0]
    assert (t["symbol"], t["price"], t["amount"], t["cost"]) == (BTC, 3025.0, 0.006, 18.15)
    assert t["timestamp"] > 1_700_000_000_000

    ticker = ex.fetch_ticker(BTC)
    assert ticker["symbol"] == BTC and ticker["last"] == 3025.0 and ticker["markPrice"] == 3000.0

    for who, side in ((bob, "long"), (carol, "short")):
        positions = ex.fetch_positions([BTC], {"accountIndex": who.account})
        assert [(p["symbol"], p["side"]) for p in positions] == [(BTC, side)]
        assert positions[0]["contracts"] >= 0.006 and positions[0]["leverage"] == 20

        swap = ex.fetch_balance({"accountIndex": who.account, "type": "swap"})
        spot = ex.fetch_balance({"accountIndex": who.account})
        info = swap["info"]["accounts"][0]
        assert Decimal(str(swap["USDC"]["total"])) == Decimal(info["collateral"])
        assert Decimal(str(swap["USDC"]["free"])) == Decimal(info["available_balance"])
        assert spot["USDC"]["total"] == swap["USDC"]["total"]
        assert 0 < swap["USDC"]["free"] < swap["USDC"]["total"]

    assert [a["id"] for a in ex.fetch_accounts({"accountIndex": bob.account})] == [str(bob.account)]


def test_ccxt_pro_watches_our_order_arrive_in_the_book_and_our_trade_in_the_tape(
    exchange: Exchange,
) -> None:
    alice, bob = exchange.traders[1], exchange.traders[2]

    async def run() -> None:
        ex = ccxt_pro.lighter(
            {"urls": _urls(exchange), "timeout": 10_000, "enableRateLimit": False}
        )
        try:
            await ex.load_markets()
            first = await ex.watch_order_book(ETH)
            assert [3366.0, 0.005] not in first["asks"]
            await ex.watch_trades(ETH)

            async def send(tx: Any) -> str:
                info = tx_to_json_str(tx)
                reply = await ex.publicPostSendTx({"tx_type": CREATE, "tx_info": info})
                assert reply["code"] == 200, reply
                return str(reply["tx_hash"])

            for t in (alice, bob):
                q = {"account_index": t.account, "api_key_index": 0}
                t.nonce = int((await ex.publicGetNextNonce(q))["nonce"])
            # ccxt.pro resolves only watches already waiting (an update that lands before the
            # next watch_* call updates ex.orderbooks but wakes nobody): arm the watch, then send.
            watching = asyncio.ensure_future(ex.watch_order_book(ETH))
            await send(alice.order(336_600, 50, 1, coi=exchange.next_coi()))
            book = await watching
            while [3366.0, 0.005] not in book["asks"]:
                book = await ex.watch_order_book(ETH)
            assert book["symbol"] == ETH and book["nonce"] is not None

            # bob's IOC bid lifts the cheapest asks: the tape must show his fill
            tape = asyncio.ensure_future(ex.watch_trades(ETH))
            taker = await send(bob.order(336_600, 50, 0, tif=0, coi=exchange.next_coi()))
            fills = [tr for tr in await tape if tr["info"]["tx_hash"] == taker]
            while not fills:
                fills = [tr for tr in await ex.watch_trades(ETH) if tr["info"]["tx_hash"] == taker]
            assert sum(tr["amount"] for tr in fills) == pytest.approx(0.005)
            assert all(tr["symbol"] == ETH and tr["price"] <= 3366.0 for tr in fills)
        finally:
            await ex.close()

    asyncio.run(asyncio.wait_for(run(), WAIT_S * 3))


def test_ccxt_reports_our_error_code_for_a_rejected_tx(
    exchange: Exchange, ccxt_lighter: Any
) -> None:
    ex = ccxt_lighter
    alice = exchange.traders[1]
    _sync_nonce(ex, alice)
    alice.nonce += 7  # a nonce from the future: the replica's dry-run rejects it
    with pytest.raises(ccxt.ExchangeError) as err:
        _send(ex, alice, alice.order(339_000, 1, 1, coi=exchange.next_coi()))
    assert json.loads(str(err.value).removeprefix("lighter "))["code"] == 21104


def test_ccxt_pro_watches_the_ticker_move_when_a_market_trades(exchange: Exchange) -> None:
    bob, carol = exchange.traders[2], exchange.traders[3]

    async def run() -> None:
        ex = ccxt_pro.lighter(
            {"urls": _urls(exchange), "timeout": 10_000, "enableRateLimit": False}
        )
        try:
            await ex.load_markets()
            everything = await ex.watch_tickers()
            assert set(everything) <= {ETH, BTC} and everything
            first = await ex.watch_ticker(BTC)
            assert first["symbol"] == BTC and first["markPrice"] == 3000.0

            for t in (bob, carol):
                q = {"account_index": t.account, "api_key_index": 0}
                t.nonce = int((await ex.publicGetNextNonce(q))["nonce"])
            watching = asyncio.ensure_future(ex.watch_ticker(BTC))
            for tx in (
                carol.order(303_300, 20, 1, market=1, coi=exchange.next_coi()),
                bob.order(303_300, 20, 0, market=1, coi=exchange.next_coi()),
            ):
                reply = await ex.publicPostSendTx(
                    {"tx_type": CREATE, "tx_info": tx_to_json_str(tx)}
                )
                assert reply["code"] == 200, reply
            ticker = await watching
            while ticker["last"] != 3033.0:
                ticker = await ex.watch_ticker(BTC)
            assert ticker["high"] >= 3033.0 and ticker["baseVolume"] > 0
        finally:
            await ex.close()

    asyncio.run(asyncio.wait_for(run(), WAIT_S * 3))


def test_ccxt_fetches_ohlcv_built_from_our_trades_and_the_funding_rates(
    exchange: Exchange, ccxt_lighter: Any
) -> None:
    ex = ccxt_lighter
    bob, carol = exchange.traders[2], exchange.traders[3]
    _sync_nonce(ex, bob)
    _sync_nonce(ex, carol)
    assert (
        _send(ex, carol, carol.order(302_700, 30, 1, market=1, coi=exchange.next_coi()))["code"]
        == 200
    )
    taker = _send(ex, bob, bob.order(302_700, 30, 0, market=1, coi=exchange.next_coi()))
    assert taker["code"] == 200
    candles = ex.fetch_ohlcv(BTC, "1m", limit=5)
    assert candles, "a minute with our trade has a candle"
    t, _o, h, low, _c, v = candles[-1]
    assert t % 60_000 == 0 and low <= 3027.0 <= h and v >= 0.003
    hourly = ex.fetch_ohlcv(BTC, "1h", limit=2)
    assert hourly[-1][5] >= v
    with pytest.raises(ccxt.ExchangeError) as err:
        ex.publicGetCandles(
            {"market_id": 1, "resolution": "2m", "start_timestamp": 0, "end_timestamp": 1,
             "count_back": 0}
        )  # fmt: skip
    assert '"code":20001' in str(err.value)  # INVALID_PARAM: not one of Lighter's resolutions
    rates = ex.fetch_funding_rates([ETH, BTC])
    assert sorted(rates) == [BTC, ETH]
    raw = {r["market_id"]: r["rate"] for r in ex.publicGetFundingRates()["funding_rates"]}
    assert rates[BTC]["fundingRate"] == raw[1] and rates[ETH]["fundingRate"] == raw[0]
    assert all(abs(r) <= 0.04 for r in raw.values())  # capped at 0.5 % an hour (x 8)
