"""Only deployment members use the data plane, and a member cannot make the publisher queue
unbounded work: real gRPC servers and real gRPC clients on 127.0.0.1 (no Ray).

A "stranger" is a plain ``grpc.aio`` client that knows the method names (they are public in the
source) but not the deployment's secret; it must be refused before it reads a block or gets a
batch to the handler."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import grpc
import grpc.aio
import pytest

from raydex.actors.transport import (
    AUTH_KEY,
    BLOCKS_METHOD,
    TXS_METHOD,
    Backoff,
    BlockHub,
    GrpcBlockSource,
    GrpcDataPlaneServer,
    GrpcTxChannel,
    NotAMember,
    TxHandler,
    TxStreamBroken,
    new_secret,
)

T = TypeVar("T")
FAST = Backoff(initial_s=0.01, max_s=0.1, max_attempts=50)
SECRET = new_secret()


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


@asynccontextmanager
async def serving(
    hub: BlockHub, tx_handler: TxHandler | None = None, **kw: Any
) -> AsyncIterator[GrpcDataPlaneServer]:
    server = GrpcDataPlaneServer(hub, tx_handler, **kw)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(grace=0)


def published(n: int) -> BlockHub:
    hub = BlockHub()
    for seq in range(1, n + 1):
        hub.publish_nowait(seq, b"signed txs of block %d" % seq)
    return hub


async def stranger_reads_blocks(address: str, metadata: Any = None) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_stream(BLOCKS_METHOD)((1).to_bytes(8, "little"), metadata=metadata)
        try:
            async for _ in call:
                raise AssertionError("a stranger was sent a block")
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    raise AssertionError("the stream ended without a status")


#: What a stranger's batch write ends with: the call's status, or INTERNAL when the server ended
#: the call (as it opens, before reading) while the write was in flight; grpc aio then reports
#: the failed send locally. ``server.refused`` counts the refusals either way.
BATCH_REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INTERNAL)


async def stranger_submits(address: str, metadata: Any = None) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(TXS_METHOD)(metadata=metadata)
        try:
            await call.write((1).to_bytes(8, "little") + b"a batch")
            await call.read()
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return await call.code()


def test_a_client_without_the_secret_reads_no_block_and_submits_no_batch() -> None:
    handled: list[bytes] = []

    async def handler(frame: bytes) -> bytes:
        handled.append(frame)
        return frame

    async def scenario() -> None:
        async with serving(published(5), handler, secret=SECRET) as server:
            assert await stranger_reads_blocks(server.address) == grpc.StatusCode.UNAUTHENTICATED
            wrong = ((AUTH_KEY, new_secret()),)
            assert (
                await stranger_reads_blocks(server.address, wrong)
                == grpc.StatusCode.UNAUTHENTICATED
            )
            assert await stranger_submits(server.address) in BATCH_REFUSED
            # a prefix of the secret is no secret either
            prefix = ((AUTH_KEY, SECRET[:-1]),)
            assert await stranger_submits(server.address, prefix) in BATCH_REFUSED
            assert server.refused == 4

    run(scenario())
    assert handled == []


def test_a_member_with_the_secret_reads_blocks_and_submits_batches() -> None:
    async def echo(frame: bytes) -> bytes:
        return b"ok:" + frame

    async def scenario() -> None:
        async with serving(published(5), echo, secret=SECRET) as server:
            source = GrpcBlockSource(server.address, secret=SECRET, backoff=FAST)
            stream = source.subscribe(1)
            seqs = [(await anext(stream))[0] for _ in range(5)]
            assert seqs == [1, 2, 3, 4, 5]
            await stream.aclose()
            await source.close()
            channel = GrpcTxChannel(server.address, secret=SECRET)
            assert await channel.submit(b"batch") == b"ok:batch"
            await channel.close()
            # the same, with a raw gRPC client carrying the secret in its metadata
            member = ((AUTH_KEY, SECRET),)
            async with grpc.aio.insecure_channel(server.address) as raw:
                call = raw.stream_stream(TXS_METHOD)(metadata=member)
                await call.write((7).to_bytes(8, "little") + b"raw")
                assert await call.read() == (7).to_bytes(8, "little") + b"ok:raw"
                call.cancel()
            assert server.refused == 0

    run(scenario())


def test_our_own_clients_with_a_wrong_secret_are_told_they_are_not_members() -> None:
    async def scenario() -> None:
        async with serving(published(3), None, secret=SECRET) as server:
            source = GrpcBlockSource(server.address, secret=new_secret(), backoff=FAST)
            with pytest.raises(NotAMember):
                await anext(source.subscribe(1))
            await source.close()

    run(scenario())


def test_a_server_off_loopback_refuses_to_start_without_a_secret() -> None:
    async def scenario() -> None:
        server = GrpcDataPlaneServer(BlockHub(), host="0.0.0.0")
        with pytest.raises(ValueError, match="without a secret"):
            await server.start()
        async with serving(BlockHub(), host="0.0.0.0", secret=SECRET) as ok:
            assert ok.address.startswith("0.0.0.0:")

    run(scenario())


def test_batches_beyond_the_in_flight_bounds_wait_unread_and_all_are_answered() -> None:
    running = 0
    most = 0
    gate = asyncio.Event()

    async def slow(frame: bytes) -> bytes:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await gate.wait()
        running -= 1
        return frame

    async def scenario() -> None:
        async with serving(
            BlockHub(), slow, max_inflight_per_stream=2, max_inflight=3, secret=SECRET
        ) as server:
            a = GrpcTxChannel(server.address, secret=SECRET)
            b = GrpcTxChannel(server.address, secret=SECRET)
            sent = [asyncio.ensure_future(ch.submit(b"%d" % i)) for i in range(6) for ch in (a, b)]
            while running < 3:  # bounded by run()'s timeout
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # room for a fourth to start, were the bound not kept
            assert running == 3  # the server-wide bound; each stream holds at most 2
            gate.set()
            got = await asyncio.gather(*sent)
            assert sorted(got) == sorted(b"%d" % i for i in range(6) for _ in (a, b))
            await a.close()
            await b.close()

    run(scenario())
    assert most == 3


def test_a_tx_frame_over_the_size_bound_breaks_only_its_own_stream() -> None:
    async def echo(frame: bytes) -> bytes:
        return frame

    async def scenario() -> None:
        async with serving(BlockHub(), echo, max_request_bytes=1024) as server:
            channel = GrpcTxChannel(server.address)
            with pytest.raises(TxStreamBroken, match="RESOURCE_EXHAUSTED"):
                await channel.submit(b"x" * 4096)
            assert await channel.submit(b"small") == b"small"
            await channel.close()

    run(scenario())
