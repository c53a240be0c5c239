"""The plain-TCP data plane keeps the gRPC plane's promises: the same scenarios on real asyncio
servers and clients on 127.0.0.1 (no Ray). Every await is bounded and every server stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest

from raydex.actors.transport import (
    Backoff,
    BlockHub,
    BlockSource,
    Frame,
    NotAMember,
    ResyncRequired,
    TcpBlockSource,
    TcpDataPlaneServer,
    TcpTxChannel,
    TransportUnavailable,
    TxChannel,
    TxHandler,
    TxStreamBroken,
    new_secret,
)
from raydex.actors.transport.tcp_plane import BATCH, BLOCKS, HELLO, REFUSED, TXS

T = TypeVar("T")
FAST = Backoff(initial_s=0.01, max_s=0.1, max_attempts=50)
SECRET = new_secret()


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
    hub: BlockHub, tx_handler: TxHandler | None = None, port: int = 0, **kw: Any
) -> AsyncIterator[TcpDataPlaneServer]:
    server = TcpDataPlaneServer(hub, tx_handler, port=port, **kw)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def test_the_tcp_plane_implements_the_same_small_interface() -> None:
    assert isinstance(TcpBlockSource("127.0.0.1:1"), BlockSource)
    assert isinstance(TcpTxChannel("127.0.0.1:1"), TxChannel)


def test_blocks_arrive_in_seq_order_with_their_frames_over_tcp() -> None:
    async def scenario() -> None:
        hub = BlockHub()
        async with serving(hub) as server:
            source = TcpBlockSource(server.address, backoff=FAST)
            stream = source.subscribe(1)
            publish_range(hub, 1, 50, size=4096)
            got = await take(stream, 50)
            assert [seq for seq, _ in got] == list(range(1, 51))
            assert all(frame == frame_of(seq, 4096) for seq, frame in got)
            await stream.aclose()  # type: ignore[attr-defined]
            await source.close()

    run(scenario())


def test_a_broken_tcp_stream_reconnects_and_replays_from_the_ring_with_no_gap() -> None:
    async def scenario() -> None:
        hub = BlockHub(ring_size=100)
        async with serving(hub) as first:
            port = int(first.address.rsplit(":", 1)[1])
            source = TcpBlockSource(first.address, backoff=FAST)
            stream = source.subscribe(1)
            publish_range(hub, 1, 5)
            got = await take(stream, 5)
        publish_range(hub, 6, 10)  # published while no server is listening
        async with serving(hub, port=port):
            publish_range(hub, 11, 12)
            got += await take(stream, 7)
        assert [seq for seq, _ in got] == list(range(1, 13))
        assert source.reconnects >= 1 and source.duplicates == 0
        await stream.aclose()  # type: ignore[attr-defined]
        await source.close()

    run(scenario())


def test_subscribing_over_tcp_from_a_seq_older_than_the_ring_raises_resync_required() -> None:
    async def scenario() -> None:
        hub = BlockHub(ring_size=4)
        publish_range(hub, 1, 10)
        async with serving(hub) as server:
            source = TcpBlockSource(server.address, backoff=FAST)
            with pytest.raises(ResyncRequired) as info:
                await anext(source.subscribe(3))
            assert (info.value.from_seq, info.value.floor) == (3, 6)
            assert [seq for seq, _ in await take(source.subscribe(7), 4)] == [7, 8, 9, 10]
            await source.close()

    run(scenario())


def test_a_slow_tcp_subscriber_is_cut_off_while_a_fast_one_keeps_receiving() -> None:
    count, size = 400, 64 * 1024  # 25 MB: more than the socket buffers hold

    async def scenario() -> None:
        hub = BlockHub(ring_size=count, queue_size=8)
        async with serving(hub) as server:
            fast_source = TcpBlockSource(server.address, name="fast", backoff=FAST)
            slow_source = TcpBlockSource(server.address, name="slow", backoff=FAST)
            fast, slow = fast_source.subscribe(1), slow_source.subscribe(1)
            hub.publish_nowait(1, frame_of(1, size))
            assert (await anext(slow))[0] == 1  # then it stops reading
            assert (await anext(fast))[0] == 1
            fast_seqs = [1]
            for seq in range(2, count + 1):
                hub.publish_nowait(seq, frame_of(seq, size))
                fast_seqs.append((await anext(fast))[0])
            assert hub.statistics().cut_off_total >= 1
            assert fast_seqs == list(range(1, count + 1)) and fast_source.reconnects == 0
            rest = [seq for seq, _ in await take(slow, count - 1)]
            assert rest == list(range(2, count + 1)) and slow_source.reconnects >= 1
            for stream in (fast, slow):
                await stream.aclose()  # type: ignore[attr-defined]
            await fast_source.close()
            await slow_source.close()

    run(scenario(), timeout=60)


def test_a_tcp_source_gives_up_after_max_attempts_when_nothing_listens() -> None:
    async def scenario() -> None:
        async with serving(BlockHub()) as server:
            address = server.address
        source = TcpBlockSource(address, backoff=Backoff(initial_s=0.01, max_attempts=3))
        with pytest.raises(TransportUnavailable):
            await anext(source.subscribe(1))
        assert source.reconnects == 2
        await source.close()

    run(scenario())


def test_tcp_tx_batches_round_trip_and_results_are_matched_by_batch_id() -> None:
    async def handler(frame: bytes) -> bytes:
        await asyncio.sleep(0.001 * (10 - int(frame)))  # later batches finish first
        return b"done:" + frame

    async def scenario() -> None:
        async with serving(BlockHub(), handler) as server:
            channel = TcpTxChannel(server.address)
            batches = [str(i).encode() for i in range(10)]
            results = await asyncio.gather(*(channel.submit(b) for b in batches))
            assert results == [b"done:" + b for b in batches]
            assert await channel.submit(b"9") == b"done:9"
            await channel.close()

    run(scenario())


def test_a_tcp_batch_in_flight_when_the_stream_breaks_fails_and_the_next_one_reopens() -> None:
    release = asyncio.Event()

    async def stuck_then_echo(frame: bytes) -> bytes:
        if frame == b"stuck":
            await release.wait()
        return frame

    async def scenario() -> None:
        hub = BlockHub()
        async with serving(hub, stuck_then_echo) as first:
            port = int(first.address.rsplit(":", 1)[1])
            channel = TcpTxChannel(first.address)
            stuck = asyncio.ensure_future(channel.submit(b"stuck"))
            await asyncio.sleep(0.05)
        with pytest.raises(TxStreamBroken):
            await stuck
        with pytest.raises(TxStreamBroken):
            await channel.submit(b"nobody listens")
        async with serving(hub, stuck_then_echo, port=port):
            assert await channel.submit(b"after") == b"after"
        await channel.close()

    run(scenario())


def test_a_malformed_message_closes_only_its_own_connection() -> None:
    async def echo(frame: bytes) -> bytes:
        return frame

    async def scenario() -> None:
        hub = BlockHub()
        async with serving(hub, echo) as server:
            channel = TcpTxChannel(server.address)
            assert await channel.submit(b"one") == b"one"
            host, port = server.address.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"\xff\xff\xff\xff\x01")  # a 4 GB message: refused
            assert await reader.read() == b""  # closed by the server
            writer.close()
            assert await channel.submit(b"two") == b"two"  # the others are untouched
            await channel.close()

    run(scenario())


def _msg(kind: int, body: bytes = b"") -> bytes:
    return (1 + len(body)).to_bytes(4, "little") + bytes([kind]) + body


async def stranger(address: str, hello: bytes | None, then: bytes) -> bytes:
    """A raw TCP client that knows the framing but maybe not the secret: all it is sent."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    if hello is not None:
        writer.write(_msg(HELLO, hello))
    writer.write(then)
    got = await reader.read()  # until the server closes
    writer.close()
    return got


