"""WebSocket fan-out: one serialization per market per block, bounded queues per connection.

::

    apply loop ──publish(Applied)──► Fanout ──bytes──► client queue (deque) ──► writer task ──► ws
      (sync, never awaits a client)     │ one encode per market/channel per block
                                        └─ full queue: conflate order_book per market, then
                                           past ws_conflation_limit: disconnect (30006)

Invariants:

- :meth:`Fanout.publish` is synchronous: it encodes each message once and appends the same
  ``bytes`` to every subscriber's queue; a client is never awaited on this path.
- Per market, each ``order_book`` update's ``begin_nonce`` is the previous message's ``nonce``
  (the ``subscribed`` snapshot's first), also when conflated: a conflated update merges the
  levels it replaces (the latest size per price) and keeps the earliest ``begin_nonce``; the
  writer sends the plain queue before the merged updates.
- Backpressure (named, counted in :meth:`Fanout.stats`): a queue at ``ws_queue_limit``
  conflates book updates, other messages queue up to twice that; past that, or past
  ``ws_conflation_limit`` conflations without catching up, the client is closed (1008, reason
  ``30006``). One writer task per connection sends what is queued in one socket write and waits
  while the peer's socket is full.
- Channels: ``order_book``, ``trade``, ``ticker`` (when the best level moved), ``market_stats``
  (markets that traded; ``all`` in one message), ``candle/{m}/{res}`` (the open candle), per
  market; ``height``; the account channels (account_channels.py).

Cost per block: one render per changed market with subscribers (``_bookjson.c``), one deque
append per subscriber, one encode per slow client per conflated market; account channels as
account_channels.py says.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
from aiohttp import WSMsgType, web

from raydex.codecs import USDC_DECIMALS, MarketRecord, ResultCode

from ..cache import (
    MAX_ANSWER,
    NATIVE_LOOPS,
    RESOLUTIONS,
    Applied,
    BookDelta,
    ReplicaState,
    candle_channel,
    candle_json,
    liquidation_prices,
    parse_candle_channel,
)
from ..http import ApiConfig, AuthError, KeySource, require_account
from ..views import common as views
from ..views import public as public_views
from . import account_channels
from .account_channels import AccountChannel, AccountUpdates, Authorize

try:  # optional C extension (actors/replica/ws/_bookjson.c), built where a compiler is
    from . import _bookjson  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised where no C compiler exists
    _bookjson = None

_encode = msgspec.json.Encoder().encode
_RES_ORDER = {res: i for i, res in enumerate(RESOLUTIONS)}
#: the replica's C paths, each True where it runs and False where its Python twin does (status,
#: ``raydex_replica_native_info``, the loadtest report): the apply's loops and the book render
NATIVE_PATHS: Mapping[str, bool] = {**NATIVE_LOOPS, "book_json": _bookjson is not None}


def book_update_body(
    mi: int,
    offset: int,
    bids: Any,
    asks: Any,
    begin: int,
    nonce: int,
    engine_us: int,
    now_us: int,
    m: MarketRecord,
) -> dict[str, Any]:
    """The ``update/order_book`` message of market ``mi`` (record ``m``): the reference
    :func:`book_update_json` renders, and its fallback."""
    return {
        "channel": f"order_book:{mi}",
        "offset": offset,
        "order_book": {
            "code": 0,
            "asks": views.levels(asks, m),
            "bids": views.levels(bids, m),
            "offset": offset,
            "nonce": nonce,
            "begin_nonce": begin,
        },
        "timestamp": now_us // 1000,
        "engine_ts_us": engine_us,
        "replica_ts_us": now_us,
        "type": "update/order_book",
    }


def book_update_json(
    mi: int,
    offset: int,
    bids: Any,
    asks: Any,
    begin: int,
    nonce: int,
    engine_us: int,
    now_us: int,
    m: MarketRecord,
) -> bytes:
    """:func:`book_update_body` as JSON bytes: rendered in C (``_bookjson.c``, the same bytes as
    ``msgspec`` encodes) for the values it renders, else encoded from the body."""
    if _bookjson is not None:
        data: bytes | None = _bookjson.book_update(
            mi, offset, bids, asks, begin, nonce, engine_us, now_us,
            m.price_decimals, m.size_decimals,
        )  # fmt: skip
        if data is not None:
            return data
    return _encode(book_update_body(mi, offset, bids, asks, begin, nonce, engine_us, now_us, m))


SLOW_CLOSE_CODE = 1008
#: the most payload bytes one socket write of a connection's queued frames carries
WRITE_BATCH_BYTES = 256 * 1024
_LEN1 = struct.Struct("!BB").pack
_LEN2 = struct.Struct("!BBH").pack
_LEN8 = struct.Struct("!BBQ").pack


def text_frame_header(n: int) -> bytes:
    """RFC 6455 header of a server's final, unmasked, uncompressed text frame of ``n`` bytes."""
    if n < 126:
        return _LEN1(0x81, n)
    if n < 65536:
        return _LEN2(0x81, 126, n)
    return _LEN8(0x81, 127, n)


