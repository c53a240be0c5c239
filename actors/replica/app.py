"""The API replica's aiohttp app: Lighter's REST under ``/api/v1/`` and the ``/stream`` WebSocket.

::

    client ──HTTP/WS──► build_app(state, execute_txs, fanout, ...)
                          │ reads: ReplicaState caches (BookSnapshot by reference, no copies)
                          │ sendTx: tx_from_json ─► state.dry_run ─► note_sent ─► execute_txs([...])
                          │ /stream: subscriptions and replies through the fanout it was given
                          ▼
    ReplicaService (owner) ── state.apply_block ─► fanout.publish(Applied) ─► subscribers

Semantics:

- Every JSON answer carries ``code`` (200 on success) and the ``seq`` of the block it reflects.
  Errors are ``{"code": <ResultCode>, "message": ...}`` with HTTP 400 (bad request or rejected tx),
  404 (unknown path, account, market or tx), 413 (body over ``max_body_bytes``). A rejected request
  changes nothing: nothing is noted as pending and nothing reaches ``execute_txs``.
- ``sendTx``/``sendTxBatch`` take form fields (urlencoded or multipart) or a JSON object with the
  same keys. A tx is decoded with ``tx_from_json`` and dry-run against the caches; only if every tx
  of a batch passes are they handed over, in one ``execute_txs`` call. The answer carries the
  sequencer's code for the tx (200 when executed).
- Parsers never escape: malformed, undecodable (bad charset) or too deeply nested input
  (``MAX_JSON_DEPTH``, checked before decoding) is answered
  with 20001 (``INVALID_PARAM``: the body, a form, ``tx_types``/``tx_infos``) or 20003
  (``INVALID_TX_INFO``: a ``tx_info``) and a message, on REST and on the WebSocket (where an
  unparseable frame as a whole is 30000, like any frame that is not JSON).
- Budgets (limits.py): every request is charged its weight to its IP's bucket, each
  ``jsonapi/sendtx*`` frame as a ``sendTx``; a tx's account is charged once its dry-run passed;
  beyond, HTTP 429 (``Retry-After``) / WS reply with 23000 (``RATE_LIMITED``). A WebSocket beyond
  the per-IP connection cap gets error 30005 (``WS_TOO_MANY_CONNECTIONS``) and is closed (1008).
  A tx request refused for its signature and replayed byte for byte is answered from memory.
- An outcome that does not come in time is answered with HTTP 503 and 21822
  (``SEQUENCER_UNAVAILABLE``: the tx may still execute, look it up by hash; ``tx_hash`` is in the
  answer when the sequencer already returned it); ``execute_txs`` owns that deadline.
- Overload (admission.py): while the owner's queueing delay to the sequencer (``queue_delay``)
  is over ``admission_max_delay_s``, a tx request is refused at the door, after decoding and
  before its dry-run (no signature check, nothing noted), with 23000 and HTTP 429 (WS: the
  reply with the request's id); so are later nonces of a key whose next nonce was refused so.
- The app never awaits anything but ``execute_txs``, a commitment read and the client's own
  socket; the caches are only written by the apply loop, which runs on the same event loop, so a
  handler sees one consistent block between awaits.

Caller duties: create the :class:`Fanout` and run the apply loop on the app's event loop
(``state.apply_block`` then ``fanout.publish``); ``execute_txs`` must return one ``TxOutcome`` per
tx, after the block holding them was applied to ``state`` (so ``nextNonce`` is current when the
client gets its answer), or raise :class:`ApiError`.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol
from urllib.parse import unquote

import msgspec
from aiohttp import WSCloseCode, WSMsgType, web

from raydex.codecs import (
    ALL_API_KEYS,
    MAX_48,
    MAX_API_KEY_INDEX,
    MAX_MARKET_INDEX,
    CodecError,
    OrderRecord,
    OrderStatus,
    ResultCode,
    TxOutcome,
    TxType,
    tx_from_json,
)
from raydex.codecs.signing import parse_l1_address
from raydex.observability.metrics import ApiCounters

from .cache import RESOLUTIONS, LevelOrders, Levels, ReplicaState
from .hooks import ReplicaHooks, StepProbe
from .http import (
    WS_TX_WEIGHT,
    Admission,
    ApiConfig,
    FastSend,
    Limits,
    RejectionCache,
    auth,
    rest_weight,
)
from .views import common as views
from .views import private as private_views
from .views import public as public_views
from .ws import Client, Fanout, FanoutStats, split_channel

__all__ = [
    "ADMISSION",
    "API_CONFIG",
    "ApiConfig",
    "ApiError",
    "CommitmentSource",
    "LIMITS",
    "ExecuteTxs",
    "FAST_SEND",
    "Fanout",
    "FanoutStats",
    "OutcomePending",
    "build_app",
    "split_channel",
]

#: ``execute_txs(txs) -> one TxOutcome per tx``, returning once their block was applied here
ExecuteTxs = Callable[[list[Any]], Awaitable[list[TxOutcome]]]


class CommitmentSource(Protocol):
    """Where ``block``/``blocks`` read state commitments (the committer; off the hot path)."""

    async def commitment(self, height: int) -> dict[str, Any] | None: ...

    async def latest(self, limit: int) -> list[dict[str, Any]]: ...


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_OK = int(ResultCode.OK)
_ACTIVE = int(OrderStatus.ACTIVE_LIMIT)
_WITHDRAW = int(TxType.WITHDRAW)
_TRANSFER = int(TxType.TRANSFER)
_VOLUME_QUOTA = 1_000_000


class ApiError(Exception):
    """A request that cannot be answered with a result: answered with ``code`` and HTTP ``status``
    (4xx: the caller's mistake; 503: the outcome is not known yet). ``tx_hashes``: the hashes of
    txs that were handed to the sequencer (the caller can look them up), else None."""

    def __init__(
        self, code: int, message: str, status: int = 400, tx_hashes: list[bytes] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.tx_hashes = tx_hashes

    def body(self, batch: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.tx_hashes is not None:
            hashes = [h.hex() for h in self.tx_hashes]
            out["tx_hash"] = hashes if batch else hashes[0]
        return out


class RateLimited(ApiError):
    """Over a budget (limits.py): HTTP 429, code 23000, and when to come back."""

    def __init__(self, wait_s: float, what: str) -> None:
        super().__init__(
            int(ResultCode.RATE_LIMITED), f"rate limited ({what}); retry in {wait_s:.1f} s", 429
        )
        self.retry_after = max(1, int(wait_s + 0.999))


class Overloaded(RateLimited):
    """Refused at the overload door (admission.py): HTTP 429 (``Retry-After: 1``), code 23000;
    nothing was noted or sent, the nonce is unused."""

    def __init__(self, why: str) -> None:
        ApiError.__init__(self, int(ResultCode.RATE_LIMITED), why, 429)
        self.retry_after = 1


#: the app's :class:`Limits` (its owner reports ``stats()``)
LIMITS = web.AppKey("limits", Limits)
#: the app's overload door (its owner reports ``stats()``)
ADMISSION = web.AppKey("admission", Admission)
#: ``sendTx``/``sendTxBatch`` for the fast lane (fastlane.py), answered as the app answers them
FAST_SEND = web.AppKey("fast_send", FastSend)
#: the app's knobs (the fast lane reads ``max_body_bytes``)
API_CONFIG = web.AppKey("api_config", ApiConfig)


class OutcomePending(ApiError):
    """The sequencer executed the txs (``tx_hashes``), but their block has not been applied here
    within the deadline: the outcome is in the block, readable by hash once it lands."""


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(body=_encode(body), status=status, content_type="application/json")


def _error(code: int, message: str, status: int) -> web.Response:
    return _json({"code": code, "message": message}, status)


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except RateLimited as e:
        resp = _json(e.body(False), e.status)
        resp.headers["Retry-After"] = str(e.retry_after)
        return resp
    except ApiError as e:
        return _json(e.body(request.path.endswith("Batch")), e.status)
    except web.HTTPRequestEntityTooLarge:
        return _error(int(ResultCode.BODY_TOO_LARGE), "request body too large", 413)
    except web.HTTPNotFound:
        return _error(int(ResultCode.NOT_FOUND), f"no such endpoint {request.path}", 404)
    except web.HTTPMethodNotAllowed as e:
        return _error(int(ResultCode.INVALID_PARAM), f"method {e.method} not allowed", 405)


def _int(q: Mapping[str, Any], name: str, lo: int, hi: int, default: int | None = None) -> int:
    raw = q.get(name)
    if raw is None:
        if default is None:
            raise ApiError(int(ResultCode.INVALID_PARAM), f"missing parameter {name}")
        return default
    if isinstance(raw, int) and not isinstance(raw, bool):
        v = raw
    elif (
        isinstance(raw, str)
        and raw.isascii()
        and len(raw) < 20
        and (raw[1:] if raw[:1] == "-" else raw).isdigit()
    ):
        v = int(raw)
    else:
        raise ApiError(int(ResultCode.INVALID_PARAM), f"{name} must be an integer")
    if not lo <= v <= hi:
        raise ApiError(int(ResultCode.INVALID_PARAM), f"{name} must be in [{lo}, {hi}]")
    return v


#: Deepest JSON nesting accepted from a client. Lighter's payloads nest at most 3 levels; the
#: bound is checked before decoding because the decoders recurse on the C stack: past Python's
#: recursion limit they raise RecursionError, and if some library raised that limit (py_ecc sets
#: 100,000 on import) a 120,000-level body crashes the process.
MAX_JSON_DEPTH = 32
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_JSON_TOKENS_B = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _too_deep(raw: str | bytes) -> bool:
    """``raw`` nests arrays/objects deeper than ``MAX_JSON_DEPTH`` (brackets inside strings do
    not count). Cost: two C-speed counts for any input with few brackets (every valid Lighter
    payload); a regex walk over its strings and brackets otherwise."""
    if isinstance(raw, str):
        if raw.count("[") + raw.count("{") <= MAX_JSON_DEPTH:
            return False
        tokens = [m.group().encode() for m in _JSON_TOKENS.finditer(raw) if len(m.group()) == 1]
    else:
        if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
            return False
        tokens = [m.group() for m in _JSON_TOKENS_B.finditer(raw) if len(m.group()) == 1]
    depth = 0
    for token in tokens:
        if token in b"[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        else:
            depth -= 1
    return False


def _parse_json(raw: str | bytes, code: int, what: str) -> Any:
    """``raw`` decoded, or ApiError(``code``) saying why not: not JSON, not UTF-8, or nested
    deeper than ``MAX_JSON_DEPTH``."""
    if _too_deep(raw):
        raise ApiError(code, f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return _decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise ApiError(code, f"{what} is not valid JSON") from None


def _body_fields(content_type: str, body: bytes) -> Mapping[str, Any]:
    """The fast lane's ``_fields``: a JSON object's keys or a utf-8 urlencoded form's fields."""
    if content_type == "application/json":
        obj = _parse_json(body, int(ResultCode.INVALID_PARAM), "body")
        if not isinstance(obj, dict):
            raise ApiError(int(ResultCode.INVALID_PARAM), "body must be a JSON object")
        return obj
    try:
        # as aiohttp's ``request.post()`` reads a form (the last value of a repeated field wins)
        return parse_form(body.rstrip().decode("utf-8"))
    except ValueError as e:  # not utf-8
        raise ApiError(int(ResultCode.INVALID_PARAM), f"malformed form: {e}") from None


def parse_form(text: str) -> dict[str, str]:
    """``dict(urllib.parse.parse_qsl(text, keep_blank_values=True))``, ~4x faster on a sendTx body.

    A signed tx's ``tx_info`` is JSON, so a form carries ~65 percent-escapes per tx, which
    ``unquote`` decodes one by one in Python (~15 us per body here). :func:`_form_unquote` hands
    them to the C ``unicode_escape`` codec instead (~3.5 us)."""
    fields: dict[str, str] = {}
    for part in text.split("&"):
        if part:
            name, _, value = part.partition("=")
            fields[_form_unquote(name)] = _form_unquote(value)
    return fields


def _form_unquote(s: str) -> str:
    """``urllib.parse.unquote(s.replace("+", " "))``. Fast path: an ASCII value without
    backslashes has every ``%XY`` rewritten ``\\xXY`` and decoded by ``unicode_escape`` (bytes),
    then as utf-8; a malformed escape or invalid utf-8 raises, and ``unquote`` (which keeps the
    one and replaces the other) decides."""
    if "+" in s:
        s = s.replace("+", " ")
    if "%" not in s:
        return s
    if s.isascii() and "\\" not in s:
        try:
            raw = s.replace("%", "\\x").encode("ascii").decode("unicode_escape")
            return raw.encode("latin-1").decode("utf-8")
        except UnicodeDecodeError:
            pass
    return unquote(s)


async def _fields(request: web.Request) -> Mapping[str, Any]:
    """Form fields, or the keys of a JSON object body."""
    if request.content_type == "application/json":
        obj = _parse_json(await request.read(), int(ResultCode.INVALID_PARAM), "body")
        if not isinstance(obj, dict):
            raise ApiError(int(ResultCode.INVALID_PARAM), "body must be a JSON object")
        return obj
    try:
        form = await request.post()
    except ValueError as e:  # malformed multipart / urlencoded, or not in its declared charset
        raise ApiError(int(ResultCode.INVALID_PARAM), f"malformed form: {e}") from None
    except LookupError as e:  # a charset Python does not know
        raise ApiError(int(ResultCode.INVALID_PARAM), f"unknown charset: {e}") from None
    return {k: v for k, v in form.items() if isinstance(v, str)}


class _Api:
    """The handlers; one instance per app."""

    def __init__(
        self,
        state: ReplicaState,
        execute_txs: ExecuteTxs,
        fanout: Fanout,
        counters: ApiCounters,
        config: ApiConfig,
        commitments: CommitmentSource | None,
        probe: StepProbe | None,
        limits: Limits,
        admission: Admission | None = None,
    ) -> None:
        self.limits = limits
        self.admission = admission if admission is not None else Admission(None, 0)
        self.state = state
        self.execute_txs = execute_txs
        self.fanout = fanout
        self.counters = counters
        self.config = config
        self.commitments = commitments
        self.probe = probe

    def _ok(self, body: dict[str, Any], cached: bool = True) -> web.Response:
        """A success answer; ``cached``: it was read from the caches (counted as a hit)."""
        if cached:
            self.counters.cache_hits += 1
        body["code"] = _OK
        body["seq"] = self.state.seq
        return _json(body)

    def _market(self, q: Mapping[str, Any]) -> int:
        mi = _int(q, "market_id", 0, MAX_MARKET_INDEX)
        if mi not in self.state.markets:
            raise ApiError(int(ResultCode.MARKET_NOT_FOUND), f"market {mi} not found", 404)
        return mi

    def _markets(self, q: Mapping[str, Any]) -> list[int]:
        mi = _int(q, "market_id", 0, 255, default=255)
        if mi == 255:
            return sorted(self.state.markets)
        return [self._market(q)]

    def _limit(self, q: Mapping[str, Any]) -> int:
        return _int(q, "limit", 1, self.config.max_list_limit, default=self.config.max_list_limit)

    # ---- REST reads -----------------------------------------------------------------------------

    async def info(self, request: web.Request) -> web.Response:
        """``Status`` (``GET /``) and ``ZkLighterInfo`` (``GET /info``) in one body. Lighter
        answers ``status: 200`` and the time in seconds (ccxt's ``fetch_status`` checks 200)."""
        return self._ok(
            {
                "status": 200,
                "contract_address": "",
                "network_id": self.config.network_id,
                "timestamp": int(time.time()),
                "height": self.state.height,
            }
        )

    async def order_books(self, request: web.Request) -> web.Response:
        st = self.state
        books = [views.market_summary(st.markets[mi]) for mi in self._markets(request.query)]
        return self._ok({"order_books": books})

    async def order_book_details(self, request: web.Request) -> web.Response:
        st = self.state
        details = [
            views.market_detail(st.markets[mi], st.stats[mi]) for mi in self._markets(request.query)
        ]
        return self._ok({"order_book_details": details, "spot_order_book_details": []})

    async def order_book_orders(self, request: web.Request) -> web.Response:
        st = self.state
        mi = self._market(request.query)
        limit = self._limit(request.query)
        m = st.markets[mi]
        ts = st.timestamp_ns // 1_000_000
        book = st.books[mi]
        bid_orders, ask_orders = st.level_orders[mi]
        return self._ok(
            {
                "total_asks": sum(map(len, ask_orders.values())),
                "asks": [views.simple_order(o, m, ts) for o in _best(book.asks, ask_orders, limit)],
                "total_bids": sum(map(len, bid_orders.values())),
                "bids": [views.simple_order(o, m, ts) for o in _best(book.bids, bid_orders, limit)],
            }
        )

    async def asset_details(self, request: web.Request) -> web.Response:
        """USDC only (ccxt's ``load_markets`` reads it); ``asset_id`` 0 or absent means all."""
        aid = _int(request.query, "asset_id", 0, 2**31 - 1, default=0)
        if aid not in (0, views.USDC_ASSET_ID):
            raise ApiError(int(ResultCode.NOT_FOUND), f"asset {aid} not found", 404)
        return self._ok({"asset_details": [views.usdc_asset_detail()]})

    async def recent_trades(self, request: web.Request) -> web.Response:
        st = self.state
        mi = self._market(request.query)
        limit = self._limit(request.query)
        m = st.markets[mi]
        rows = list(st.trades[mi])[-limit:]
        rows.reverse()
        return self._ok({"trades": [views.trade(r, m) for r in rows]})

    def _by_l1(self, text: Any) -> tuple[bytes, int]:
        """(L1 address, its account) for ``text`` (``0x`` + 40 hex), else ApiError."""
        raw = parse_l1_address(text)
        if raw is None:
            raise ApiError(
                int(ResultCode.INVALID_PARAM), "l1_address must be 0x + 40 hex digits (not zero)"
            )
        ai = self.state.by_l1.get(raw)
        if ai is None or ai not in self.state.accounts:
            raise ApiError(
                int(ResultCode.ACCOUNT_NOT_FOUND), f"no account for L1 address {text}", 404
            )
        return raw, ai

    async def accounts_by_l1_address(self, request: web.Request) -> web.Response:
        """``SubAccounts`` of ``l1_address``: its account (raydex keeps one per address)."""
        raw, ai = self._by_l1(request.query.get("l1_address"))
        return self._ok(views.sub_accounts(self.state, raw, [ai]))

    async def account(self, request: web.Request) -> web.Response:
        q = request.query
        by = q.get("by", "index")
        if by == "l1_address":
            ai = self._by_l1(q.get("value"))[1]
        elif by == "index":
            ai = _int(q, "value", 0, MAX_48)
        else:
            raise ApiError(int(ResultCode.INVALID_PARAM), "by must be index or l1_address")
        acct = self.state.accounts.get(ai)
        if acct is None:
            raise ApiError(int(ResultCode.ACCOUNT_NOT_FOUND), f"account {ai} not found", 404)
        return self._ok(
            {"total": 1, "accounts": [views.account(self.state, ai, acct)], "next_cursor": ""}
        )

    async def api_keys(self, request: web.Request) -> web.Response:
        q = request.query
        ai = _int(q, "account_index", 0, MAX_48)
        ki = _int(q, "api_key_index", 0, ALL_API_KEYS, default=ALL_API_KEYS)
        if ai not in self.state.accounts:
            raise ApiError(int(ResultCode.ACCOUNT_NOT_FOUND), f"account {ai} not found", 404)
        st = self.state
        ts = st.timestamp_ns // 1_000_000
        indexes = st.account_keys.get(ai, set())
        if ki != ALL_API_KEYS:
            indexes = {ki} & indexes
        keys = [
            {
                "account_index": ai,
                "api_key_index": k,
                "nonce": int(r.nonce),
                "public_key": bytes(r.pub_key).hex(),
                "transaction_time": ts,
            }
            for k in sorted(indexes)
            for r in (st.api_keys[(ai, k)],)
        ]
        return self._ok({"api_keys": keys})

    async def next_nonce(self, request: web.Request) -> web.Response:
        q = request.query
        ai = _int(q, "account_index", 0, MAX_48)
        ki = _int(q, "api_key_index", 0, MAX_API_KEY_INDEX)
        nonce = self.state.next_nonce(ai, ki)
        if nonce is None:
            if ai not in self.state.accounts:
                raise ApiError(int(ResultCode.ACCOUNT_NOT_FOUND), f"account {ai} not found", 404)
            nonce = 0  # an unused key slot: the nonce a ChangePubKey setting it carries
        return self._ok({"nonce": nonce})

    async def tx(self, request: web.Request) -> web.Response:
        q = request.query
        if q.get("by", "hash") != "hash":
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=hash is supported")
        value = q.get("value", "")
        try:
            h = bytes.fromhex(value.removeprefix("0x"))
        except ValueError:
            raise ApiError(int(ResultCode.INVALID_PARAM), "value must be a hex hash") from None
        rec = self.state.txs.get(h)
        if rec is None:
            raise ApiError(int(ResultCode.NOT_FOUND), "tx not found", 404)
        body = views.tx_record(rec, public_views.tx_info(self.state.history, rec))
        return self._ok(body)

    async def txs(self, request: web.Request) -> web.Response:
        """``Txs``: ``limit`` (1..100) txs in execution order, from ``sequence_index >= index``
        when ``index`` is given, else the newest."""
        q = request.query
        limit = _int(q, "limit", 1, 100)
        hist = self.state.history
        top = public_views.MAX_LIGHTER_TX_TYPE
        if q.get("index") is None:
            rows = hist.latest(limit, top)
        else:
            rows = hist.since(_int(q, "index", 0, 2**63 - 1), limit, self.state.seq, top)
        return self._ok({"txs": public_views.tx_list(hist, rows)})

    async def block_txs(self, request: web.Request) -> web.Response:
        """``Txs`` of one block, ``by=block_height`` (raydex's height of a block is its seq)."""
        q = request.query
        if q.get("by", "block_height") not in ("block_height", "height"):
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=block_height is supported")
        seq = _int(q, "value", 1, 2**63 - 1)
        hist = self.state.history
        rows = hist.block(seq)
        if rows is None:
            raise ApiError(int(ResultCode.NOT_FOUND), f"block {seq} not found", 404)
        return self._ok({"txs": public_views.tx_list(hist, list(rows))})

    async def exchange_stats(self, request: web.Request) -> web.Response:
        return self._ok(public_views.exchange_stats(self.state))

    async def announcement(self, request: web.Request) -> web.Response:
        return self._ok({"announcements": []})

    async def funding_rates(self, request: web.Request) -> web.Response:
        return self._ok({"funding_rates": public_views.funding_rates(self.state)})

    async def fundings(self, request: web.Request) -> web.Response:
        """``Fundings`` of one market: its hourly settlements (or their daily sums) with
        ``start_timestamp <= time <= end_timestamp`` in seconds; ``count_back`` > 0: the newest
        that many."""
        q = request.query
        mi = self._market(q)
        res = q.get("resolution", "1h")
        width = public_views.FUNDING_RESOLUTIONS.get(res)
        if width is None:
            raise ApiError(int(ResultCode.INVALID_PARAM), "resolution must be 1h or 1d")
        start = _int(q, "start_timestamp", 0, 5_000_000_000_000)
        end = _int(q, "end_timestamp", 0, 5_000_000_000_000)
        count = _int(q, "count_back", 0, 2**31 - 1, default=0)
        rows = list(self.state.history.settlements.get(mi, ()))
        m = self.state.markets[mi]
        return self._ok(
            {
                "resolution": res,
                "fundings": public_views.fundings(rows, m, width, start, end, count),
            }
        )

    async def candles(self, request: web.Request) -> web.Response:
        """``Candles`` of one market at one of Lighter's resolutions, ``t`` in
        ``[start_timestamp, end_timestamp]`` (ms), at most 500 (``count_back`` > 0: that many)."""
        q = request.query
        mi = self._market(q)
        res = q.get("resolution", "")
        if res not in RESOLUTIONS:
            raise ApiError(
                int(ResultCode.INVALID_PARAM), f"resolution must be one of {', '.join(RESOLUTIONS)}"
            )
        start = _int(q, "start_timestamp", 0, 5_000_000_000_000)
        end = _int(q, "end_timestamp", 0, 5_000_000_000_000)
        count_back = _int(q, "count_back", 0, 2**31 - 1, default=0)
        rows = self.state.history.candles.window(mi, res, start, end, count_back)
        return self._ok(public_views.candles(res, rows, self.state.markets[mi]))

    async def current_height(self, request: web.Request) -> web.Response:
        return self._ok({"height": self.state.seq})

    async def block(self, request: web.Request) -> web.Response:
        q = request.query
        if q.get("by", "height") != "height":
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=height is supported")
        height = _int(q, "value", 1, 2**63 - 1)
        self.counters.cache_fallbacks += 1
        found = None if self.commitments is None else await self.commitments.commitment(height)
        if found is None:
            raise ApiError(int(ResultCode.NOT_FOUND), "no commitment for that height (yet)", 404)
        return self._ok({"total": 1, "blocks": [found]}, cached=False)

    async def blocks(self, request: web.Request) -> web.Response:
        limit = _int(request.query, "limit", 1, 100, 10)
        self.counters.cache_fallbacks += 1
        found = [] if self.commitments is None else await self.commitments.latest(limit)
        return self._ok({"total": len(found), "blocks": found}, cached=False)

    # ---- authenticated reads (auth.py checks the token; ledger.py holds the history) -----------

    def _account_param(self, q: Mapping[str, Any], name: str = "account_index") -> int:
        ai = _int(q, name, 0, MAX_48)
        if ai not in self.state.accounts:
            raise ApiError(int(ResultCode.ACCOUNT_NOT_FOUND), f"account {ai} not found", 404)
        return ai

    def _authorize(self, request: web.Request, account: int) -> None:
        """The request's token (``Authorization`` header or ``auth`` parameter) speaks for
        ``account``, else the refusal (auth.py's code, HTTP 401/403): nothing is served."""
        token = auth.token_of(request.headers, request.query)
        try:
            auth.require_account(
                token, account, time.time(), self.state, self.config.auth_max_lifetime_s
            )
        except auth.AuthError as e:
            raise ApiError(e.code, e.message, e.status) from None

    def _private(
        self, request: web.Request, name: str = "account_index", paged: bool = False
    ) -> int:
        """The account of a private read, authorized; ``cursor`` paging only where ``paged``."""
        q = request.query
        ai = self._account_param(q, name)
        self._authorize(request, ai)
        if q.get("cursor") and not paged:
            raise ApiError(int(ResultCode.INVALID_PARAM), "cursor paging is not supported")
        return ai

    def _list_limit(self, q: Mapping[str, Any]) -> int:
        return _int(q, "limit", 1, 100, default=100)

    async def account_active_orders(self, request: web.Request) -> web.Response:
        """``Orders``: the account's resting orders (of ``market_id``; 255 or absent: all)."""
        ai = self._private(request)
        markets = self._markets(request.query)
        st = self.state
        ledger = st.ledger
        ts = st.timestamp_ns // 1_000_000
        rows = sorted(
            (o for o in st.accounts[ai].orders.values() if o.market_index in markets),
            key=lambda o: o.order_index,
        )
        orders = [
            private_views.order(
                o, st.markets[o.market_index], _ACTIVE, ledger.filled_quote(o.order_index),
                st.height, ts,
            )
            for o in rows
        ]  # fmt: skip
        return self._ok({"orders": orders})

    async def account_inactive_orders(self, request: web.Request) -> web.Response:
        """``Orders``: the account's orders that left the book, newest first, ``limit`` of them
        (of ``market_id``, and ``ask_filter`` 0 bids / 1 asks / -1 both)."""
        ai = self._private(request)
        q = request.query
        limit = _int(q, "limit", 1, 100)
        markets = set(self._markets(q))
        side = _int(q, "ask_filter", -1, 1, default=-1)
        log = self.state.ledger.log(ai)
        out: list[dict[str, Any]] = []
        for d in reversed(log.orders if log is not None else ()):
            o = d.order
            if o.market_index in markets and (side < 0 or o.is_ask == side):
                out.append(private_views.done_order(d, self.state.markets[o.market_index]))
                if len(out) >= limit:
                    break
        return self._ok({"orders": out})

    async def account_orders(self, request: web.Request) -> web.Response:
        """``Orders`` by ``client_order_indexes`` (comma-separated, at most 20): the account's
        resting orders and the orders of its ledger that left the book, newest first. The
        account defaults to the token's."""
        q = request.query
        if q.get("account_index") is None:
            token = auth.token_of(request.headers, q)
            try:
                ai = auth.authenticate(
                    token or "", time.time(), self.state, self.config.auth_max_lifetime_s
                )[0]
            except auth.AuthError as e:
                raise ApiError(e.code, e.message, e.status) from None
            if ai not in self.state.accounts:
                raise ApiError(int(ResultCode.ACCOUNT_NOT_FOUND), f"account {ai} not found", 404)
        else:
            ai = self._private(request)
        raw = q.get("client_order_indexes", "")
        parts = raw.split(",") if raw else []
        if not 1 <= len(parts) <= 20:
            raise ApiError(
                int(ResultCode.INVALID_PARAM), "client_order_indexes: 1 to 20 comma-separated"
            )
        wanted = {_int({"c": p.strip()}, "c", 0, MAX_48) for p in parts}
        st = self.state
        ts = st.timestamp_ns // 1_000_000
        ledger = st.ledger
        out = [
            private_views.order(
                o, st.markets[o.market_index], _ACTIVE, ledger.filled_quote(o.order_index),
                st.height, ts,
            )
            for o in sorted(st.accounts[ai].orders.values(), key=lambda o: -o.order_index)
            if o.client_order_index in wanted
        ]  # fmt: skip
        log = ledger.log(ai)
        for d in reversed(log.orders if log is not None else ()):
            if d.order.client_order_index in wanted:
                out.append(private_views.done_order(d, st.markets[d.order.market_index]))
        return self._ok({"orders": out})

    async def trades(self, request: web.Request) -> web.Response:
        """``Trades``: with ``account_index``, the account's own fills (authenticated), newest
        first (``sort_dir=asc``: oldest first); without, the market's tape (``market_id``
        required). Paged by ``cursor``: the ``next_cursor`` of a full page (a trade id)."""
        q = request.query
        limit = self._list_limit(q)
        if q.get("sort_by", "timestamp") not in ("timestamp", "trade_id", "block_height"):
            raise ApiError(int(ResultCode.INVALID_PARAM), "sort_by must be timestamp or trade_id")
        asc = q.get("sort_dir", "desc") == "asc"
        after = _int(q, "cursor", 0, 2**63 - 1, default=-1)
        if q.get("account_index") is None:
            mi = self._market(q)
            rows_in: list[Any] = list(self.state.trades[mi])
            ai, markets, side = -1, {mi}, -1
        else:
            ai = self._private(request, paged=True)
            markets = set(self._markets(q))
            side = _int(q, "ask_filter", -1, 1, default=-1)
            log = self.state.ledger.log(ai)
            rows_in = list(log.trades) if log is not None else []
        rows = []
        for row in rows_in if asc else reversed(rows_in):
            t = row.trade
            if after >= 0 and (t.trade_id <= after if asc else t.trade_id >= after):
                continue
            if t.market_index not in markets:
                continue
            if side >= 0:
                mine_ask = t.taker_is_ask if t.taker_account_index == ai else not t.taker_is_ask
                if int(mine_ask) != side:
                    continue
            rows.append(row)
            if len(rows) >= limit:
                break
        markets_ = self.state.markets
        body: dict[str, Any] = {
            "trades": [views.trade(r, markets_[r.trade.market_index]) for r in rows]
        }
        if len(rows) == limit:
            body["next_cursor"] = str(rows[-1].trade.trade_id)
        return self._ok(body)

    def _flows(self, ai: int) -> list[Any]:
        log = self.state.ledger.log(ai)
        return list(reversed(log.flows)) if log is not None else []

    async def deposit_history(self, request: web.Request) -> web.Response:
        ai = self._private(request)
        rows = [private_views.deposit(f) for f in self._flows(ai) if private_views.is_deposit(f)]
        return self._ok({"deposits": rows, "cursor": ""})

    async def withdraw_history(self, request: web.Request) -> web.Response:
        ai = self._private(request)
        rows = [private_views.withdrawal(f) for f in self._flows(ai) if f.tx_type == _WITHDRAW]
        return self._ok({"withdraws": rows, "cursor": ""})

    async def transfer_history(self, request: web.Request) -> web.Response:
        ai = self._private(request)
        rows = [private_views.transfer(f, ai) for f in self._flows(ai) if f.tx_type == _TRANSFER]
        return self._ok({"transfers": rows, "cursor": ""})

    async def position_funding(self, request: web.Request) -> web.Response:
        """``PositionFundings``: the account's funding payments, newest first."""
        ai = self._private(request)
        q = request.query
        limit = self._list_limit(q)
        markets = set(self._markets(q))
        log = self.state.ledger.log(ai)
        pays = list(log.fundings) if log is not None else []
        out: list[dict[str, Any]] = []
        for i in range(len(pays) - 1, -1, -1):
            p = pays[i]
            if p.market_index in markets:
                m = self.state.markets[p.market_index]
                out.append(private_views.position_funding(p, m, p.block_height))
                if len(out) >= limit:
                    break
        return self._ok({"position_fundings": out})

    async def liquidations(self, request: web.Request) -> web.Response:
        """``LiquidationInfos``: the account's positions taken over by liquidation, newest
        first."""
        ai = self._private(request)
        q = request.query
        limit = self._list_limit(q)
        markets = set(self._markets(q))
        st = self.state
        log = st.ledger.log(ai)
        collateral = st.accounts[ai].collateral
        rows = [
            private_views.liquidation(x, st.markets[x.event.market_index], collateral)
            for x in reversed(log.liquidations if log is not None else ())
            if x.event.market_index in markets
        ][:limit]
        return self._ok({"liquidations": rows})

    async def pnl(self, request: web.Request) -> web.Response:
        """``AccountPnL``: per ``resolution`` bucket (1h or 1d) in ``[start_timestamp,
        end_timestamp]`` (s), the account's realized pnl, inflow, outflow and volume in USDC;
        ``count_back`` > 0: the newest that many buckets."""
        q = request.query
        if q.get("by", "index") != "index":
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=index is supported")
        ai = self._private(request, "value")
        res = q.get("resolution", "1h")
        width = public_views.FUNDING_RESOLUTIONS.get(res)
        if width is None:
            raise ApiError(int(ResultCode.INVALID_PARAM), "resolution must be 1h or 1d")
        start = _int(q, "start_timestamp", 0, 5_000_000_000_000, default=0)
        end = _int(q, "end_timestamp", 0, 5_000_000_000_000, default=5_000_000_000_000)
        count = _int(q, "count_back", 0, 10_000, default=0)
        log = self.state.ledger.log(ai)
        rows = private_views.pnl(list(log.pnl) if log is not None else [], width, start, end)
        return self._ok({"resolution": res, "pnl": rows[-count:] if count else rows})

    async def account_txs(self, request: web.Request) -> web.Response:
        """``Txs``: the account's own txs, newest first (``by=account_index``)."""
        q = request.query
        if q.get("by", "account_index") != "account_index":
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=account_index is supported")
        ai = self._account_param(q, "value")
        limit = self._list_limit(q)
        if q.get("index") is not None:
            raise ApiError(int(ResultCode.INVALID_PARAM), "index paging is not supported")
        log = self.state.ledger.log(ai)
        recs = list(log.txs)[::-1][:limit] if log is not None else []
        return self._ok({"txs": public_views.tx_list(self.state.history, recs)})

    async def account_limits(self, request: web.Request) -> web.Response:
        self._private(request)
        return self._ok(private_views.account_limits())

    async def account_metadata(self, request: web.Request) -> web.Response:
        q = request.query
        if q.get("by", "index") != "index":
            raise ApiError(int(ResultCode.INVALID_PARAM), "only by=index is supported")
        ai = self._account_param(q, "value")
        return self._ok({"account_metadatas": [private_views.account_metadata(ai)]})

    # ---- transactions ---------------------------------------------------------------------------

    def _decode_tx(self, tx_type: Any, tx_info: Any) -> Any:
        if isinstance(tx_type, str):
            if not (tx_type.isascii() and tx_type.isdigit() and len(tx_type) < 6):
                raise ApiError(int(ResultCode.INVALID_TX_TYPE), "tx_type must be an integer")
            tx_type = int(tx_type)
        if not isinstance(tx_type, int) or isinstance(tx_type, bool):
            raise ApiError(int(ResultCode.INVALID_TX_TYPE), "tx_type must be an integer")
        if not isinstance(tx_info, str):
            raise ApiError(int(ResultCode.INVALID_TX_INFO), "tx_info must be a JSON string")
        if _too_deep(tx_info):
            raise ApiError(
                int(ResultCode.INVALID_TX_INFO),
                f"tx_info is nested deeper than {MAX_JSON_DEPTH} levels",
            )
        try:
            return tx_from_json(tx_type, tx_info)
        except CodecError as e:
            raise ApiError(int(e.code), str(e)) from None

    async def send_txs(self, txs: list[Any], ip: str | None = None) -> list[TxOutcome]:
        """Dry-run every tx (pending nonces advance as it goes), then execute them together.

        All or nothing before the sequencer: an account out of budget refuses the lot (429)
        before any check; the first rejection releases the nonces noted so far and raises
        ApiError with that tx's code; once all passed, their accounts are charged. If
        ``execute_txs`` fails, the nonces are released, unless it raised
        :class:`OutcomePending` (the txs are sequenced: their block clears them when applied)."""
        counts: dict[int, int] = {}
        for tx in txs:
            a = getattr(tx, "account_index", -1)
            counts[a] = counts.get(a, 0) + 1
        wait = self.limits.account_wait(ip, counts)
        if wait:
            raise RateLimited(wait, "txs of this account")
        st = self.state
        now_ms = time.time_ns() // 1_000_000
        noted: list[Any] = []
        # the door: refused before any signature check when the queue is too deep (overload)
        why = self.admission.refusal(txs, st.next_nonce)
        if why is not None:
            raise Overloaded(why)
        dry_run_time = self.counters.dry_run
        probe = self.probe
        for i, tx in enumerate(txs):
            t0 = time.perf_counter_ns()
            code = st.dry_run(tx, now_ms)
            dt = time.perf_counter_ns() - t0
            dry_run_time.record(dt)
            if probe is not None:
                probe.on_dry_run(tx, code, dt)
            if code != _OK:
                for n in noted:
                    st.forget_sent(n)
                where = f" (tx {i})" if len(txs) > 1 else ""
                raise ApiError(code, f"rejected by dry-run: {_code_name(code)}{where}")
            st.note_sent(tx)
            noted.append(tx)
        self.limits.charge_accounts(ip, counts)
        try:
            outcomes = await self.execute_txs(txs)
        except OutcomePending:
            raise  # sequenced: their nonces stay pending until their block clears them
        except BaseException:
            for n in noted:
                st.forget_sent(n)
            raise
        hist = st.history
        for tx, o in zip(txs, outcomes, strict=True):
            hist.note_sent(o.tx_hash, tx)  # the body for ``tx``'s ``info``
        return outcomes

    def _tx_reply(self, outcomes: list[TxOutcome], batch: bool) -> dict[str, Any]:
        code = next((o.code for o in outcomes if o.code != _OK), _OK)
        hashes = [o.tx_hash.hex() for o in outcomes]
        return {
            "code": code,
            "message": "" if code == _OK else _code_name(code),
            "tx_hash": hashes if batch else hashes[0],
            "predicted_execution_time_ms": self.config.predicted_execution_time_ms,
            "volume_quota_remaining": _VOLUME_QUOTA,
            "codes": [o.code for o in outcomes] if batch else code,
            "seq": self.state.seq,
        }

    async def _send(self, ip: str | None, batch: bool, types: Any, infos: Any) -> dict[str, Any]:
        """Decode, dry-run and execute a sendTx (``types``/``infos``: ``tx_type``/``tx_info``)
        or sendTxBatch request; a signature rejection is remembered by the request's bytes and
        a byte-for-byte replay answered from memory (limits.py)."""
        limits = self.limits
        if limits.holds_rejections():  # the request's digest only when it can be a replay
            hit = limits.replayed(RejectionCache.key(batch, types, infos))
            if hit is not None:
                raise ApiError(hit[0], hit[1])
        txs = self._batch(types, infos) if batch else [self._decode_tx(types, infos)]
        try:
            outcomes = await self.send_txs(txs, ip)
        except ApiError as e:
            if limits.remembers(e.code):
                limits.remember(RejectionCache.key(batch, types, infos), e.code, e.message)
            raise
        return self._tx_reply(outcomes, batch)

    async def send_tx(self, request: web.Request) -> web.Response:
        f = await _fields(request)
        reply = await self._send(request.remote, False, f.get("tx_type"), f.get("tx_info"))
        return _json(reply, 200 if reply["code"] == _OK else 400)

    def _batch(self, tx_types: Any, tx_infos: Any) -> list[Any]:
        types = _json_list(tx_types, "tx_types")
        infos = _json_list(tx_infos, "tx_infos")
        if len(types) != len(infos):
            raise ApiError(int(ResultCode.INVALID_PARAM), "tx_types and tx_infos differ in length")
        if len(types) > self.config.max_batch:
            raise ApiError(
                int(ResultCode.BATCH_TOO_LARGE),
                f"batch of {len(types)} txs is over {self.config.max_batch}",
            )
        if not types:
            raise ApiError(int(ResultCode.INVALID_PARAM), "empty batch")
        return [self._decode_tx(t, i) for t, i in zip(types, infos, strict=True)]

    async def send_tx_batch(self, request: web.Request) -> web.Response:
        f = await _fields(request)
        reply = await self._send(request.remote, True, f.get("tx_types"), f.get("tx_infos"))
        return _json(reply)

    async def fast_send(
        self, path: str, ip: str | None, content_type: str, body: bytes
    ) -> tuple[int, bytes, str | None]:
        """``sendTx``/``sendTxBatch`` for the fast lane (fastlane.py): (status, JSON body,
        Retry-After) exactly as the app answers it through ``_errors`` and ``_budget``."""
        batch = path.endswith("Batch")
        try:
            wait = self.limits.charge_ip(ip, rest_weight(path))
            if wait:
                raise RateLimited(wait, "requests from this IP")
            f = _body_fields(content_type, body)
            if batch:
                reply = await self._send(ip, True, f.get("tx_types"), f.get("tx_infos"))
                return 200, _encode(reply), None
            reply = await self._send(ip, False, f.get("tx_type"), f.get("tx_info"))
            return (200 if reply["code"] == _OK else 400), _encode(reply), None
        except RateLimited as e:
            return e.status, _encode(e.body(False)), str(e.retry_after)
        except ApiError as e:
            return e.status, _encode(e.body(batch)), None

    # ---- WebSocket ------------------------------------------------------------------------------

    async def stream(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=self.config.ws_max_message_bytes)
        await ws.prepare(request)
        ip = request.remote
        if not self.limits.ws_open(ip):
            cap = self.config.ws_max_connections_per_ip
            error = _ws_error(ResultCode.WS_TOO_MANY_CONNECTIONS, f"at most {cap} per IP")
            await ws.send_str(_encode(error).decode())
            await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"too many connections")
            return ws
        fanout = self.fanout
        c = fanout.connect(ws, request.transport)
        fanout.send(c, {"type": "connected", "seq": self.state.seq})
        inflight: set[asyncio.Task[None]] = set()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    fanout.send(c, _ws_error(ResultCode.WS_INVALID_MESSAGE, "text frames only"))
                    continue
                await self._on_message(c, msg.data, inflight, ip)
                if c.closed:
                    break
        finally:
            fanout.disconnect(c)
            self.limits.ws_closed(ip)
        return ws

    async def _on_message(
        self, c: Client, text: str, inflight: set[asyncio.Task[None]], ip: str | None = None
    ) -> None:
        fanout = self.fanout
        try:
            obj = _parse_json(text, int(ResultCode.WS_INVALID_MESSAGE), "the message")
        except ApiError as e:
            fanout.send(c, _ws_error(e.code, e.message))
            return
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "ping":
            fanout.send(c, {"type": "pong"})
        elif kind in ("subscribe", "unsubscribe"):
            if kind == "subscribe":
                code, message = fanout.subscribe(c, obj.get("channel"), obj.get("auth"))
            else:
                code, message = fanout.unsubscribe(c, obj.get("channel"))
            if code != _OK:
                fanout.send(c, _ws_error(code, message))
        elif kind in ("jsonapi/sendtx", "jsonapi/sendtxbatch"):
            # Pipelined: the tx's dry-run (which advances the pending nonce) runs now, in arrival
            # order, before the task's first await; the reply goes out when its block lands, so
            # one connection can have many txs in flight instead of one per block.
            if len(inflight) >= self.config.ws_max_inflight_txs:
                # answered like any tx reply (its id and type), so the client knows which tx
                # was refused and that its nonce was not consumed
                code = int(ResultCode.TOO_MANY_PENDING_TXS)
                reply = {"code": code, "message": "too many txs in flight on this connection"}
                fanout.send(c, {**reply, "type": kind, "id": _reply_id(obj)})
                return
            wait = self.limits.charge_ip(ip, WS_TX_WEIGHT)
            if wait:
                reply = RateLimited(wait, "requests from this IP").body(False)
                fanout.send(c, {**reply, "type": kind, "id": _reply_id(obj)})
                return
            task = asyncio.get_running_loop().create_task(self._ws_tx_reply(c, kind, obj, ip))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        else:
            fanout.send(c, _ws_error(ResultCode.WS_INVALID_MESSAGE, f"unknown type {kind!r}"))

    async def _ws_tx_reply(
        self, c: Client, kind: str, obj: dict[str, Any], ip: str | None = None
    ) -> None:
        self.fanout.send(c, await self._ws_tx(kind, obj, ip))

    async def _ws_tx(self, kind: str, obj: dict[str, Any], ip: str | None = None) -> dict[str, Any]:
        data = obj.get("data")
        batch = kind == "jsonapi/sendtxbatch"
        try:
            if not isinstance(data, dict):
                raise ApiError(int(ResultCode.INVALID_PARAM), "data must be an object")
            if batch:
                reply = await self._send(ip, True, data.get("tx_types"), data.get("tx_infos"))
            else:
                reply = await self._send(ip, False, data.get("tx_type"), data.get("tx_info"))
        except ApiError as e:
            reply = e.body(batch)
        reply["type"] = kind
        reply["id"] = _reply_id(obj)
        return reply


