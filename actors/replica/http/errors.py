"""How the replica's API answers a request it cannot answer with a result.

An error is ``{"code": <ResultCode>, "message": ...}`` with HTTP 400 (a bad request or a rejected
tx), 404 (unknown path, account, market or tx), 405, 413 (a body over ``max_body_bytes``), 429
(over a budget, or refused at the overload door; with ``Retry-After``) or 503 (21822
``SEQUENCER_UNAVAILABLE``: the outcome is not known yet; ``tx_hash`` names the txs to look up,
a list on a ``*Batch`` path). :func:`error_middleware` turns every one into that answer.

Requests aiohttp's own parser refuses (a bare LF line ending, a request line or header over 8,190
bytes, a malformed header) never reach a handler: :func:`json_error_protocols` makes aiohttp's
protocol answer them with the same JSON (HTTP 400, 20001 ``INVALID_PARAM``, what was wrong), as the
fast lane does, and count them; they are logged within a :class:`LogBudget`, not one traceback each.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, ClassVar

import msgspec
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from raydex.codecs import ResultCode
from raydex.observability.logbudget import LogBudget

__all__ = [
    "ApiError",
    "OutcomePending",
    "Overloaded",
    "RateLimited",
    "bad_requests",
    "code_name",
    "error_middleware",
    "error_response",
    "json_error_protocols",
    "json_response",
]

_encode = msgspec.json.Encoder().encode


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


class OutcomePending(ApiError):
    """The sequencer executed the txs (``tx_hashes``), but their block has not been applied here
    within the deadline: the outcome is in the block, readable by hash once it lands."""


def json_response(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(body=_encode(body), status=status, content_type="application/json")


def error_response(code: int, message: str, status: int) -> web.Response:
    return json_response({"code": code, "message": message}, status)


@web.middleware
async def error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except RateLimited as e:
        resp = json_response(e.body(False), e.status)
        resp.headers["Retry-After"] = str(e.retry_after)
        return resp
    except ApiError as e:
        return json_response(e.body(request.path.endswith("Batch")), e.status)
    except web.HTTPRequestEntityTooLarge:
        return error_response(int(ResultCode.BODY_TOO_LARGE), "request body too large", 413)
    except web.HTTPNotFound:
        return error_response(int(ResultCode.NOT_FOUND), f"no such endpoint {request.path}", 404)
    except web.HTTPMethodNotAllowed as e:
        return error_response(int(ResultCode.INVALID_PARAM), f"method {e.method} not allowed", 405)


class _JsonErrors(RequestHandler):
    """aiohttp's protocol, answering what its parser refuses with the API's JSON (4xx)."""

    __slots__ = ()

    #: bad requests answered, by HTTP status; and the log budget their lines go through
    refused: ClassVar[Counter[int]] = Counter()
    logs: ClassVar[LogBudget] = LogBudget(logging.getLogger(__name__))

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not 400 <= status < 500:  # a bug or a timeout: aiohttp's own answer and log line
            return super().handle_error(request, status, exc, message)
        self.refused[status] += 1
        what = message or (str(exc) if exc is not None else HTTPStatus(status).phrase)
        self.logs.warning("bad_request", "replica HTTP: bad request from %s: %s",
                          request.remote, what)  # fmt: skip
        resp = error_response(int(ResultCode.INVALID_PARAM), f"bad HTTP request: {what}", status)
        resp.force_close()
        return resp


def json_error_protocols(server: web.Server) -> Callable[[], asyncio.Protocol]:
    """The protocol factory of ``server`` (a runner's ``web.Server``) whose protocols answer
    malformed requests with the API's JSON (module docstring). ``_JsonErrors`` adds no slots, so
    each protocol ``server`` makes becomes one in place (aiohttp has no hook for this answer)."""

    def make() -> asyncio.Protocol:
        proto = server()
        proto.__class__ = _JsonErrors
        return proto

    return make


def bad_requests() -> int:
    """Malformed requests answered by aiohttp's parser with a JSON 4xx, in this process."""
    return sum(_JsonErrors.refused.values())


_CODES = frozenset(int(c) for c in ResultCode)


def code_name(code: int) -> str:
    """``ResultCode``'s name of ``code``, else the number."""
    return ResultCode(code).name if code in _CODES else str(code)
