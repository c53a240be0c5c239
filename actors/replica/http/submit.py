"""Tx submission: ``sendTx``/``sendTxBatch`` over REST and the fast lane, and the WebSocket's
``jsonapi/sendtx``/``sendtxbatch`` frames, on one path.

::

    fields ─► a replayed refusal? (limits.py) ─► decode (tx_from_json) ─► account budget
           ─► the overload door (admission.py) ─► dry_run each tx, note_sent ─► execute_txs
           ─► the answer: the sequencer's code per tx and the tx hashes

- All or nothing before the sequencer: the first rejection releases the nonces noted so far and
  answers that tx's code; nothing reaches ``execute_txs``. Accounts are charged once all passed.
- The door refuses (23000, HTTP 429) before any signature check, nothing noted; a request
  refused for its signature and replayed byte for byte is answered from memory.
- An outcome that does not come in time: 21822, HTTP 503 (``execute_txs`` owns that deadline).
  A ``tx_info`` (a JSON string, or an object where the request is JSON: a WebSocket frame or a
  JSON body) that does not decode: 20003 (``INVALID_TX_INFO``) or the codec's code.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec
from aiohttp import web

from raydex.codecs import NONCE_KEPT_CODES, CodecError, ResultCode, TxOutcome, tx_from_json
from raydex.observability.metrics import ApiCounters

from ..cache import ReplicaState, dry_run, explain
from .admission import Admission
from .config import ApiConfig
from .errors import ApiError, OutcomePending, Overloaded, RateLimited, code_name, json_response
from .limits import Limits, RejectionCache, rest_weight
from .params import MAX_JSON_DEPTH, body_fields, json_list, request_fields, too_deep

__all__ = ["DryRunProbe", "ExecuteTxs", "TxSubmission", "reply_id"]

#: ``execute_txs(txs) -> one TxOutcome per tx``, returning once their block was applied here
ExecuteTxs = Callable[[list[Any]], Awaitable[list[TxOutcome]]]


class DryRunProbe(Protocol):
    """Told about each dry-run after it ran (``hooks.StepProbe`` is one)."""

    def on_dry_run(self, tx: Any, code: int, dur_ns: int) -> None: ...


_encode = msgspec.json.Encoder().encode
_OK = int(ResultCode.OK)
_INVALID_NONCE = int(ResultCode.INVALID_NONCE)
_VOLUME_QUOTA = 1_000_000


class TxSubmission:
    """The tx handlers of one app (REST, fast lane, WebSocket frames)."""

    def __init__(
        self,
        state: ReplicaState,
        execute_txs: ExecuteTxs,
        counters: ApiCounters,
        config: ApiConfig,
        limits: Limits,
        admission: Admission,
        probe: DryRunProbe | None = None,
    ) -> None:
        self.state = state
        self.execute_txs = execute_txs
        self.counters = counters
        self.config = config
        self.limits = limits
        self.admission = admission
        self.probe = probe

    def _decode_tx(self, tx_type: Any, tx_info: Any) -> Any:
        if isinstance(tx_type, str):
            if not (tx_type.isascii() and tx_type.isdigit() and len(tx_type) < 6):
                raise ApiError(int(ResultCode.INVALID_TX_TYPE), "tx_type must be an integer")
            tx_type = int(tx_type)
        if not isinstance(tx_type, int) or isinstance(tx_type, bool):
            raise ApiError(int(ResultCode.INVALID_TX_TYPE), "tx_type must be an integer")
        if isinstance(tx_info, dict):
            # an object, as Lighter's own WebSocket examples send it (and a JSON body may): its
            # frame or body was parsed under the depth bound already
            pass
        elif not isinstance(tx_info, str):
            raise ApiError(
                int(ResultCode.INVALID_TX_INFO), "tx_info must be a JSON object or a JSON string"
            )
        elif too_deep(tx_info):
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
            code = dry_run(st, tx, now_ms)
            dt = time.perf_counter_ns() - t0
            dry_run_time.record(dt)
            if probe is not None:
                probe.on_dry_run(tx, code, dt)
            if code != _OK:
                for n in noted:
                    st.forget_sent(n)
                where = f" (tx {i})" if len(txs) > 1 else ""
                detail = explain(tx, code)
                detail = f": {detail}" if detail else ""
                raise ApiError(code, f"rejected by dry-run: {_message(code)}{where}{detail}")
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
        """The answer to executed txs. ``code`` is 200 unless a tx changed nothing (a code of
        ``NONCE_KEPT_CODES``: its nonce is still free), as on Lighter, whose sendTx answers 200
        for a tx that then fails in its block (a post-only order that would cross, a stale
        order version, ...): lighter-sdk's nonce manager reads any other code as "nonce not
        used" and would reuse it. What each tx did is in ``codes`` (one code, or one per tx of
        a batch) and, for a failure, in ``message``."""
        code = next((o.code for o in outcomes if o.code in NONCE_KEPT_CODES), _OK)
        failed = next((o.code for o in outcomes if o.code != _OK), _OK)
        hashes = [o.tx_hash.hex() for o in outcomes]
        if code != _OK:
            message = _message(code)
        elif failed != _OK:
            message = f"executed and refused by the exchange: {code_name(failed)} (nonce used)"
        else:
            message = ""
        return {
            "code": code,
            "message": message,
            "tx_hash": hashes if batch else hashes[0],
            "predicted_execution_time_ms": self.config.predicted_execution_time_ms,
            "volume_quota_remaining": _VOLUME_QUOTA,
            "codes": [o.code for o in outcomes] if batch else failed,
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
        f = await request_fields(request)
        reply = await self._send(request.remote, False, f.get("tx_type"), f.get("tx_info"))
        return json_response(reply, 200 if reply["code"] == _OK else 400)

    def _batch(self, tx_types: Any, tx_infos: Any) -> list[Any]:
        types = json_list(tx_types, "tx_types")
        infos = json_list(tx_infos, "tx_infos")
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
        f = await request_fields(request)
        reply = await self._send(request.remote, True, f.get("tx_types"), f.get("tx_infos"))
        return json_response(reply)

    async def fast_send(
        self, path: str, ip: str | None, content_type: str, body: bytes
    ) -> tuple[int, bytes, str | None]:
        """``sendTx``/``sendTxBatch`` for the fast lane (fastlane.py): (status, JSON body,
        Retry-After) exactly as the app answers it through ``error_middleware`` and ``_budget``."""
        batch = path.endswith("Batch")
        try:
            wait = self.limits.charge_ip(ip, rest_weight(path))
            if wait:
                raise RateLimited(wait, "requests from this IP")
            f = body_fields(content_type, body)
            if batch:
                reply = await self._send(ip, True, f.get("tx_types"), f.get("tx_infos"))
                return 200, _encode(reply), None
            reply = await self._send(ip, False, f.get("tx_type"), f.get("tx_info"))
            return (200 if reply["code"] == _OK else 400), _encode(reply), None
        except RateLimited as e:
            return e.status, _encode(e.body(False)), str(e.retry_after)
        except ApiError as e:
            return e.status, _encode(e.body(batch)), None

    async def ws_tx(self, kind: str, obj: dict[str, Any], ip: str | None = None) -> dict[str, Any]:
        """The reply to a WebSocket ``jsonapi/sendtx``/``sendtxbatch`` frame ``obj``: the tx
        answer (Lighter's ``RespSendTx``/``RespSendTxBatch`` fields), or the refusal's body, with
        the frame's ``type`` and ``id`` (:func:`reply_id`).

        As Lighter takes them: ``data.tx_info`` a JSON object or a JSON string; ``data.tx_types``
        and ``data.tx_infos`` JSON strings of lists (Lighter's documented form) or lists, whose
        ``tx_infos`` items are strings or objects."""
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
        reply["id"] = reply_id(obj)
        return reply


def reply_id(obj: dict[str, Any]) -> str | int | None:
    """A tx frame's ``id``: top-level, or inside ``data`` where Lighter's own examples put it;
    a string or an integer, else None."""
    rid = obj.get("id")
    if rid is None:
        data = obj.get("data")
        if isinstance(data, dict):
            rid = data.get("id")
    return rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None


def _message(code: int) -> str:
    """A refusal's name for the answer's message. INVALID_NONCE in Lighter's own words too:
    lighter-sdk re-reads the nonce from the exchange when an error says "invalid nonce"."""
    name = code_name(code)
    return f"{name} (invalid nonce)" if code == _INVALID_NONCE else name