@dataclass(frozen=True, slots=True)
class FanoutStats:
    connections: int
    subscriptions: int
    queue_depths: tuple[int, ...]
    max_queue_depth: int
    messages: int
    conflations: int
    disconnects: int
    offset: int
    #: socket writes (several queued messages go out in one)
    writes: int


@dataclass(slots=True)
class _Msg:
    data: bytes
    #: market of an order_book update (conflatable), else -1
    market: int = -1
    delta: BookDelta | None = None
    engine_us: int = 0


@dataclass(slots=True)
class _Merged:
    bids: dict[int, int]
    asks: dict[int, int]
    begin_nonce: int
    nonce: int
    engine_us: int


@dataclass(eq=False, slots=True)
class Client:
    """One WS connection's subscriptions, queue and writer; owned by the Fanout."""

    ws: web.WebSocketResponse
    transport: asyncio.BaseTransport | None
    channels: set[str] = field(default_factory=set)
    queue: deque[_Msg] = field(default_factory=deque)
    pending: dict[int, _Merged] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    writer: asyncio.Task[None] | None = None
    conflations: int = 0
    closed: bool = False


#: ``market_stats/all`` is parsed to this market argument (Lighter's "all markets" index)
ALL_MARKETS = 255


def split_channel(channel: object) -> tuple[str, int] | None:
    """``"order_book/0"`` -> ``("order_book", 0)``; ``"height"`` -> ``("height", -1)``;
    ``"market_stats/all"`` -> ``("market_stats", ALL_MARKETS)``."""
    if not isinstance(channel, str) or len(channel) > 64:
        return None
    if channel == "height":
        return ("height", -1)
    kind, sep, arg = channel.partition("/")
    if not sep or kind not in ("order_book", "trade", "market_stats", "ticker"):
        return None
    if kind == "market_stats" and arg == "all":
        return (kind, ALL_MARKETS)
    if not arg.isascii() or not arg.isdigit() or len(arg) > 15:
        return None
    return (kind, int(arg))


def _candle(channel: object) -> tuple[int, str] | None:
    """``candle/{market}/{resolution}`` parsed, else None (then it is some other channel)."""
    if not isinstance(channel, str) or len(channel) > 64 or not channel.startswith("candle/"):
        return None
    return parse_candle_channel(channel)


def channel_key(kind: str, arg: int) -> str:
    """The ``channel`` field of replies: ``order_book:0``, ``market_stats:all``, ``height``."""
    if arg < 0:
        return kind
    if kind == "market_stats" and arg == ALL_MARKETS:
        return "market_stats:all"
    return f"{kind}:{arg}"


