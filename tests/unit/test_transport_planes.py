"""Every network data plane keeps the same promises: one suite, run on gRPC, plain TCP and TCP's
Unix-domain socket, each with a real server and real clients on this host (no Ray, no mocks).

Followers are built from the target a deployment hands out (``kit.transport.Plane``). Every
await is bounded by ``run``'s timeout and every server is stopped.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kit.transport import (
    FAST,
    PLANES,
    Plane,
    frame_of,
    port_of,
    publish_range,
    published,
    run,
    take,
)

from raydex.actors.transport import (
    Backoff,
    BlockHub,
    BlockSource,
    NotAMember,
    ResyncRequired,
    TransportUnavailable,
    TxChannel,
    TxStreamBroken,
    new_secret,
)
from raydex.actors.transport.core import NOT_A_MEMBER

SECRET = new_secret()


@pytest.fixture(params=PLANES)
def plane(request: pytest.FixtureRequest, tmp_path: Path) -> Plane:
    return Plane(request.param, str(tmp_path))


async def echo(frame: bytes) -> bytes:
    return b"ok:" + frame


# -- blocks down ------------------------------------------------------------------------------


def test_the_source_and_channel_implement_the_small_interface(plane: Plane) -> None:
    async def scenario() -> None:
        async with plane.serving(BlockHub(), echo) as server:
            source, channel = plane.source(server), plane.channel(server)
            assert isinstance(source, BlockSource) and isinstance(channel, TxChannel)
            assert channel.ordered  # one stream: batches run in the order they were sent
            await source.close()
            await channel.close()

    run(scenario())


def test_blocks_arrive_in_seq_order_with_their_frames(plane: Plane) -> None:
    async def scenario() -> None:
        hub = BlockHub()
        async with plane.serving(hub) as server:
            source = plane.source(server)
            stream = source.subscribe(1)
            publish_range(hub, 1, 50, size=4096)
            got = await take(stream, 50)
            assert [seq for seq, _ in got] == list(range(1, 51))
            assert all(frame == frame_of(seq, 4096) for seq, frame in got)
            assert source.local is plane.local
            await stream.aclose()  # type: ignore[attr-defined]
            await source.close()

    run(scenario())


def test_a_broken_stream_reconnects_and_replays_from_the_ring_with_no_gap_or_duplicate(
    plane: Plane,
) -> None:
    async def scenario() -> None:
        hub = BlockHub(ring_size=100)
        async with plane.serving(hub) as first:
            port = port_of(first)
            source = plane.source(first)
            stream = source.subscribe(1)
            publish_range(hub, 1, 5)
            got = await take(stream, 5)
        publish_range(hub, 6, 10)  # published while no server is listening
        async with plane.serving(hub, port=port):
            publish_range(hub, 11, 12)
            got += await take(stream, 7)
        assert [seq for seq, _ in got] == list(range(1, 13))
        assert source.reconnects >= 1
        assert source.duplicates == 0
        await stream.aclose()  # type: ignore[attr-defined]
        await source.close()

    run(scenario())


def test_subscribing_from_a_seq_older_than_the_ring_raises_resync_required(plane: Plane) -> None:
    async def scenario() -> None:
        hub = BlockHub(ring_size=4)
        publish_range(hub, 1, 10)
        async with plane.serving(hub) as server:
            source = plane.source(server)
            with pytest.raises(ResyncRequired) as info:
                await anext(source.subscribe(3))
            assert (info.value.from_seq, info.value.floor) == (3, 6)
            assert [seq for seq, _ in await take(source.subscribe(7), 4)] == [7, 8, 9, 10]
            await source.close()

    run(scenario())


def test_a_slow_subscriber_is_cut_off_while_a_fast_one_keeps_receiving(plane: Plane) -> None:
    count, size = 400, 64 * 1024  # 25 MB: more than the socket (and HTTP/2) buffers hold

    async def scenario() -> None:
        hub = BlockHub(ring_size=count, queue_size=8)
        async with plane.serving(hub) as server:
            fast_source = plane.source(server, name="fast")
            slow_source = plane.source(server, name="slow")
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
                await stream.aclose()  # type: ignore[attr-defined]
            await fast_source.close()
            await slow_source.close()

    run(scenario(), timeout=60)


def test_a_source_gives_up_after_max_attempts_when_nothing_listens(plane: Plane) -> None:
    async def scenario() -> None:
        async with plane.serving(BlockHub()) as server:
            pass
        source = plane.source(server, backoff=Backoff(initial_s=0.01, max_attempts=3))
        with pytest.raises(TransportUnavailable):
            await anext(source.subscribe(1))
        assert source.reconnects == 2  # three attempts in all
        await source.close()

    run(scenario())


# -- tx batches up ----------------------------------------------------------------------------


def test_tx_batches_round_trip_and_results_are_matched_by_batch_id(plane: Plane) -> None:
    async def handler(frame: bytes) -> bytes:
        await asyncio.sleep(0.001 * (10 - int(frame)))  # later batches finish first
        return b"done:" + frame

    async def scenario() -> None:
        async with plane.serving(BlockHub(), handler) as server:
            channel = plane.channel(server)
            batches = [str(i).encode() for i in range(10)]
            results = await asyncio.gather(*(channel.submit(b) for b in batches))
            assert results == [b"done:" + b for b in batches]
            assert await channel.submit(b"9") == b"done:9"
            assert channel.local is plane.local
            await channel.close()

    run(scenario())


def test_a_batch_in_flight_when_the_stream_breaks_fails_and_a_later_one_reopens(
    plane: Plane,
) -> None:
    release = asyncio.Event()

    async def stuck_then_echo(frame: bytes) -> bytes:
        if frame == b"stuck":
            await release.wait()
        return frame

    async def scenario() -> None:
        hub = BlockHub()
        async with plane.serving(hub, stuck_then_echo) as first:
            port = port_of(first)
            channel = plane.channel(first)
            stuck = asyncio.ensure_future(channel.submit(b"stuck"))
            await asyncio.sleep(0.05)
        with pytest.raises(TxStreamBroken):
            await stuck
        with pytest.raises(TxStreamBroken):
            await channel.submit(b"nobody listens")
        async with plane.serving(hub, stuck_then_echo, port=port):
            if plane.name == "grpc":  # its channel waits out its own reconnect backoff first
                assert await submit_once_reconnected(channel, b"after") == b"after"
            else:  # TCP dials again at the next submit
                assert await channel.submit(b"after") == b"after"
        await channel.close()

    run(scenario())


async def submit_once_reconnected(channel: TxChannel, frame: bytes, attempts: int = 50) -> bytes:
    """Submit until the channel has reconnected (retrying is the caller's policy)."""
    for _ in range(attempts):
        try:
            return await channel.submit(frame)
        except TxStreamBroken:
            await asyncio.sleep(0.02)
    raise AssertionError("tx channel never reconnected")


def test_batches_beyond_the_in_flight_bounds_wait_unread_and_all_are_answered(
    plane: Plane,
) -> None:
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
        async with plane.serving(
            BlockHub(), slow, max_inflight_per_stream=2, max_inflight=3, secret=SECRET
        ) as server:
            a = plane.channel(server, secret=SECRET)
            b = plane.channel(server, secret=SECRET)
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


def test_a_batch_over_the_size_bound_breaks_only_its_own_stream(plane: Plane) -> None:
    async def scenario() -> None:
        async with plane.serving(BlockHub(), echo, max_request_bytes=1024) as server:
            channel = plane.channel(server)
            with pytest.raises(TxStreamBroken) as info:
                await channel.submit(b"x" * 4096)
            if plane.name == "grpc":  # gRPC names the cause; TCP just closes the connection
                assert "RESOURCE_EXHAUSTED" in str(info.value)
            assert await channel.submit(b"small") == b"ok:small"
            await channel.close()

    run(scenario())


def test_a_malformed_message_closes_only_its_own_stream(plane: Plane) -> None:
    async def scenario() -> None:
        async with plane.serving(BlockHub(), echo) as server:
            channel = plane.channel(server)
            assert await channel.submit(b"one") == b"ok:one"
            await plane.raw_malformed(server)
            assert await channel.submit(b"two") == b"ok:two"  # the others are untouched
            await channel.close()

    run(scenario())


# -- membership -------------------------------------------------------------------------------


def test_a_client_without_the_secret_reads_no_block_and_submits_no_batch(plane: Plane) -> None:
    handled: list[bytes] = []

    async def handler(frame: bytes) -> bytes:
        handled.append(frame)
        return frame

    async def scenario() -> None:
        async with plane.serving(published(5), handler, secret=SECRET) as server:
            assert await plane.raw_blocks(server, None) is None
            assert await plane.raw_blocks(server, new_secret()) is None
            assert await plane.raw_batch(server, None, b"a batch") is None
            assert await plane.raw_batch(server, SECRET[:-1], b"a batch") is None  # a prefix
            assert server.refused == 4
            # our own clients with a wrong secret are told they are not members
            source = plane.source(server, secret=new_secret())
            with pytest.raises(NotAMember):
                await anext(source.subscribe(1))
            await source.close()
            channel = plane.channel(server, secret=new_secret())
            with pytest.raises(TxStreamBroken, match=NOT_A_MEMBER):
                await channel.submit(b"batch")
            await channel.close()
            assert server.refused == 6

    run(scenario())
    assert handled == []


def test_a_member_with_the_secret_reads_blocks_and_submits_batches(plane: Plane) -> None:
    async def scenario() -> None:
        async with plane.serving(published(5), echo, secret=SECRET) as server:
            source = plane.source(server, secret=SECRET)
            stream = source.subscribe(1)
            assert [seq for seq, _ in await take(stream, 5)] == [1, 2, 3, 4, 5]
            await stream.aclose()  # type: ignore[attr-defined]
            await source.close()
            channel = plane.channel(server, secret=SECRET)
            assert await channel.submit(b"batch") == b"ok:batch"
            await channel.close()
            # the same through the raw wire format, carrying the secret
            assert await plane.raw_blocks(server, SECRET) == 1
            assert await plane.raw_batch(server, SECRET, b"raw") == b"ok:raw"
            assert server.refused == 0

    run(scenario())


def test_a_server_off_loopback_refuses_to_start_without_a_secret(plane: Plane) -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError, match="without a secret"):
            await plane.server(BlockHub(), host="0.0.0.0").start()
        async with plane.serving(BlockHub(), host="0.0.0.0", secret=SECRET) as ok:
            assert ok.address.startswith("0.0.0.0:")

    run(scenario())