def test_a_tcp_client_without_the_secret_reads_no_block_and_submits_no_batch() -> None:
    handled: list[bytes] = []

    async def handler(frame: bytes) -> bytes:
        handled.append(frame)
        return frame

    async def scenario() -> None:
        hub = BlockHub()
        publish_range(hub, 1, 5)
        async with serving(hub, handler, secret=SECRET) as server:
            blocks = _msg(BLOCKS, (1).to_bytes(8, "little") + b"stranger")
            batch = _msg(TXS) + _msg(BATCH, (1).to_bytes(8, "little") + b"a batch")
            refused = _msg(REFUSED)
            assert await stranger(server.address, b"", blocks) == refused
            assert await stranger(server.address, new_secret().encode(), blocks) == refused
            assert await stranger(server.address, SECRET[:-1].encode(), batch) == refused
            assert await stranger(server.address, None, blocks) == b""  # no HELLO: closed
            assert server.refused == 3
            # our own clients with a wrong secret: told they are not members / batch fails
            source = TcpBlockSource(server.address, secret=new_secret(), backoff=FAST)
            with pytest.raises(NotAMember):
                await anext(source.subscribe(1))
            await source.close()
            channel = TcpTxChannel(server.address, secret=new_secret())
            with pytest.raises(TxStreamBroken, match="not a member"):
                await channel.submit(b"batch")
            await channel.close()
            # members get both
            member = TcpBlockSource(server.address, secret=SECRET, backoff=FAST)
            stream = member.subscribe(1)
            assert [seq for seq, _ in await take(stream, 5)] == [1, 2, 3, 4, 5]
            await stream.aclose()  # type: ignore[attr-defined]
            await member.close()
            ok = TcpTxChannel(server.address, secret=SECRET)
            assert await ok.submit(b"mine") == b"mine"
            await ok.close()
            assert server.refused == 5

    run(scenario())
    assert handled == [b"mine"]


