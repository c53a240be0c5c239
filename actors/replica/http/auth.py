"""Lighter auth tokens: who is asking for an account's private data (REST and WebSocket).

A token is ``"{deadline}:{account}:{api_key_index}:{sig}"``: ``deadline`` in Unix seconds,
``sig`` the 80-byte Schnorr signature (160 hex) by the account's API key of the Poseidon2 hash of
the first three fields as text (``codecs.signing.auth_token_hash``; lighter-go's
``ConstructAuthToken``, the SDK's ``SignerClient.create_auth_token_with_expiry``).

::

    REST  Authorization: <token>  or  ?auth=<token> ─┐
    WS    {"type":"subscribe", ..., "auth": <token>} ─┴─► authenticate(token, now_s, state)
                                                          └─► (account, api_key) | AuthError

- Accepted iff the text has that shape (decimal fields without sign or leading zeros, account in
  [0, 2^48), key in [0, 254], 160 hex digits), ``now_s < deadline <= now_s + max_lifetime_s +
  CLOCK_SKEW_S`` (ccxt signs ``now + 8 h`` by its own clock), the account has a key at that index
  and the signature verifies under it; else :class:`AuthError` says which check failed, and
  nothing is served. A key changed meanwhile invalidates the token at once.
- A token speaks for its own account only (:func:`require_account`: 20014, HTTP 403).
- Codes: 20010 no token, 20011 malformed, 20012 expired, 20013 deadline beyond the maximum
  lifetime, 20014 another account, 21108 no such API key, 21120 bad signature; HTTP 401 else.

Cost: a verified (token, key) pair is remembered (:data:`VERIFIED_CACHE`), so a reused token
costs one dict lookup; a new one, a Poseidon2 hash and a Schnorr verify.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final, Protocol

from raydex.codecs import MAX_48, MAX_API_KEY_INDEX, ApiKeyRecord, ResultCode
from raydex.codecs.signing import KeyCache, auth_token_hash, auth_token_message

__all__ = [
    "CLOCK_SKEW_S",
    "LIGHTER_DEFAULT_LIFETIME_S",
    "LIGHTER_MAX_LIFETIME_S",
    "VERIFIED_CACHE",
    "AuthError",
    "KeySource",
    "authenticate",
    "require_account",
    "token_of",
]

#: The SDK's default token lifetime (``create_auth_token_with_expiry``): 10 minutes.
LIGHTER_DEFAULT_LIFETIME_S: Final = 10 * 60
#: The longest lifetime Lighter accepts: 8 hours.
LIGHTER_MAX_LIFETIME_S: Final = 8 * 3600
#: Seconds a client's clock may run ahead of the replica's for the maximum lifetime check.
CLOCK_SKEW_S: Final = 60
#: Verified (token, public key) pairs remembered; the least recently verified are forgotten.
VERIFIED_CACHE: Final = 10_000
_SIG_HEX = 160
_MAX_TOKEN = 200  # 10 + 1 + 15 + 1 + 3 + 1 + 160, with room


class AuthError(Exception):
    """A refused token: ``code`` (a ``ResultCode``), ``message``, HTTP ``status``."""

    def __init__(self, code: ResultCode, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.status = status


class _Verifier(Protocol):
    @property
    def keys(self) -> KeyCache: ...


class KeySource(Protocol):
    """What :func:`authenticate` reads: ``ReplicaState`` is one."""

    @property
    def api_keys(self) -> Mapping[tuple[int, int], ApiKeyRecord]: ...
    @property
    def verifier(self) -> _Verifier: ...


#: token -> (account, api key, deadline, the public key it verified under)
_verified: OrderedDict[str, tuple[int, int, int, bytes]] = OrderedDict()


def _decimal(raw: str, what: str, hi: int) -> int:
    if not (raw.isascii() and raw.isdigit()) or (raw[0] == "0" and len(raw) > 1):
        raise AuthError(ResultCode.AUTH_MALFORMED, f"auth token: {what} is not a decimal number")
    v = int(raw)
    if v > hi:
        raise AuthError(ResultCode.AUTH_MALFORMED, f"auth token: {what} must be at most {hi}")
    return v


def _parse(token: str) -> tuple[int, int, int, bytes]:
    if not isinstance(token, str) or not token:
        raise AuthError(ResultCode.AUTH_REQUIRED, "auth token required")
    if len(token) > _MAX_TOKEN:
        raise AuthError(ResultCode.AUTH_MALFORMED, "auth token too long")
    parts = token.split(":")
    if len(parts) != 4 or not all(parts):
        raise AuthError(
            ResultCode.AUTH_MALFORMED,
            "auth token must be {deadline}:{account_index}:{api_key_index}:{signature}",
        )
    deadline = _decimal(parts[0], "deadline", 2**63 - 1)
    account = _decimal(parts[1], "account_index", MAX_48)
    key = _decimal(parts[2], "api_key_index", MAX_API_KEY_INDEX)
    sig_hex = parts[3]
    if len(sig_hex) != _SIG_HEX or not sig_hex.isascii():
        raise AuthError(ResultCode.AUTH_MALFORMED, "auth token: signature must be 160 hex digits")
    try:
        sig = bytes.fromhex(sig_hex)
    except ValueError:
        raise AuthError(
            ResultCode.AUTH_MALFORMED, "auth token: signature must be 160 hex digits"
        ) from None
    return deadline, account, key, sig


def authenticate(
    token: str, now_s: float, state: KeySource, max_lifetime_s: float = LIGHTER_MAX_LIFETIME_S
) -> tuple[int, int]:
    """``(account, api_key_index)`` the token speaks for, or :class:`AuthError`. ``now_s``: the
    caller's wall clock (Unix seconds). Reads ``state`` as of the last applied block."""
    hit = _verified.get(token) if isinstance(token, str) else None
    if hit is not None:
        account, key, deadline, verified_under = hit
    else:
        deadline, account, key, sig = _parse(token)
        verified_under = b""
    if deadline <= now_s:
        raise AuthError(ResultCode.AUTH_EXPIRED, f"auth token expired at {deadline}")
    if deadline > now_s + max_lifetime_s + CLOCK_SKEW_S:
        raise AuthError(
            ResultCode.AUTH_DEADLINE_TOO_FAR,
            f"auth token deadline {deadline} is more than {int(max_lifetime_s)} s away",
        )
    record = state.api_keys.get((account, key))
    if record is None or not any(record.pub_key):
        raise AuthError(
            ResultCode.API_KEY_NOT_FOUND, f"api key {key} of account {account} not found"
        )
    if verified_under == record.pub_key:
        _verified.move_to_end(token)
        return account, key
    if hit is not None:  # the key changed since it was verified: check the signature again
        sig = _parse(token)[3]
    hm = auth_token_hash(auth_token_message(deadline, account, key))
    if not state.verifier.keys.verify(record.pub_key, hm, sig):
        raise AuthError(ResultCode.INVALID_SIGNATURE, "auth token: invalid signature")
    _verified[token] = (account, key, deadline, record.pub_key)
    if len(_verified) > VERIFIED_CACHE:
        _verified.popitem(last=False)
    return account, key


def require_account(
    token: str | None,
    account: int,
    now_s: float,
    state: KeySource,
    max_lifetime_s: float = LIGHTER_MAX_LIFETIME_S,
) -> int:
    """The API key index of ``token`` if it speaks for ``account``, else :class:`AuthError`
    (``AUTH_REQUIRED`` when there is no token at all)."""
    if not token:
        raise AuthError(ResultCode.AUTH_REQUIRED, f"auth token required for account {account}")
    got, key = authenticate(token, now_s, state, max_lifetime_s)
    if got != account:
        raise AuthError(
            ResultCode.AUTH_ACCOUNT_MISMATCH,
            f"auth token is for account {got}, not account {account}",
            403,
        )
    return key


def token_of(headers: Mapping[str, str], query: Mapping[str, Any]) -> str | None:
    """The token of a REST request: the ``Authorization`` header (a ``Bearer`` prefix is
    tolerated) or else the ``auth`` query parameter; None when neither is there."""
    raw = headers.get("Authorization")
    if raw:
        return raw[7:].strip() if raw[:7].lower() == "bearer " else raw.strip()
    q = query.get("auth")
    return q if isinstance(q, str) and q else None