class Fanout:
    """Connections, channel subscriptions and the per-block publish; see the module docstring."""

    def __init__(
        self, state: ReplicaState, config: ApiConfig, authorize: Authorize | None = None
    ) -> None:
        self.state = state
        self.config = config
        #: checks a private account channel's ``auth`` token: Lighter's auth tokens (auth.py)
        #: unless another check is given (the apply benchmark accepts every token)
        self.authorize: Authorize = authorize if authorize is not None else self._check_token
        self.clients: set[Client] = set()
        self._subs: dict[str, set[Client]] = {}
        #: market -> its channel keys (order_book, trade, ticker, market_stats), built once: the
        #: per-block publish looks subscribers up without formatting a key per market and kind
        self._market_keys: dict[int, tuple[str, str, str, str]] = {}
        #: market -> (resolution, key) of each candle channel someone subscribed to (kept, as
        #: ``_subs`` keeps its keys): a block's candles look up these, not every resolution
        self._candle_keys: dict[int, list[tuple[str, str]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.offset = 0
        self.messages = 0
        self.conflations = 0
        self.disconnects = 0
        #: socket writes of frames: ``messages / writes`` is how many go out together
        self.writes = 0
        #: market -> the best (ask, bid) last sent on ``ticker`` (change detection)
        self._tops: dict[int, tuple[Any, Any]] = {}
        #: account -> its account-channel subscriptions (all clients); empty: no account work
        self._watched: dict[int, int] = {}
        #: subscription key -> its parsed account channel
        self._account_keys: dict[str, AccountChannel] = {}
        #: watched accounts' order index -> filled quote (ticks x lots; account_channels.py)
        self._filled: dict[int, int] = {}
        #: watched account -> market -> the position's funding_paid last seen
        self._funding_paid: dict[int, dict[int, int]] = {}

    # ---- connections ----------------------------------------------------------------------------

    def connect(self, ws: web.WebSocketResponse, transport: asyncio.BaseTransport | None) -> Client:
        c = Client(ws, transport)
        if transport is not None and self.config.ws_send_buffer_bytes is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.ws_send_buffer_bytes
                )
        self.clients.add(c)
        c.writer = asyncio.get_running_loop().create_task(self._write(c))
        return c

    def disconnect(self, c: Client) -> None:
        """The connection ended (either side): forget it and stop its writer."""
        self._forget(c)
        if c.writer is not None and c.writer is not asyncio.current_task():
            c.writer.cancel()

    def _forget(self, c: Client) -> None:
        c.closed = True
        self.clients.discard(c)
        for ch in c.channels:
            subs = self._subs.get(ch)
            if subs is not None:
                subs.discard(c)
            acc = self._account_keys.get(ch)
            if acc is not None:
                self._drop_account_key(ch, acc)
        c.channels.clear()
        c.queue.clear()
        c.pending.clear()

    def _drop_slow(self, c: Client) -> None:
        self.disconnects += 1
        self._forget(c)
        task = asyncio.get_running_loop().create_task(self._close_slow(c))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _close_slow(self, c: Client) -> None:
        if c.writer is not None:
            c.writer.cancel()
        reason = f"{int(ResultCode.WS_SLOW_CONSUMER)} slow consumer".encode()
        try:
            await asyncio.wait_for(
                c.ws.close(code=SLOW_CLOSE_CODE, message=reason), self.config.ws_close_timeout_s
            )
        except (TimeoutError, ConnectionError):
            if c.transport is not None:
                c.transport.abort()  # type: ignore[attr-defined]

    # ---- subscriptions --------------------------------------------------------------------------

    def subscribe(self, c: Client, channel: object, auth: object = None) -> tuple[int, str]:
        """Subscribe and queue the channel's snapshot; returns ``(code, message)``. ``auth``:
        the subscribe message's token, checked for the private account channels."""
        acc = account_channels.parse(channel)
        if acc is not None:
            return self._subscribe_account(c, acc, auth)
        candle = _candle(channel)
        parsed = split_channel(channel) if candle is None else ("candle", candle[0])
        if parsed is None:
            return int(ResultCode.WS_INVALID_CHANNEL), f"invalid channel {channel!r}"
        kind, arg = parsed
        key = channel_key(kind, arg) if candle is None else candle_channel(*candle)
        if key in c.channels:
            return int(ResultCode.WS_ALREADY_SUBSCRIBED), f"already subscribed to {channel}"
        if len(c.channels) >= self.config.max_subscriptions:
            return int(ResultCode.WS_TOO_MANY_SUBSCRIPTIONS), "too many subscriptions"
        if candle is None:
            snapshot = self._snapshot(kind, arg, key)
        else:
            snapshot = self._candle_snapshot(candle[0], candle[1], key)
        if snapshot is None:
            return int(ResultCode.WS_INVALID_CHANNEL), f"unknown market or account in {channel}"
        c.channels.add(key)
        self._subs.setdefault(key, set()).add(c)
        if candle is not None:
            known = self._candle_keys.setdefault(candle[0], [])
            if (candle[1], key) not in known:
                known.append((candle[1], key))
                known.sort(key=lambda rk: _RES_ORDER[rk[0]])  # published in RESOLUTIONS order
        self._put(c, _Msg(_encode(snapshot)))
        return int(ResultCode.OK), ""

    def _subscribe_account(self, c: Client, acc: AccountChannel, auth: object) -> tuple[int, str]:
        key = acc.key
        if key in c.channels:
            return int(ResultCode.WS_ALREADY_SUBSCRIBED), f"already subscribed to {key}"
        if len(c.channels) >= self.config.max_subscriptions:
            return int(ResultCode.WS_TOO_MANY_SUBSCRIPTIONS), "too many subscriptions"
        st = self.state
        if acc.account not in st.accounts or (acc.market >= 0 and acc.market not in st.markets):
            return int(ResultCode.WS_INVALID_CHANNEL), f"unknown market or account in {key}"
        if acc.private:
            code, message = self.authorize(auth, acc.account)
            if code != int(ResultCode.OK):
                return code, message
        self._watch(acc.account)  # first: seeds the filled quotes the snapshot shows
        ts_ms = time.time_ns() // 1_000_000
        if acc.kind == "account_all":
            body = self._account_body(acc.account, "subscribed/account_all", ts_ms)
            trades = account_channels.recent_trades(st, acc.account)
            fundings = account_channels.recent_fundings(st, acc.account)
            body.update(account_channels.account_all_extra(st, acc.account, trades, fundings))
        else:
            snap = account_channels.snapshot(st, acc, ts_ms, self._filled)
            assert snap is not None  # account and market checked above
            body = snap
        c.channels.add(key)
        self._subs.setdefault(key, set()).add(c)
        self._account_keys[key] = acc
        self._put(c, _Msg(_encode(body)))
        return int(ResultCode.OK), ""

    def _check_token(self, token: object, account: int) -> tuple[int, str]:
        """Lighter's auth token for ``account`` (auth.py): ``(200, "")`` or its refusal."""
        if token is not None and not isinstance(token, str):
            return int(ResultCode.AUTH_MALFORMED), "auth token must be a string"
        try:
            keys = cast(KeySource, self.state)
            require_account(token, account, time.time(), keys, self.config.auth_max_lifetime_s)
        except AuthError as e:
            return e.code, e.message
        return int(ResultCode.OK), ""

    def _drop_account_key(self, key: str, acc: AccountChannel) -> None:
        """One subscription of ``key`` ended: forget the key once nobody has it (account keys
        are per account: a client cycling through accounts must not grow these maps)."""
        if not self._subs.get(key):
            self._subs.pop(key, None)
            self._account_keys.pop(key, None)
        self._unwatch(acc.account)

    def _watch(self, ai: int) -> None:
        n = self._watched.get(ai, 0)
        if n == 0:
            acct = self.state.accounts[ai]
            self._funding_paid[ai] = {mi: p.funding_paid for mi, p in acct.positions.items()}
            account_channels.seed_filled(self.state, ai, self._filled)
        self._watched[ai] = n + 1

    def _unwatch(self, ai: int) -> None:
        n = self._watched.get(ai, 0) - 1
        if n > 0:
            self._watched[ai] = n
            return
        self._watched.pop(ai, None)
        self._funding_paid.pop(ai, None)
        acct = self.state.accounts.get(ai)
        if acct is not None:
            for oi in acct.orders:
                self._filled.pop(oi, None)

    def unsubscribe(self, c: Client, channel: object) -> tuple[int, str]:
        acc = account_channels.parse(channel)
        if acc is not None:
            key = acc.key
            if key not in c.channels:
                return int(ResultCode.WS_NOT_SUBSCRIBED), f"not subscribed to {channel}"
            c.channels.discard(key)
            self._subs[key].discard(c)
            self._drop_account_key(key, acc)
            self._put(c, _Msg(_encode({"type": "unsubscribed", "channel": acc.reply})))
            return int(ResultCode.OK), ""
        candle = _candle(channel)
        parsed = split_channel(channel) if candle is None else ("candle", candle[0])
        if parsed is None:
            return int(ResultCode.WS_INVALID_CHANNEL), f"invalid channel {channel!r}"
        kind, arg = parsed
        key = channel_key(kind, arg) if candle is None else candle_channel(*candle)
        if key not in c.channels:
            return int(ResultCode.WS_NOT_SUBSCRIBED), f"not subscribed to {channel}"
        c.channels.discard(key)
        self._subs[key].discard(c)
        if kind == "order_book":
            c.pending.pop(arg, None)
        self._put(c, _Msg(_encode({"type": "unsubscribed", "channel": key})))
        return int(ResultCode.OK), ""

    def _snapshot(self, kind: str, arg: int, key: str) -> dict[str, Any] | None:
        st = self.state
        ts_ms = time.time_ns() // 1_000_000
        if kind == "height":
            return {
                "channel": key,
                "height": st.height,
                "seq": st.seq,
                "timestamp": ts_ms,
                "type": "subscribed/height",
            }
        if kind == "market_stats":
            mids = sorted(st.markets) if arg == ALL_MARKETS else [arg]
            if any(mi not in st.markets for mi in mids):
                return None
            return self._stats_body(key, mids, arg == ALL_MARKETS, "subscribed/market_stats")
        m = st.markets.get(arg)
        if m is None:
            return None
        if kind == "trade":
            rows = [views.trade(r, m) for r in st.trades[arg]]
            return {"channel": key, "trades": rows, "timestamp": ts_ms, "type": "subscribed/trade"}
        if kind == "ticker":
            book = st.books[arg]
            self._tops[arg] = public_views.top_of_book(book)
            return self._ticker_body(arg, "subscribed/ticker", ts_ms)
        book = st.books[arg]
        return {
            "channel": key,
            "offset": self.offset,
            "order_book": views.book_body(book, m, self.offset),
            "timestamp": ts_ms,
            "type": "subscribed/order_book",
        }

    def _ticker_body(self, mi: int, kind: str, ts_ms: int) -> dict[str, Any]:
        book = self.state.books[mi]
        return {
            "channel": f"ticker:{mi}",
            "nonce": book.nonce,
            "ticker": public_views.ticker(book, self.state.markets[mi]),
            "timestamp": ts_ms,
            "type": kind,
        }

    def _candle_snapshot(self, mi: int, res: str, key: str) -> dict[str, Any] | None:
        """``subscribed/candle``: the newest candles (up to ``MAX_ANSWER``), oldest first."""
        m = self.state.markets.get(mi)
        if m is None:
            return None
        rows = self.state.history.candles.window(mi, res, 0, 2**62, MAX_ANSWER)
        return {
            "channel": key,
            "r": res,
            "c": [candle_json(r, m) for r in rows],
            "timestamp": time.time_ns() // 1_000_000,
            "type": "subscribed/candle",
        }

    def _account_body(self, ai: int, kind: str, ts_ms: int) -> dict[str, Any]:
        st = self.state
        acct = st.accounts[ai]
        counts = acct.order_counts
        liq = liquidation_prices(st.markets, acct.collateral, acct.positions)
        positions = {
            str(mi): views.position(p, st.markets[mi], counts.get(mi, 0), liq[mi])
            for mi, p in acct.positions.items()
        }
        return {
            "channel": f"account_all:{ai}",
            "account": ai,
            "collateral": views.decimal_str(acct.collateral, USDC_DECIMALS),
            "available_balance": views.decimal_str(st.available_balance(ai), USDC_DECIMALS),
            "positions": positions,
            "total_order_count": len(acct.orders),
            "seq": st.seq,
            "timestamp": ts_ms,
            "type": kind,
        }

    def _stats_body(self, key: str, mids: list[int], many: bool, kind: str) -> dict[str, Any]:
        st = self.state
        funding = st.history.funding
        stats = {
            mi: views.market_stats(st.markets[mi], st.stats[mi], funding.get(mi)) for mi in mids
        }
        return {
            "channel": key,
            "market_stats": {str(mi): v for mi, v in stats.items()} if many else stats[mids[0]],
            "timestamp": time.time_ns() // 1_000_000,
            "type": kind,
        }

    def send(self, c: Client, body: dict[str, Any]) -> None:
        """Queue one message for one client (replies, errors); never conflated."""
        self._put(c, _Msg(_encode(body)))

    # ---- publish (apply loop) -------------------------------------------------------------------

    def _keys(self, mi: int) -> tuple[str, str, str, str]:
        """Market ``mi``'s channel keys: order_book, trade, ticker, market_stats."""
        keys = self._market_keys.get(mi)
        if keys is None:
            keys = self._market_keys[mi] = (
                f"order_book:{mi}", f"trade:{mi}", f"ticker:{mi}", f"market_stats:{mi}"
            )  # fmt: skip
        return keys

    def publish(self, applied: Applied) -> None:
        """Queue this block's updates for every subscriber. Synchronous; never awaits a client."""
        if applied.duplicate:
            return
        self.offset += 1
        now_us = time.time_ns() // 1000
        ts_ms = now_us // 1000
        engine_us = applied.timestamp_ns // 1000
        markets = self.state.markets
        #: trade id -> its Lighter JSON, rendered once for the trade channel and the accounts
        trade_views: dict[int, dict[str, Any]] = {}
        subs_of, keys_of = self._subs.get, self._keys
        for mi, d in applied.books.items():
            subs = subs_of(keys_of(mi)[0])
            if subs:
                data = book_update_json(
                    mi, self.offset, d.bids, d.asks, d.begin_nonce, d.nonce, engine_us,
                    time.time_ns() // 1000, markets[mi],
                )  # fmt: skip
                msg = _Msg(data, mi, d, engine_us)
                for c in tuple(subs):
                    self._put(c, msg)
        for mi, rows in applied.trades.items():
            subs = subs_of(keys_of(mi)[1])
            if subs:
                m = markets[mi]
                rendered = []
                for r in rows:
                    view = trade_views[r[0][1]] = views.trade(r, m)  # by trade id
                    rendered.append(view)
                data = _encode(
                    {
                        "channel": f"trade:{mi}",
                        "trades": rendered,
                        "timestamp": ts_ms,
                        "type": "update/trade",
                    }
                )
                self._put_all(subs, _Msg(data))
        self._publish_stats(sorted(applied.trades))
        self._publish_tickers(applied, ts_ms)
        self._publish_candles(applied, ts_ms)
        if self._watched:
            self._publish_accounts(applied, ts_ms, trade_views)
        subs = self._subs.get("height")
        if subs:
            data = _encode(
                {
                    "channel": "height",
                    "height": applied.height,
                    "seq": applied.seq,
                    "timestamp": ts_ms,
                    "type": "update/height",
                }
            )
            self._put_all(subs, _Msg(data))

    def _publish_accounts(
        self, applied: Applied, ts_ms: int, trade_views: dict[int, dict[str, Any]]
    ) -> None:
        """The account channels of the watched accounts this block touched: one pass over the
        block for them, then one message per subscribed channel (account_channels.py).
        ``trade_views``: the trades the trade channel rendered (trade id -> JSON), reused."""
        watched = self._watched
        hits = set(watched.keys() & applied.accounts)
        # a rejected tx touches nothing but is still its account's (account_tx)
        hits.update(r[2] for r in applied.txs if r[2] in watched)  # account_index
        if not hits:
            return
        st = self.state
        filled = self._filled
        ups = AccountUpdates(st, applied, hits, filled, self._funding_paid)
        ups.trade_views.update(trade_views)
        subs_of = self._subs.get
        for ai in sorted(hits):
            # the account's subscriptions over all clients: once the account_all ones are
            # served, the other channels are looked up only if some remain
            left = watched[ai]
            subs = subs_of(f"account_all:{ai}")
            if subs:
                left -= len(subs)
                body = self._account_body(ai, "update/account_all", ts_ms)
                extra = account_channels.account_all_extra(
                    st, ai, ups.trades.get(ai, ()), ups.fundings.get(ai, {}), ups.trade_views
                )
                body.update(extra)
                self._put_all(subs, _Msg(_encode(body)))
            if not left:
                continue
            for kind in account_channels.ACCOUNT_WIDE:
                if kind == "account_all":
                    continue
                subs = subs_of(f"{kind}:{ai}")
                if subs:
                    up = ups.update(st, AccountChannel(kind, ai), ts_ms, filled)
                    if up is not None:
                        self._put_all(subs, _Msg(_encode(up)))
            for mi in {ev.market_index for ev, _ in ups.orders.get(ai, {}).values()}:
                subs = subs_of(f"account_orders:{mi}:{ai}")
                if subs:
                    up = ups.update(st, AccountChannel("account_orders", ai, mi), ts_ms, filled)
                    if up is not None:
                        self._put_all(subs, _Msg(_encode(up)))
        ups.forget_final(filled)

    def _publish_stats(self, mids: list[int]) -> None:
        """``market_stats`` for the markets that traded in this block (their last price, volume
        and daily range moved); a mark-only change shows with the market's next trade."""
        if not mids:
            return
        for mi in mids:
            key = self._keys(mi)[3]
            subs = self._subs.get(key)
            if subs:
                body = self._stats_body(key, [mi], False, "update/market_stats")
                self._put_all(subs, _Msg(_encode(body)))
        subs = self._subs.get("market_stats:all")
        if subs:
            body = self._stats_body("market_stats:all", mids, True, "update/market_stats")
            self._put_all(subs, _Msg(_encode(body)))

    def _publish_tickers(self, applied: Applied, ts_ms: int) -> None:
        """``ticker`` for the markets whose best ask or bid this block moved: one encode each."""
        for mi in applied.books:
            subs = self._subs.get(self._keys(mi)[2])
            if not subs:
                continue
            top = public_views.top_of_book(self.state.books[mi])
            if self._tops.get(mi) == top:
                continue
            self._tops[mi] = top
            self._put_all(subs, _Msg(_encode(self._ticker_body(mi, "update/ticker", ts_ms))))

    def _publish_candles(self, applied: Applied, ts_ms: int) -> None:
        """``candle`` for the markets that traded in this block: the open candle of each
        subscribed resolution, one encode each."""
        candles = self.state.history.candles
        for mi in applied.trades:
            subscribed = self._candle_keys.get(mi)
            if not subscribed:
                continue
            m = self.state.markets[mi]
            for res, key in subscribed:
                subs = self._subs.get(key)
                if not subs:
                    continue
                last = candles.last(mi, res)
                if last is None:
                    continue
                body = {
                    "channel": key,
                    "r": res,
                    "candle": candle_json(last, m),
                    "timestamp": ts_ms,
                    "type": "update/candle",
                }
                self._put_all(subs, _Msg(_encode(body)))

    def _put_all(self, subs: set[Client], msg: _Msg) -> None:
        for c in tuple(subs):
            self._put(c, msg)

    def _put(self, c: Client, msg: _Msg) -> None:
        if c.closed:
            return
        limit = self.config.ws_queue_limit
        mi = msg.market
        if mi >= 0 and (mi in c.pending or len(c.queue) >= limit):
            self._conflate(c, msg)
            if c.conflations > self.config.ws_conflation_limit:
                self._drop_slow(c)
                return
        elif len(c.queue) >= 2 * limit:
            self._drop_slow(c)
            return
        else:
            c.queue.append(msg)
        self.messages += 1
        c.wake.set()

    def _conflate(self, c: Client, msg: _Msg) -> None:
        d = msg.delta
        assert d is not None
        c.conflations += 1
        self.conflations += 1
        p = c.pending.get(d.market_index)
        if p is None:
            c.pending[d.market_index] = _Merged(
                dict(d.bids), dict(d.asks), d.begin_nonce, d.nonce, msg.engine_us
            )
            return
        p.bids.update(d.bids)
        p.asks.update(d.asks)
        p.nonce = d.nonce
        p.engine_us = msg.engine_us

    def _next_data(self, c: Client) -> bytes:
        """The next message for ``c``: the plain queue first, then its merged book updates."""
        if c.queue:
            return c.queue.popleft().data
        mi, p = c.pending.popitem()
        return book_update_json(
            mi,
            self.offset,
            tuple(sorted(p.bids.items(), reverse=True)),
            tuple(sorted(p.asks.items())),
            p.begin_nonce,
            p.nonce,
            p.engine_us,
            time.time_ns() // 1000,
            self.state.markets[mi],
        )

    async def _write(self, c: Client) -> None:
        ws = c.ws
        # Uncompressed (no permessage-deflate negotiated: a server's frames are then plain
        # header + payload): everything queued goes out as frames in one socket write, instead of
        # one write (a syscall, and a wakeup of the reader) per message. A block's book updates,
        # trades and the txs' replies reach a connection together.
        # a stream transport: asyncio's, or uvloop's (not subclasses of ``asyncio.Transport``)
        transport = cast(asyncio.Transport | None, c.transport)
        protocol = transport.get_protocol() if transport is not None else None
        drain = getattr(protocol, "_drain_helper", None)  # aiohttp's wait for the peer to read
        coalesce = transport is not None and drain is not None and not ws.compress
        with contextlib.suppress(ConnectionError):
            while not c.closed:
                await c.wake.wait()
                c.wake.clear()
                while c.queue or c.pending:
                    if not coalesce:
                        self.writes += 1
                        await ws.send_frame(self._next_data(c), WSMsgType.TEXT)
                        continue
                    assert transport is not None and drain is not None
                    if ws.closed or transport.is_closing():
                        raise ConnectionResetError("Cannot write to closing transport")
                    parts: list[bytes] = []
                    size = 0
                    while (c.queue or c.pending) and size < WRITE_BATCH_BYTES:
                        data = self._next_data(c)
                        parts.append(text_frame_header(len(data)))
                        parts.append(data)
                        size += len(data)
                    self.writes += 1
                    transport.writelines(parts)
                    if getattr(protocol, "writing_paused", False):
                        await drain()
                c.conflations = 0

    # ---- control plane --------------------------------------------------------------------------

    def stats(self) -> FanoutStats:
        depths = tuple(len(c.queue) + len(c.pending) for c in self.clients)
        return FanoutStats(
            connections=len(self.clients),
            subscriptions=sum(len(c.channels) for c in self.clients),
            queue_depths=depths,
            max_queue_depth=max(depths, default=0),
            messages=self.messages,
            conflations=self.conflations,
            disconnects=self.disconnects,
            offset=self.offset,
            writes=self.writes,
        )

    async def close(self) -> None:
        """Close every connection (server shutdown)."""
        for c in tuple(self.clients):
            self.disconnect(c)
            with contextlib.suppress(ConnectionError):
                await c.ws.close()
        for t in tuple(self._tasks):
            t.cancel()