def test_a_tcp_server_off_loopback_refuses_to_start_without_a_secret() -> None:
    async def scenario() -> None:
        server = TcpDataPlaneServer(BlockHub(), host="0.0.0.0")
        with pytest.raises(ValueError, match="without a secret"):
            await server.start()
        async with serving(BlockHub(), host="0.0.0.0", secret=SECRET) as ok:
            assert ok.address.startswith("0.0.0.0:")

    run(scenario())


def test_tcp_batches_beyond_the_in_flight_bounds_wait_unread_and_all_are_answered() -> None:
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
            a = TcpTxChannel(server.address, secret=SECRET)
            b = TcpTxChannel(server.address, secret=SECRET)
            sent = [asyncio.ensure_future(ch.submit(b"%d" % i)) for i in range(6) for ch in (a, b)]
            while running < 3:  # bounded by run()'s timeout
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # room for a fourth to start, were the bound not kept
            assert running == 3  # the server-wide bound; each connection holds at most 2
            gate.set()
            got = await asyncio.gather(*sent)
            assert sorted(got) == sorted(b"%d" % i for i in range(6) for _ in (a, b))
            await a.close()
            await b.close()

    run(scenario())
    assert most == 3


def test_a_tcp_batch_over_the_size_bound_closes_only_its_own_connection() -> None:
    async def echo(frame: bytes) -> bytes:
        return frame

    async def scenario() -> None:
        async with serving(BlockHub(), echo, max_request_bytes=1024) as server:
            channel = TcpTxChannel(server.address)
            with pytest.raises(TxStreamBroken):
                await channel.submit(b"x" * 4096)
            assert await channel.submit(b"small") == b"small"
            await channel.close()

    run(scenario())


def test_a_sequencer_on_the_tcp_plane_serves_batches_and_a_holder_built_from_its_targets(
    tmp_path: Any,
) -> None:
    """One knob (``data_plane="tcp"``): the sequencer serves on TCP, and followers built from the
    ``tcp://`` targets alone (as the deployment hands them out) reach its state."""
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

    def order(account: int, nonce: int, is_ask: int) -> CreateOrder:
        tx = CreateOrder(account, 0, 0, nonce + 1, 100, 300_000, is_ask, 0, 1, 0, 0, -1,
                         4_000_000_000_000, nonce, bytes(64))  # fmt: skip
        return sign_tx(tx, seed)

    async def scenario() -> tuple[str, str, list[int]]:
        cfg = SequencerConfig(
            wal_dir=str(tmp_path / "wal"),
            snapshot_dir=str(tmp_path / "snap"),
            data_plane="tcp",
            data_plane_secret=SECRET,
        )
        svc = SequencerService(cfg)
        await svc.start()
        unix = svc.status()["data_plane"]["unix"]  # the same host: followers use its sockets
        blocks = target_of("tcp", "127.0.0.1", svc.port, unix["blocks"])
        txlog = target_of("tcp", "127.0.0.1", svc.txlog_port, unix["txlog"])
        assert blocks.startswith("tcp://") and svc.status()["data_plane"]["plane"] == "tcp"
        holder = SnapshotService(
            SnapshotConfig(dir=str(tmp_path / "snap"), data_plane_secret=SECRET)
        )
        await holder.start(blocks, txlog)
        channel = tx_channel(blocks, secret=SECRET)
        source = block_source(blocks, name="t", secret=SECRET, backoff=FAST)
        assert isinstance(channel, TcpTxChannel) and isinstance(source, TcpBlockSource)
        try:
            setup: list[object] = [eth_market()]
            for a in (1, 2):
                setup += [RegisterApiKey(a, 0, pub), Deposit(a, 10**12)]
            await svc.submit(setup, operator=True)
            codes = []
            for i in range(4):
                reply = await channel.submit(encode_batch([order(1, i, 1), order(2, i, 0)]))
                codes += [o.code for o in decode_outcomes(reply)]
            assert channel.local
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