# -- the knob: a sequencer on the plane, followers from its targets --------------------------


def test_a_sequencer_on_the_plane_serves_batches_and_a_holder_built_from_its_targets(
    plane: Plane, tmp_path: Path
) -> None:
    """One knob (``data_plane``): the sequencer serves on the plane, and followers built from
    the targets alone (as the deployment hands them out) reach its state."""
    from raydex.actors.local import eth_market
    from raydex.actors.sequencer import SequencerConfig, SequencerService
    from raydex.actors.snapshot import SnapshotConfig, SnapshotService
    from raydex.actors.transport import block_source, target_of, tx_channel
    from raydex.codecs import (
        CreateOrder,
        Deposit,
        RegisterApiKey,
        decode_block,
        decode_outcomes,
        encode_batch,
        generate_key,
        sign_tx,
    )

    seed, pub = generate_key()
    kind = "grpc" if plane.name == "grpc" else "tcp"

    def order(account: int, nonce: int, is_ask: int) -> CreateOrder:
        tx = CreateOrder(account, 0, 0, nonce + 1, 100, 300_000, is_ask, 0, 1, 0, 0, -1,
                         4_000_000_000_000, nonce, bytes(64))  # fmt: skip
        return sign_tx(tx, seed)

    async def scenario() -> tuple[str, str, list[int]]:
        cfg = SequencerConfig(
            wal_dir=str(tmp_path / "wal"),
            snapshot_dir=str(tmp_path / "snap"),
            data_plane=kind,
            unix_sockets=plane.local,
            unix_socket_dir=str(tmp_path),
            data_plane_secret=SECRET,
        )
        svc = SequencerService(cfg)
        await svc.start()
        status: dict[str, Any] = svc.status()["data_plane"]
        assert status["plane"] == kind
        unix = status["unix"]  # the same host: followers use its sockets
        blocks = target_of(kind, "127.0.0.1", svc.port, unix["blocks"])
        txlog = target_of(kind, "127.0.0.1", svc.txlog_port, unix["txlog"])
        holder = SnapshotService(
            SnapshotConfig(dir=str(tmp_path / "snap"), data_plane_secret=SECRET)
        )
        await holder.start(blocks, txlog)
        channel = tx_channel(blocks, secret=SECRET)
        source = block_source(blocks, name="t", secret=SECRET, backoff=FAST)
        try:
            setup: list[object] = [eth_market()]
            for a in (1, 2):
                setup += [RegisterApiKey(a, 0, pub), Deposit(a, 10**12)]
            await svc.submit(setup, operator=True)
            codes = []
            for i in range(4):
                reply = await channel.submit(encode_batch([order(1, i, 1), order(2, i, 0)]))
                codes += [o.code for o in decode_outcomes(reply)]
            assert channel.local is plane.local
            stream = source.subscribe(1)
            seqs = [decode_block(f).seq for _, f in await take(stream, 5)]
            await stream.aclose()  # type: ignore[attr-defined]
            final = svc.state_hash()
            for _ in range(500):
                if holder.seq == final["seq"]:
                    break
                await asyncio.sleep(0.02)
            assert seqs == [1, 2, 3, 4, 5]
            return str(final["state_hash"]), str(holder.state_hash()["state_hash"]), codes
        finally:
            await channel.close()
            await source.close()
            await holder.stop()
            await svc.stop()

    want, got, codes = run(scenario())
    assert got == want and codes == [200] * 8
