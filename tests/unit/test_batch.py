"""Tx batch and outcome frames round trip; malformed batches raise CodecError only."""

from __future__ import annotations

import pytest

from raydex.codecs import (
    CancelOrder,
    CodecError,
    Deposit,
    TxOutcome,
    decode_batch,
    decode_outcomes,
    encode_batch,
    encode_outcomes,
)

TXS = [Deposit(1, 5), CancelOrder(1, 0, 0, 5, 10, 3, bytes(80))]


def test_a_batch_round_trips() -> None:
    assert decode_batch(encode_batch(TXS)) == TXS


def test_outcomes_round_trip() -> None:
    outs = [
        TxOutcome(bytes(range(40)), 200, 1 << 48, 7),
        TxOutcome(bytes(40), 21104, 0, 7),
    ]
    assert decode_outcomes(encode_outcomes(outs)) == outs


@pytest.mark.parametrize("cut", [0, 1, 3, 5, 40, -1])
def test_truncated_batches_raise_codec_error(cut: int) -> None:
    frame = encode_batch(TXS)
    with pytest.raises(CodecError):
        decode_batch(frame[:cut])


def test_trailing_bytes_and_absurd_counts_are_rejected() -> None:
    with pytest.raises(CodecError, match="trailing"):
        decode_batch(encode_batch(TXS) + b"\x00")
    with pytest.raises(CodecError, match="exceeds"):
        decode_batch(b"\xff\xff\xff\xff")