# ---- the same host: Unix-domain sockets -------------------------------------------------------


def test_a_follower_on_the_same_host_streams_and_submits_through_the_unix_socket(
    tmp_path: Any,
) -> None:
    """The target carries the socket (``?unix=``); blocks and batches flow through it, with the
    secret checked there as on TCP; the socket is 0600 and gone after stop."""
    import os
    import stat

    from raydex.actors.transport import block_source, target_of, tx_channel

    async def handler(frame: bytes) -> bytes:
        return b"ok:" + frame

    async def scenario() -> None:
        hub = BlockHub()
        async with serving(hub, handler, secret=SECRET, unix_dir=str(tmp_path)) as server:
            path = server.unix_path
            assert path is not None and path.startswith(str(tmp_path))
            assert stat.S_ISSOCK(os.stat(path).st_mode)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            target = target_of("tcp", "127.0.0.1", int(server.address.rpartition(":")[2]), path)
            source = block_source(target, secret=SECRET, backoff=FAST)
            channel = tx_channel(target, secret=SECRET)
            assert isinstance(source, TcpBlockSource) and isinstance(channel, TcpTxChannel)
            stream = source.subscribe(1)
            publish_range(hub, 1, 5)
            assert [seq for seq, _ in await take(stream, 5)] == [1, 2, 3, 4, 5]
            assert source.local
            assert await channel.submit(b"batch") == b"ok:batch"
            assert channel.local
            # a wrong secret is refused on the socket too
            intruder = block_source(target, secret=new_secret(), backoff=FAST)
            with pytest.raises(NotAMember):
                await anext(intruder.subscribe(1))
            assert server.refused == 1
            await stream.aclose()  # type: ignore[attr-defined]
            await channel.close()
        assert not os.path.exists(path)

    run(scenario())


def test_without_the_socket_or_on_another_host_the_follower_uses_tcp(tmp_path: Any) -> None:
    """A path that does not exist (the sequencer moved) falls back to TCP; a host that is not
    this machine's never tries the local path."""
    from raydex.actors.transport import target_of, tx_channel
    from raydex.actors.transport.tcp_plane import is_local_host

    async def handler(frame: bytes) -> bytes:
        return frame

    assert is_local_host("127.0.0.1")
    assert not is_local_host("203.0.113.7")  # TEST-NET-3: never an address of this machine

    async def scenario() -> None:
        async with serving(BlockHub(), handler) as server:
            port = int(server.address.rpartition(":")[2])
            assert server.unix_path is None  # no unix_dir: TCP only
            channel = tx_channel(target_of("tcp", "127.0.0.1", port, str(tmp_path / "gone.sock")))
            assert isinstance(channel, TcpTxChannel)
            assert await channel.submit(b"x") == b"x"
            assert not channel.local
            await channel.close()

    run(scenario())


def test_a_socket_file_left_by_a_dead_server_is_replaced(tmp_path: Any) -> None:
    import socket as socketlib

    from raydex.actors.transport.tcp_plane import unix_path_for

    async def scenario() -> None:
        hub = BlockHub()
        probe = TcpDataPlaneServer(hub)
        port = await probe.start()
        await probe.stop()
        stale = unix_path_for(port, str(tmp_path))
        dead = socketlib.socket(socketlib.AF_UNIX)
        dead.bind(stale)  # bound, never listening, then abandoned: what a kill -9 leaves
        dead.close()
        async with serving(hub, port=port, unix_dir=str(tmp_path)) as server:
            assert server.unix_path == stale
            source = TcpBlockSource(server.address, backoff=FAST, unix_path=stale)
            stream = source.subscribe(1)
            publish_range(hub, 1, 2)
            assert len(await take(stream, 2)) == 2 and source.local
            await stream.aclose()  # type: ignore[attr-defined]

    run(scenario())
