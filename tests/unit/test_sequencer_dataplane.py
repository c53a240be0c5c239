"""The sequencer's data plane under abuse (issue 8, defect 5), over real gRPC on 127.0.0.1 with
a real WAL: strangers are refused, an empty batch is answered, an oversized batch is refused
whole, a flood of badly signed txs does not hold back honest txs, and with a secret the batches of
another host's streams are verified before they execute."""

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
    TX_STREAM,
    TXS_METHOD,
    BlockHub,
    GrpcBlockSource,
    GrpcTxChannel,
    StreamOrder,
    TcpDataPlaneServer,
    new_secret,
    target_of,
    tx_channel,
)
from raydex.actors.transport.grpc_plane import _remote_peer
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


def test_with_a_secret_a_batch_from_another_host_is_verified_and_one_from_this_host_is_audited(
    tmp_path: Path,
) -> None:
    """``verify_signatures`` auto with a secret: a forged tx on a stream from another host (the
    ``remote`` the planes set on it) is refused before it executes; on a same-host stream it
    executes (the committer's audit flags it afterwards); ``True`` verifies both."""
    honest, victim = Trader(1), Trader(2)
    wrong_seed, _ = generate_key()

    async def scenario(cfg: SequencerConfig) -> list[int]:
        svc = await started(cfg, [honest, victim])
        codes = []
        try:
            assert svc.signature_policy() == ("other hosts" if cfg.verify_signatures is None
                                              else "all")  # fmt: skip
            for remote in (True, False):
                forged = sign_tx(victim.order(290_000 + remote, 1, 0), wrong_seed)
                victim.nonce -= 1  # the same nonce again for the next one

                async def on_stream(r: bool = remote, tx: Any = forged) -> bytes:
                    TX_STREAM.set(StreamOrder(remote=r))  # as the plane does for the stream
                    return await svc.handle_batch(encode_batch([tx]))

                (out,) = decode_outcomes(await asyncio.create_task(on_stream()))
                codes.append(out.code)
        finally:
            await svc.stop()
        return codes

    auto = config(tmp_path / "auto", data_plane_secret=SECRET)
    assert run(scenario(auto)) == [ResultCode.INVALID_SIGNATURE, ResultCode.OK]
    honest, victim = Trader(1), Trader(2)
    always = config(tmp_path / "all", data_plane_secret=SECRET, verify_signatures=True)
    assert run(scenario(always)) == [ResultCode.INVALID_SIGNATURE, ResultCode.INVALID_SIGNATURE]


def test_a_stream_is_from_another_host_only_when_its_peer_is_not_an_address_of_this_machine(
    tmp_path: Path,
) -> None:
    """What the planes tell ``StreamOrder.remote`` from: gRPC's peer strings, and a real TCP and
    Unix-socket tx stream on this host (both local)."""
    assert not _remote_peer("ipv4:127.0.0.1:5000") and not _remote_peer("ipv6:%5B::1%5D:1")
    assert not _remote_peer("unix:/tmp/x.sock") and _remote_peer("ipv4:203.0.113.7:5000")
    seen: list[bool] = []

    async def handler(frame: bytes) -> bytes:
        stream = TX_STREAM.get()
        assert stream is not None
        seen.append(stream.remote)
        return frame

    async def scenario() -> None:
        server = TcpDataPlaneServer(BlockHub(), handler, unix_dir=str(tmp_path))
        port = await server.start()
        try:
            for target in (
                target_of("tcp", "127.0.0.1", port),
                target_of("tcp", "127.0.0.1", port, server.unix_path),
            ):
                channel = tx_channel(target)
                assert await channel.submit(b"batch") == b"batch"
                await channel.close()
        finally:
            await server.stop()

    run(scenario())
    assert seen == [False, False]
