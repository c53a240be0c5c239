"""Market parameters are declared once (codecs/_market.py): every layout that carries them carries
the same fields, in the same order, with the same width, domain and JSON name."""

from __future__ import annotations

import pytest

from raydex.codecs import (
    MARKET_PARAMS,
    CreateMarket,
    MarketChanged,
    MarketRecord,
    UpdateMarket,
    spec_of,
)

CARRIERS = [CreateMarket, UpdateMarket, MarketChanged, MarketRecord]


def _params(cls: type) -> list[object]:
    fields = {f.name: f for f in spec_of(cls).fields}
    names = [f.name for f in spec_of(cls).fields if f.name in MARKET_PARAMS]
    assert names == list(MARKET_PARAMS), f"{cls.__name__} lists the parameters out of order"
    return [fields[n] for n in MARKET_PARAMS]


@pytest.mark.parametrize("cls", CARRIERS[1:], ids=lambda c: c.__name__)
def test_every_market_layout_carries_the_parameters_exactly_as_create_market_does(
    cls: type,
) -> None:
    assert _params(cls) == _params(CreateMarket)


@pytest.mark.parametrize(
    "cls", [CreateMarket, MarketChanged, MarketRecord], ids=lambda c: c.__name__
)
def test_the_fixed_fields_agree_too(cls: type) -> None:
    fields = {f.name: f for f in spec_of(cls).fields}
    reference = {f.name: f for f in spec_of(CreateMarket).fields}
    for name in ("symbol", "price_decimals", "size_decimals", "mark_price", "status"):
        assert fields[name] == reference[name], name
