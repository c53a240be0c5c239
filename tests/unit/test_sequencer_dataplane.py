"""The sequencer's data plane under abuse (issue 8, defect 5), over real gRPC on 127.0.0.1 with
a real WAL: strangers are refused, an empty batch is answered, an oversized batch is refused
whole, and a flood of badly signed txs does not hold back honest txs."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from raydex.actors.local import Trader, eth_market
from raydex.actors.sequencer import SequencerConfig, SequencerService
from raydex.actors.transport import (
    BLOCKS_METHOD,
    TXS_METHOD,
    GrpcBlockSource,
    GrpcTxChannel,
    new_secret,
)
from raydex.codecs import ResultCode, decode_outcomes, encode_batch, generate_key, sign_tx

SECRET = new_secret()


def config(tmp: Path, **kw: Any) -> SequencerConfig:
    return SequencerConfig(wal_dir=str(tmp / "wal"), snapshot_dir=str(tmp / "snap"), **kw)


async def started(cfg: SequencerConfig, traders: list[Trader]) -> SequencerService:
    svc = SequencerService(cfg)
    await svc.start()
    setup: list[Any] = [eth_market()]
    for t in traders:
        setup += t.setup(10**12)
    outs = await svc.submit(setup, operator=True)
    assert {o.code for o in outs} == {ResultCode.OK}
    return svc


def run(coro: Any, timeout: float = 60.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_strangers_get_neither_blocks_nor_the_tx_log_nor_a_batch_in(tmp_path: Path) -> None:
    honest = Trader(1)

    async def scenario() -> None:
        svc = await started(config(tmp_path, data_plane_secret=SECRET), [honest])
        before = svc.state_hash()
        try:
            for port in (svc.port, svc.txlog_port):
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                    call = ch.unary_stream(BLOCKS_METHOD)((1).to_bytes(8, "little"))
                    with pytest.raises(grpc.aio.AioRpcError) as info:
                        async for _ in call:
                            raise AssertionError("a stranger was sent a block")
                    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            async with grpc.aio.insecure_channel(f"127.0.0.1:{svc.port}") as ch:
                # the server ends a stranger's batch stream as it opens, before reading from it
                txs = ch.stream_stream(TXS_METHOD)()
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await txs.read()
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
                # a batch pushed anyway is never read; its write fails with the call's status, or
                # with INTERNAL when the server's end of the call overtook the write in flight
                # (grpc aio reports the failed send locally, as CI once saw)
                pushy = ch.stream_stream(TXS_METHOD)()
                frame = encode_batch([honest.order(290_000, 1, 0)])
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await pushy.write((1).to_bytes(8, "little") + frame)
                    await pushy.read()
                assert info.value.code() in (
                    grpc.StatusCode.UNAUTHENTICATED,
                    grpc.StatusCode.INTERNAL,
                )
            assert svc.state_hash() == before
            assert svc.status()["data_plane"]["refused_calls"] == 4

            # a member (the secret, through our own clients) is served
            honest.nonce = 0
            target = f"127.0.0.1:{svc.port}"
            channel = GrpcTxChannel(target, secret=SECRET)
            reply = decode_outcomes(
                await channel.submit(encode_batch([honest.order(290_000, 1, 0)]))
            )
            assert [o.code for o in reply] == [ResultCode.OK]
            source = GrpcBlockSource(target, name="member", secret=SECRET)
            stream = source.subscribe(1)
            assert (await anext(stream))[0] == 1
            await stream.aclose()
            await source.close()
            await channel.close()
        finally:
            await svc.stop()

    run(scenario())


def test_a_sequencer_listening_beyond_loopback_needs_a_secret(tmp_path: Path) -> None:
    async def scenario() -> None:
        svc = SequencerService(config(tmp_path, data_host="0.0.0.0"))
        with pytest.raises(ValueError, match="without a secret"):
            await svc.start()
        await svc.stop()

    run(scenario())


def test_the_secret_never_shows_in_a_config_repr(tmp_path: Path) -> None:
    cfg = config(tmp_path, data_plane_secret=SECRET)
    assert SECRET not in repr(cfg)
    assert dataclasses.replace(cfg).data_plane_secret == SECRET


def test_an_empty_batch_is_answered_with_no_outcome(tmp_path: Path) -> None:
    async def scenario() -> list[Any]:
        svc = await started(config(tmp_path), [])
        try:
            channel = GrpcTxChannel(f"127.0.0.1:{svc.port}")
            reply = await asyncio.wait_for(channel.submit(encode_batch([])), 10)
            await channel.close()
            return decode_outcomes(reply)
        finally:
            await svc.stop()

    assert run(scenario()) == []


def test_a_batch_over_the_cap_is_refused_whole_and_changes_nothing(tmp_path: Path) -> None:
    trader = Trader(1)

    async def scenario() -> list[Any]:
        svc = await started(config(tmp_path, max_batch_txs=8), [trader])
        try:
            before = svc.state_hash()
            channel = GrpcTxChannel(f"127.0.0.1:{svc.port}")
            big = encode_batch([trader.order(290_000 - i, 1, 0) for i in range(9)])
            reply = decode_outcomes(await channel.submit(big))
            assert svc.state_hash() == before
            trader.nonce = 0
            ok = decode_outcomes(
                await channel.submit(
                    encode_batch([trader.order(290_000 - i, 1, 0) for i in range(8)])
                )
            )
            assert {o.code for o in ok} == {ResultCode.OK}
            await channel.close()
            return [(o.code, o.seq) for o in reply]
        finally:
            await svc.stop()

    assert run(scenario()) == [(ResultCode.BATCH_TOO_LARGE, 0)]


def test_honest_txs_are_sequenced_while_a_flood_of_bad_signatures_is_being_checked(
    tmp_path: Path,
) -> None:
    """The flood's signatures are checked slice by slice with the loop free in between, so an
    honest tx sent after the flood began lands in an earlier block than the flood's refusals
    (before the fix the whole flood was checked inside one call: the honest tx waited for it)."""
    honest, victim = Trader(1), Trader(2)
    wrong_seed, _ = generate_key()
    flood = [sign_tx(victim.order(290_000 - i % 100, 1, 0), wrong_seed) for i in range(1000)]

    async def scenario() -> tuple[list[Any], list[Any]]:
        svc = await started(config(tmp_path, verify_slice_ms=0.5), [honest, victim])
        try:
            target = f"127.0.0.1:{svc.port}"
            attacker = GrpcTxChannel(target)
            member = GrpcTxChannel(target)
            bad = asyncio.ensure_future(attacker.submit(encode_batch(flood)))
            await asyncio.sleep(0.02)  # the flood is being checked now (~1,000 x 70+ us)
            good = decode_outcomes(await member.submit(encode_batch([honest.order(280_000, 1, 0)])))
            refused = decode_outcomes(await bad)
            await attacker.close()
            await member.close()
            return good, refused
        finally:
            await svc.stop()

    good, refused = run(scenario())
    assert [o.code for o in good] == [ResultCode.OK]
    assert {o.code for o in refused} == {ResultCode.INVALID_SIGNATURE}
    assert good[0].seq < min(o.seq for o in refused)
