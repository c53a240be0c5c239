"""The arbiter's rules: one primary per epoch, a lease that only its holder renews, a takeover only
by the named standby while it is in sync and the lease lapsed (or the primary's node is dead)."""

from __future__ import annotations

from raydex.actors.sequencer.arbiter import Arbiter


def test_the_first_start_gets_epoch_1_and_another_sequencer_is_refused() -> None:
    a = Arbiter(ttl_s=3.0)
    assert a.acquire("seq", now=0.0).granted and a.state.epoch == 1
    refused = a.acquire("other", now=1.0)
    assert not refused.granted and "'seq' is the primary of epoch 1" in refused.reason
    assert a.acquire("seq", now=2.0).granted  # its own restart
    assert (a.state.epoch, a.state.primary) == (1, "seq")


def test_a_takeover_needs_the_standby_in_sync_and_the_lease_lapsed() -> None:
    a = Arbiter(ttl_s=3.0)
    a.acquire("seq", now=0.0)
    assert not a.take_over("standby", 1, now=10.0).granted  # no standby named yet
    assert a.standby_sync("seq", 1, "standby", in_sync=True).granted
    early = a.take_over("standby", 1, now=1.0)
    assert not early.granted and "lease" in early.reason
    assert not a.take_over("someone", 1, now=10.0).granted
    assert a.renew("seq", 1, now=2.0).granted
    assert not a.take_over("standby", 1, now=4.0).granted  # renewed: runs until 5.0
    assert a.take_over("standby", 1, now=4.0, primary_dead=True).granted  # Ray: node dead
    assert (a.state.epoch, a.state.primary, a.state.in_sync) == (2, "standby", False)
    # the old primary is fenced everywhere
    assert not a.renew("seq", 1, now=4.1).granted
    assert not a.standby_sync("seq", 1, "standby", in_sync=False).granted
    assert not a.acquire("seq", now=4.2).granted
    assert a.take_over("standby", 1, now=4.3).granted  # a retried call: already the primary
    assert a.state.epoch == 2 and a.takeovers == 1


def test_a_standby_out_of_sync_never_takes_over() -> None:
    a = Arbiter(ttl_s=3.0)
    a.acquire("seq", now=0.0)
    a.standby_sync("seq", 1, "standby", in_sync=True)
    a.standby_sync("seq", 1, "standby", in_sync=False)  # the primary degraded
    verdict = a.take_over("standby", 1, now=100.0, primary_dead=True)
    assert not verdict.granted and "out of sync" in verdict.reason
    assert a.state.epoch == 1
    assert a.acquire("seq", now=101.0).granted and not a.state.in_sync  # a restart resets it
