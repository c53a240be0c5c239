"""The transport-agnostic core: the publisher's block hub on its own, and the rulebook every
network plane calls (``actors/transport/core.py``); the planes themselves are tested by one suite
in ``test_transport_planes.py``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit.transport import frame_of, publish_range, run, take

from raydex.actors.transport import (
    BlockHub,
    BlockSink,
    EndReason,
    ResyncRequired,
    TxStreamBroken,
)
from raydex.actors.transport.core import PendingBatches, accept_seq, admits, check_listen

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


def test_the_hub_is_a_block_sink() -> None:
    assert isinstance(BlockHub(), BlockSink)


# -- the rulebook ----------------------------------------------------------------------------


def test_a_subscriber_takes_the_next_seq_drops_an_older_one_and_resyncs_on_a_gap() -> None:
    assert accept_seq(7, 7)
    assert not accept_seq(6, 7)
    with pytest.raises(ResyncRequired) as info:
        accept_seq(9, 7)
    assert (info.value.from_seq, info.value.floor) == (7, 8)


def test_without_a_secret_a_server_may_listen_on_loopback_only() -> None:
    for host in ("127.0.0.1", "::1", "localhost"):
        check_listen(host, b"")
    check_listen("0.0.0.0", b"s3cret")
    with pytest.raises(ValueError, match="without a secret"):
        check_listen("0.0.0.0", b"")


def test_a_member_presents_exactly_the_secret() -> None:
    assert admits(b"", b"") and admits(b"", b"anything")  # no secret: anyone (loopback only)
    assert admits(b"s3cret", b"s3cret")
    assert not admits(b"s3cret", b"s3cre") and not admits(b"s3cret", b"")


def test_a_broken_stream_fails_every_batch_still_out_and_only_those() -> None:
    async def scenario() -> None:
        pending = PendingBatches()
        answered, lost = pending.add(1), pending.add(2)
        unsent = pending.add(3)
        assert "before batch 3 was sent" in str(pending.unsent(3))
        pending.resolve(1, b"result")
        pending.resolve(99, b"no such batch")  # ignored
        pending.fail("connection reset")
        assert await answered == b"result"
        with pytest.raises(TxStreamBroken, match=r"batch 2: tx stream broke \(connection reset\)"):
            await lost
        assert not unsent.done()  # forgotten: its submit raised already, nothing awaits it
        pending.fail("again")  # nothing left to fail

    run(scenario())
