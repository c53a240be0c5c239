"""Auth tokens (actors/replica/http/auth.py): a token signed by the account's registered API key is
accepted until its deadline; every other token is refused with its own code. Real signatures
(the C backend), the SDK's own tokens from the known-answer file, a real ReplicaState."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raydex.actors.replica import ReplicaState
from raydex.actors.replica.http.auth import (
    CLOCK_SKEW_S,
    LIGHTER_MAX_LIFETIME_S,
    AuthError,
    authenticate,
    require_account,
    token_of,
)
from raydex.codecs import ApiKeyRecord, ResultCode, signing

NOW = 1_800_000_000.0
SK, PK = signing.generate_key()
OTHER_SK, OTHER_PK = signing.generate_key()
VECTORS = json.loads((Path(__file__).parent / "data" / "lighter_sdk_vectors.json").read_text())


def token(deadline: int, account: int, key: int, sk: bytes = SK) -> str:
    message = signing.auth_token_message(deadline, account, key)
    return f"{message}:{signing.sign(sk, signing.auth_token_hash(message)).hex()}"


def state_with(*keys: tuple[int, int, bytes]) -> ReplicaState:
    state = ReplicaState()
    for account, index, pk in keys:
        state.api_keys[(account, index)] = ApiKeyRecord(account, index, 0, pk)
    return state


def refused(tok: str, state: ReplicaState, now: float = NOW, **kw: float) -> AuthError:
    with pytest.raises(AuthError) as e:
        authenticate(tok, now, state, **kw)
    return e.value


def test_a_token_signed_by_the_registered_key_names_its_account_and_key() -> None:
    state = state_with((7, 3, PK))
    assert authenticate(token(int(NOW) + 600, 7, 3), NOW, state) == (7, 3)
    # the same token again is answered from the verified cache, still checked against the clock
    assert authenticate(token(int(NOW) + 600, 7, 3), NOW + 1, state) == (7, 3)


def test_the_sdks_own_tokens_verify_under_its_key() -> None:
    pk = bytes.fromhex(VECTORS["api_public_key"].removeprefix("0x"))
    for tok in VECTORS["auth_tokens"]:
        deadline, account, key = (int(x) for x in tok.split(":")[:3])
        state = state_with((account, key, pk))
        assert authenticate(tok, deadline - 60, state) == (account, key)


def test_an_expired_token_is_refused_even_after_it_was_accepted() -> None:
    state = state_with((7, 3, PK))
    tok = token(int(NOW) + 10, 7, 3)
    assert authenticate(tok, NOW, state) == (7, 3)
    assert refused(tok, state, now=NOW + 10).code == ResultCode.AUTH_EXPIRED
    assert refused(token(int(NOW) - 1, 7, 3), state).code == ResultCode.AUTH_EXPIRED


def test_a_deadline_beyond_the_maximum_lifetime_is_refused() -> None:
    state = state_with((7, 3, PK))
    longest = int(NOW) + LIGHTER_MAX_LIFETIME_S + CLOCK_SKEW_S
    assert authenticate(token(longest, 7, 3), NOW, state) == (7, 3)
    far = token(longest + 1, 7, 3)
    assert refused(far, state).code == ResultCode.AUTH_DEADLINE_TOO_FAR
    short = token(int(NOW) + 60 + CLOCK_SKEW_S + 1, 7, 3)
    assert refused(short, state, max_lifetime_s=60).code == ResultCode.AUTH_DEADLINE_TOO_FAR


def test_a_token_for_an_unregistered_key_or_account_is_refused() -> None:
    state = state_with((7, 3, PK))
    assert refused(token(int(NOW) + 60, 7, 4), state).code == ResultCode.API_KEY_NOT_FOUND
    assert refused(token(int(NOW) + 60, 8, 3), state).code == ResultCode.API_KEY_NOT_FOUND


def test_a_token_signed_by_another_key_is_refused() -> None:
    state = state_with((7, 3, PK), (8, 0, OTHER_PK))
    assert refused(token(int(NOW) + 60, 7, 3, OTHER_SK), state).code == (
        ResultCode.INVALID_SIGNATURE
    )
    # a valid token whose fields were changed afterwards: its signature covers the old ones
    good = token(int(NOW) + 60, 8, 0, OTHER_SK)
    assert authenticate(good, NOW, state) == (8, 0)
    moved = good.replace(":8:0:", ":7:3:")
    assert refused(moved, state).code == ResultCode.INVALID_SIGNATURE


def test_a_changed_key_invalidates_tokens_verified_under_the_old_one() -> None:
    state = state_with((7, 3, PK))
    tok = token(int(NOW) + 60, 7, 3)
    assert authenticate(tok, NOW, state) == (7, 3)
    state.api_keys[(7, 3)] = ApiKeyRecord(7, 3, 0, OTHER_PK)
    assert refused(tok, state).code == ResultCode.INVALID_SIGNATURE
    state.api_keys[(7, 3)] = ApiKeyRecord(7, 3, 0, bytes(40))  # key removed: zero key
    assert refused(tok, state).code == ResultCode.API_KEY_NOT_FOUND


@pytest.mark.parametrize(
    "tok",
    [
        "x",
        "1:2:3",
        "1:2:3:4:5",
        f"{int(NOW) + 60}:7:3:" + "ab" * 79,
        f"{int(NOW) + 60}:7:3:" + "zz" * 80,
        f"{int(NOW) + 60}:7:3:" + "é" * 160,
        f"{int(NOW) + 60}:-7:3:" + "ab" * 80,
        f"{int(NOW) + 60}:07:3:" + "ab" * 80,
        f"{int(NOW) + 60}:7:255:" + "ab" * 80,
        f"{int(NOW) + 60}:{2**48}:3:" + "ab" * 80,
        f"+{int(NOW) + 60}:7:3:" + "ab" * 80,
        f"{int(NOW) + 60}:7::" + "ab" * 80,
        f"{int(NOW) + 60}:7:3:" + "ab" * 200,
    ],
)
def test_malformed_tokens_are_refused_as_malformed(tok: str) -> None:
    assert refused(tok, state_with((7, 3, PK))).code == ResultCode.AUTH_MALFORMED


def test_no_token_at_all_asks_for_one() -> None:
    state = state_with((7, 3, PK))
    assert refused("", state).code == ResultCode.AUTH_REQUIRED
    with pytest.raises(AuthError) as e:
        require_account(None, 7, NOW, state)
    assert e.value.code == ResultCode.AUTH_REQUIRED and e.value.status == 401


def test_a_valid_token_reads_only_its_own_account() -> None:
    state = state_with((7, 3, PK))
    tok = token(int(NOW) + 60, 7, 3)
    assert require_account(tok, 7, NOW, state) == 3
    with pytest.raises(AuthError) as e:
        require_account(tok, 8, NOW, state)
    assert e.value.code == ResultCode.AUTH_ACCOUNT_MISMATCH and e.value.status == 403
    assert "account 7" in e.value.message and "account 8" in e.value.message


def test_the_token_comes_from_the_header_or_else_the_auth_parameter() -> None:
    assert token_of({"Authorization": "abc"}, {"auth": "def"}) == "abc"
    assert token_of({"Authorization": "Bearer abc"}, {}) == "abc"
    assert token_of({}, {"auth": "def"}) == "def"
    assert token_of({}, {}) is None
