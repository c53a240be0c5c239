"""The fast lane's form parser reads every body as ``urllib.parse.parse_qsl`` (what aiohttp's
``request.post()`` agrees with for a utf-8 urlencoded form): the same fields and values, for
well-formed forms and for malformed escapes, stray backslashes, invalid utf-8 and raw non-ASCII."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, quote, urlencode

from hypothesis import given, settings
from hypothesis import strategies as st

from raydex.actors.replica.http import parse_form


def expected(text: str) -> dict[str, str]:
    return dict(parse_qsl(text, keep_blank_values=True))


# the characters where the two decoders could part: escapes, their hex digits, separators,
# backslashes (the fast path's own escape character), non-ASCII and control characters
TOKENS = [*'%2AaFfG0x9+&=\\ é€\x00\n"{}:,', "%C3", "%A9", "%ZZ", "%5C", "%22", "%7b", "%e2%82"]
TRICKY = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)


@given(TRICKY)
@settings(max_examples=2000)
def test_any_text_parses_as_parse_qsl_does(text: str) -> None:
    assert parse_form(text) == expected(text)


@given(st.dictionaries(st.text(max_size=12), st.text(max_size=40), max_size=5))
def test_urlencoded_fields_come_back(fields: dict[str, str]) -> None:
    text = urlencode(fields)
    assert parse_form(text) == expected(text) == fields


@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=20), max_size=8))
def test_a_tx_info_json_survives_the_round_trip(info: dict[str, object]) -> None:
    tx_info = json.dumps(info, ensure_ascii=False)
    for text in (urlencode({"tx_type": 14, "tx_info": tx_info}), "tx_info=" + quote(tx_info)):
        assert parse_form(text) == expected(text)
        assert json.loads(parse_form(text)["tx_info"]) == info


def test_lowercase_escapes_plus_and_blank_values() -> None:
    text = "a=%7b%22x%22%3a1%7d&b=&c&&d=1+2%2B3&e=%zz%4"
    assert parse_form(text) == expected(text)
    assert parse_form(text) == {"a": '{"x":1}', "b": "", "c": "", "d": "1 2+3", "e": "%zz%4"}
