"""The data-plane transport: the block hub on its own, then real gRPC servers and clients on
127.0.0.1 (no Ray). Every await is bounded by a timeout and every server is stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydex.actors.transport import (
    Backoff,
    BlockHub,
    BlockSink,
    BlockSource,
    EndReason,
    Frame,
    GrpcBlockSource,
    GrpcDataPlaneServer,
    GrpcTxChannel,
    ResyncRequired,
    TransportUnavailable,
    TxChannel,
    TxHandler,
    TxStreamBroken,
)

T = TypeVar("T")
FAST = Backoff(initial_s=0.01, max_s=0.1, max_attempts=50)


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def frame_of(seq: int, size: int = 16) -> bytes:
    return seq.to_bytes(8, "little") * (size // 8)


def publish_range(hub: BlockHub, first: int, last: int, size: int = 16) -> None:
    for seq in range(first, last + 1):
        hub.publish_nowait(seq, frame_of(seq, size))


async def take(stream: AsyncIterator[Frame], n: int) -> list[Frame]:
    return [await anext(stream) for _ in range(n)]


@asynccontextmanager
async def serving(
    hub: BlockHub, tx_handler: TxHandler | None = None, port: int = 0
) -> AsyncIterator[GrpcDataPlaneServer]:
    server = GrpcDataPlaneServer(hub, tx_handler, port=port)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(grace=0)


# -- the hub alone ---------------------------------------------------------------------------


def test_the_hub_rejects_a_block_seq_that_does_not_follow_the_last_one() -> None:
    hub = BlockHub(last_seq=10)
    hub.publish_nowait(11, b"a")
    with pytest.raises(ValueError, match="does not follow"):
        hub.publish_nowait(13, b"c")
    with pytest.raises(ValueError, match="does not follow"):
        hub.publish_nowait(11, b"a")


def test_blocks_published_before_the_hub_existed_require_a_resync() -> None:
    hub = BlockHub(last_seq=100)
    with pytest.raises(ResyncRequired) as info:
        hub.subscribe(100)
    assert info.value.floor == 100
    assert hub.subscribe(101).backlog == 0


@settings(max_examples=60, deadline=None)
@given(
    ring_size=st.integers(1, 8),
    published=st.integers(0, 20),
    from_seq=st.integers(1, 24),
)
def test_a_subscription_replays_exactly_the_held_frames_or_demands_a_resync(
    ring_size: int, published: int, from_seq: int
) -> None:
    async def scenario() -> None:
        hub = BlockHub(ring_size=ring_size, queue_size=4)
        publish_range(hub, 1, published)
        oldest_held = max(1, published - ring_size + 1)
        if from_seq < oldest_held:
            with pytest.raises(ResyncRequired):
                hub.subscribe(from_seq)
            return
        sub = hub.subscribe(from_seq)
        publish_range(hub, published + 1, published + 3)
        expected = list(range(from_seq, published + 4))
        got = await take(sub, len(expected))
        assert [seq for seq, _ in got] == expected
        assert all(frame == frame_of(seq) for seq, frame in got)
        assert sub.backlog == 0

    run(scenario())


def test_the_hub_cuts_off_a_subscriber_whose_queue_is_full_and_keeps_the_others() -> None:
    async def scenario() -> None:
        hub = BlockHub(ring_size=64, queue_size=3)
        slow, fast = hub.subscribe(1, "slow"), hub.subscribe(1, "fast")
        for seq in range(1, 6):
            hub.publish_nowait(seq, frame_of(seq))
            assert (await anext(fast))[0] == seq
        assert slow.end_reason is EndReason.SLOW
        assert [s async for s in slow] == []
        stats = hub.statistics()
        assert (stats.cut_off_total, stats.subscribers, stats.last_seq) == (1, 1, 5)

    run(scenario())


def test_both_implementations_satisfy_the_small_interface() -> None:
    hub = BlockHub()
    assert isinstance(hub, BlockSink)
    assert isinstance(GrpcBlockSource("127.0.0.1:1"), BlockSource)
    assert isinstance(GrpcTxChannel("127.0.0.1:1"), TxChannel)


# -- gRPC on 127.0.0.1 -------------------------------------------------------------------------


def test_blocks_arrive_in_seq_order_with_their_frames() -> None:
    async def scenario() -> None:
        hub = BlockHub()
        async with serving(hub) as server:
            source = GrpcBlockSource(server.address, backoff=FAST)
            stream = source.subscribe(1)
            publish_range(hub, 1, 50, size=4096)
            got = await take(stream, 50)
            assert [seq for seq, _ in got] == list(range(1, 51))
            assert all(frame == frame_of(seq, 4096) for seq, frame in got)
            await stream.aclose()
            await source.close()

    run(scenario())


def test_a_broken_stream_reconnects_and_replays_from_the_ring_with_no_gap_or_duplicate() -> None:
    async def scenario() -> None:
        hub = BlockHub(ring_size=100)
        source = GrpcBlockSource("", backoff=FAST)
        async with serving(hub) as first:
            port = first.address.rsplit(":", 1)[1]
            source = GrpcBlockSource(first.address, backoff=FAST)
            stream = source.subscribe(1)
            publish_range(hub, 1, 5)
            got = await take(stream, 5)
        publish_range(hub, 6, 10)  # published while no server is listening
        async with serving(hub, port=int(port)):
            publish_range(hub, 11, 12)
            got += await take(stream, 7)
        assert [seq for seq, _ in got] == list(range(1, 13))
        assert source.reconnects >= 1
        assert source.duplicates == 0
        await stream.aclose()
        await source.close()

    run(scenario())


def test_subscribing_from_a_seq_older_than_the_ring_raises_resync_required() -> None:
    async def scenario() -> None:
        hub = BlockHub(ring_size=4)
        publish_range(hub, 1, 10)
        async with serving(hub) as server:
            source = GrpcBlockSource(server.address, backoff=FAST)
            with pytest.raises(ResyncRequired) as info:
                await anext(source.subscribe(3))
            assert (info.value.from_seq, info.value.floor) == (3, 6)
            assert [seq for seq, _ in await take(source.subscribe(7), 4)] == [7, 8, 9, 10]
            await source.close()

    run(scenario())


def test_a_slow_subscriber_is_cut_off_while_a_fast_one_keeps_receiving() -> None:
    count, size = 400, 64 * 1024  # 25 MB: more than socket and HTTP/2 buffers hold

    async def scenario() -> None:
        hub = BlockHub(ring_size=count, queue_size=8)
        async with serving(hub) as server:
            fast_source = GrpcBlockSource(server.address, name="fast", backoff=FAST)
            slow_source = GrpcBlockSource(server.address, name="slow", backoff=FAST)
            fast, slow = fast_source.subscribe(1), slow_source.subscribe(1)
            hub.publish_nowait(1, frame_of(1, size))
            assert (await anext(slow))[0] == 1  # then it stops reading
            assert (await anext(fast))[0] == 1
            fast_seqs = [1]
            for seq in range(2, count + 1):
                hub.publish_nowait(seq, frame_of(seq, size))
                fast_seqs.append((await anext(fast))[0])
            assert hub.statistics().cut_off_total >= 1
            assert fast_seqs == list(range(1, count + 1))
            assert fast_source.reconnects == 0
            # The slow one resumes, reconnects and catches up from the ring with no gap.
            rest = [seq for seq, _ in await take(slow, count - 1)]
            assert rest == list(range(2, count + 1))
            assert slow_source.reconnects >= 1
            for stream in (fast, slow):
                await stream.aclose()
            await fast_source.close()
            await slow_source.close()

    run(scenario(), timeout=60)


def test_a_source_gives_up_after_max_attempts_when_nothing_listens() -> None:
    async def scenario() -> None:
        hub = BlockHub()
        async with serving(hub) as server:
            address = server.address
        source = GrpcBlockSource(address, backoff=Backoff(initial_s=0.01, max_attempts=3))
        with pytest.raises(TransportUnavailable):
            await anext(source.subscribe(1))
        assert source.reconnects == 2  # three attempts in all
        await source.close()

    run(scenario())


def test_tx_batches_round_trip_and_results_are_matched_by_batch_id() -> None:
    async def handler(frame: bytes) -> bytes:
        await asyncio.sleep(0.001 * (10 - int(frame)))  # later batches finish first
        return b"done:" + frame

    async def scenario() -> None:
        async with serving(BlockHub(), handler) as server:
            channel = GrpcTxChannel(server.address)
            batches = [str(i).encode() for i in range(10)]
            results = await asyncio.gather(*(channel.submit(b) for b in batches))
            assert results == [b"done:" + b for b in batches]
            assert await channel.submit(b"9") == b"done:9"
            await channel.close()

    run(scenario())


def test_a_batch_in_flight_when_the_stream_breaks_fails_and_the_next_one_reopens() -> None:
    release = asyncio.Event()

    async def stuck_then_echo(frame: bytes) -> bytes:
        if frame == b"stuck":
            await release.wait()
        return frame

    async def scenario() -> None:
        hub = BlockHub()
        channel = GrpcTxChannel("")
        async with serving(hub, stuck_then_echo) as first:
            port = int(first.address.rsplit(":", 1)[1])
            channel = GrpcTxChannel(first.address)
            stuck = asyncio.ensure_future(channel.submit(b"stuck"))
            await asyncio.sleep(0.05)
        with pytest.raises(TxStreamBroken):
            await stuck
        async with serving(hub, stuck_then_echo, port=port):
            assert await wait_ok(channel.submit, b"after") == b"after"
        await channel.close()

    run(scenario())


async def wait_ok(call: Any, frame: bytes, attempts: int = 50) -> bytes:
    """Submit until the channel has reconnected (a retry policy is the caller's, not ours)."""
    for _ in range(attempts):
        try:
            result: Awaitable[bytes] = call(frame)
            return await result
        except TxStreamBroken:
            await asyncio.sleep(0.02)
    raise AssertionError("tx channel never reconnected")