_CODES = frozenset(int(c) for c in ResultCode)


def _best(levels: Levels, orders: LevelOrders, limit: int) -> list[OrderRecord]:
    """The first ``limit`` resting orders of one side, best price first, by order index within a
    level: a walk over the book's levels (already sorted) that stops at ``limit``. Cost:
    O(levels visited + orders at them), not O(orders on the side)."""
    out: list[OrderRecord] = []
    for price, _ in levels:
        level = orders.get(price)
        if level:
            out.extend(level[oi] for oi in sorted(level))
            if len(out) >= limit:
                return out[:limit]
    return out


def _code_name(code: int) -> str:
    return ResultCode(code).name if code in _CODES else str(code)


def _reply_id(obj: dict[str, Any]) -> str | int | None:
    rid = obj.get("id")
    return rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None


def _ws_error(code: int, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"code": int(code), "message": message},
        "code": int(code),
        "message": message,
    }


def _json_list(raw: Any, name: str) -> list[Any]:
    if isinstance(raw, str):
        raw = _parse_json(raw, int(ResultCode.INVALID_PARAM), name)
    if not isinstance(raw, list):
        raise ApiError(int(ResultCode.INVALID_PARAM), f"{name} must be a JSON list")
    return raw


def build_app(
    state: ReplicaState,
    execute_txs: ExecuteTxs,
    fanout: Fanout,
    *,
    counters: ApiCounters | None = None,
    config: ApiConfig | None = None,
    commitments: CommitmentSource | None = None,
    hooks: ReplicaHooks | None = None,
    queue_delay: Callable[[], float] | None = None,
) -> web.Application:
    """The replica's aiohttp app over ``state``; WebSocket clients are served through ``fanout``
    (its owner publishes each applied block to it), handlers count into ``counters``. ``hooks``:
    a probe told about each dry-run, middlewares around every handler. ``queue_delay``: seconds
    the oldest tx on its way to the sequencer has waited (the door's signal; None: no door).
    See the module docstring."""
    cfg = config if config is not None else ApiConfig()
    hk = hooks if hooks is not None else ReplicaHooks()
    limits = Limits(cfg)
    admission = Admission(queue_delay, cfg.admission_max_delay_s)
    api = _Api(
        state,
        execute_txs,
        fanout,
        counters if counters is not None else ApiCounters(),
        cfg,
        commitments,
        hk.probe,
        limits,
        admission,
    )

    @web.middleware
    async def _budget(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        wait = limits.charge_ip(request.remote, rest_weight(request.path))
        if wait:
            raise RateLimited(wait, "requests from this IP")
        return await handler(request)

    app = web.Application(
        client_max_size=cfg.max_body_bytes, middlewares=[_errors, _budget, *hk.middlewares]
    )
    app[LIMITS] = limits
    app[ADMISSION] = admission
    app[FAST_SEND] = api.fast_send
    app[API_CONFIG] = cfg
    r = app.router
    r.add_get("/", api.info)
    r.add_get("/info", api.info)
    r.add_get("/stream", api.stream)
    for path, handler in (
        ("info", api.info),
        ("orderBooks", api.order_books),
        ("orderBookDetails", api.order_book_details),
        ("orderBookOrders", api.order_book_orders),
        ("recentTrades", api.recent_trades),
        ("assetDetails", api.asset_details),
        ("account", api.account),
        ("accountsByL1Address", api.accounts_by_l1_address),
        ("apikeys", api.api_keys),
        ("nextNonce", api.next_nonce),
        ("tx", api.tx),
        ("currentHeight", api.current_height),
        ("block", api.block),
        ("blocks", api.blocks),
        ("txs", api.txs),
        ("blockTxs", api.block_txs),
        ("exchangeStats", api.exchange_stats),
        ("announcement", api.announcement),
        ("candles", api.candles),
        ("funding-rates", api.funding_rates),
        ("fundings", api.fundings),
        ("accountActiveOrders", api.account_active_orders),
        ("accountInactiveOrders", api.account_inactive_orders),
        ("accountOrders", api.account_orders),
        ("trades", api.trades),
        ("deposit/history", api.deposit_history),
        ("withdraw/history", api.withdraw_history),
        ("transfer/history", api.transfer_history),
        ("positionFunding", api.position_funding),
        ("liquidations", api.liquidations),
        ("pnl", api.pnl),
        ("accountTxs", api.account_txs),
        ("accountLimits", api.account_limits),
        ("accountMetadata", api.account_metadata),
    ):
        r.add_get(f"/api/v1/{path}", handler)
    r.add_get("/api/v1/", api.info)
    r.add_post("/api/v1/sendTx", api.send_tx)
    r.add_post("/api/v1/sendTxBatch", api.send_tx_batch)

    async def _shutdown(app: web.Application) -> None:
        await fanout.close()  # the app's WebSocket connections end with the app

    app.on_shutdown.append(_shutdown)
    return app
