"""Request parameters and bodies, parsed without ever escaping.

Malformed, undecodable (a bad charset) or too deeply nested input (``MAX_JSON_DEPTH``, checked
before decoding) raises :class:`ApiError` with a message saying why: 20001 (``INVALID_PARAM``)
for a parameter, the body, a form or ``tx_types``/``tx_infos``, or the code the caller names.
Forms are read as aiohttp reads them: the last value of a repeated field wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import msgspec
from aiohttp import web

from raydex.codecs import ResultCode

from .errors import ApiError

__all__ = [
    "MAX_JSON_DEPTH",
    "body_fields",
    "int_param",
    "json_list",
    "parse_form",
    "parse_json",
    "request_fields",
    "too_deep",
]

_decode = msgspec.json.Decoder().decode


def int_param(q: Mapping[str, Any], name: str, lo: int, hi: int, default: int | None = None) -> int:
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


def too_deep(raw: str | bytes) -> bool:
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


def parse_json(raw: str | bytes, code: int, what: str) -> Any:
    """``raw`` decoded, or ApiError(``code``) saying why not: not JSON, not UTF-8, or nested
    deeper than ``MAX_JSON_DEPTH``."""
    if too_deep(raw):
        raise ApiError(code, f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return _decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise ApiError(code, f"{what} is not valid JSON") from None


def json_list(raw: Any, name: str) -> list[Any]:
    if isinstance(raw, str):
        raw = parse_json(raw, int(ResultCode.INVALID_PARAM), name)
    if not isinstance(raw, list):
        raise ApiError(int(ResultCode.INVALID_PARAM), f"{name} must be a JSON list")
    return raw


async def request_fields(request: web.Request) -> Mapping[str, Any]:
    """Form fields, or the keys of a JSON object body."""
    if request.content_type == "application/json":
        obj = parse_json(await request.read(), int(ResultCode.INVALID_PARAM), "body")
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


def body_fields(content_type: str, body: bytes) -> Mapping[str, Any]:
    """The fast lane's ``_fields``: a JSON object's keys or a utf-8 urlencoded form's fields."""
    if content_type == "application/json":
        obj = parse_json(body, int(ResultCode.INVALID_PARAM), "body")
        if not isinstance(obj, dict):
            raise ApiError(int(ResultCode.INVALID_PARAM), "body must be a JSON object")
        return obj
    try:
        # as aiohttp's ``request.post()`` reads a form (the last value of a repeated field wins)
        return parse_form(body.rstrip().decode("utf-8"))
    except ValueError as e:  # not utf-8
        raise ApiError(int(ResultCode.INVALID_PARAM), f"malformed form: {e}") from None


def parse_form(text: str) -> dict[str, str]:
    """``dict(urllib.parse.parse_qsl(text, keep_blank_values=True))``, faster on a sendTx body.

    A signed tx's ``tx_info`` is JSON, so a form carries dozens of percent-escapes per tx, which
    ``unquote`` decodes one by one in Python; :func:`_form_unquote` hands them to the C
    ``unicode_escape`` codec instead."""
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
