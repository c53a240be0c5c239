"""The flight recorder: a ring bounded by count and by time, dumps that are valid Chrome-trace JSON,
and a slow-event trigger that is rate-limited and capped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raydex.observability.flight import FlightRecorder, SlowTrigger, chrome_trace

S = 1_000_000_000


def test_the_ring_never_holds_more_than_its_capacity() -> None:
    fr = FlightRecorder(window_s=100, max_spans=10)
    for i in range(25):
        fr.record("apply", i * 1000, 500)
    assert len(fr) == 10
    assert [s.start_ns for s in fr.spans()] == [i * 1000 for i in range(15, 25)]


def test_spans_older_than_the_window_are_dropped() -> None:
    fr = FlightRecorder(window_s=2.0)
    fr.record("old", 0, 1000)
    fr.record("mid", int(1.5 * S), 1000)
    fr.record("new", 3 * S, 1000)
    assert [s.name for s in fr.spans()] == ["mid", "new"]
    assert len(fr) == 2


def test_a_bad_window_is_refused() -> None:
    with pytest.raises(ValueError):
        FlightRecorder(window_s=0)


def test_a_dump_is_valid_chrome_trace_json(tmp_path: Path) -> None:
    fr = FlightRecorder(window_s=5)
    fr.record("apply", 10 * S, 250_000, "apply", {"seq": 7})
    fr.record("decode", 10 * S, 50_000, "apply")
    fr.record("dry_run", 10 * S + 10_000, 30_000, "requests", {"code": 200})
    path = fr.dump(tmp_path / "sub" / "flight.json", "raydex-replica-a-0", "apply took 250 µs")
    doc = json.loads(path.read_text())
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"]["reason"] == "apply took 250 µs"
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    assert len(complete) == 3
    for e in complete:
        assert {"name", "ts", "dur", "pid", "tid"} <= set(e)
        assert isinstance(e["ts"], float) and e["dur"] > 0
    apply = next(e for e in complete if e["name"] == "apply")
    assert apply["ts"] == 10 * S / 1000 and apply["dur"] == 250.0 and apply["args"] == {"seq": 7}
    names = {e["args"]["name"] for e in meta}
    assert names == {"raydex-replica-a-0", "apply", "requests"}
    tid_of = {e["args"]["name"]: e["tid"] for e in meta if e["name"] == "thread_name"}
    assert {e["tid"] for e in complete if e["name"] == "dry_run"} == {tid_of["requests"]}


def test_the_trigger_fires_only_over_the_threshold_and_respects_the_interval() -> None:
    trig = SlowTrigger({"apply": 1000}, min_interval_s=1.0, max_dumps=10)
    assert not trig.observe("apply", 1000, now_ns=0)
    assert not trig.observe("unknown", 10**9, now_ns=0)
    assert trig.observe("apply", 1001, now_ns=0)
    assert not trig.observe("apply", 5000, now_ns=S // 2)  # too soon after the last dump
    assert trig.observe("apply", 5000, now_ns=2 * S)
    assert (trig.fired, trig.seen_slow) == (2, 3)


def test_the_trigger_stops_after_max_dumps() -> None:
    trig = SlowTrigger({"dry_run": 0}, min_interval_s=0.0, max_dumps=2)
    fired = [trig.observe("dry_run", 5, now_ns=i * S) for i in range(5)]
    assert fired == [True, True, False, False, False]


def test_a_capture_holds_the_spans_of_its_moment_and_is_written_later_whole(
    tmp_path: Path,
) -> None:
    fr = FlightRecorder(window_s=5)
    for i in range(300):
        fr.record("apply", 10 * S + i * 1_000, 500, "apply", {"seq": i})
    shot = fr.capture("raydex-replica-a-0", "apply took 3000 µs")
    fr.record("later", 11 * S, 500)  # after the capture: not in it
    path = tmp_path / "d" / "flight.json"
    assert not path.exists()  # nothing is written until asked
    assert shot.write(path) == path
    doc = json.loads(path.read_text())
    assert [e["args"]["seq"] for e in doc["traceEvents"] if e["ph"] == "X"] == list(range(300))
    assert doc["otherData"]["reason"] == "apply took 3000 µs"
    assert not list(path.parent.glob("*.part"))


def test_the_loadtest_probe_writes_its_dumps_after_the_window_not_on_the_slow_event(
    tmp_path: Path,
) -> None:
    from raydex.observability.loadtest.instrument import Instrumentation, _Probe

    probe = _Probe("raydex-replica-a-0", Instrumentation(str(tmp_path), trace=False))
    probe.on_dry_run(object(), 0, 50_000)  # under the 1 ms threshold: no dump
    probe.on_dry_run(object(), 0, 5_000_000)  # 5 ms: a dump is due
    assert len(probe.dumps) == 1
    path = Path(probe.dumps[0])
    assert not path.exists()  # captured, not written in the window
    probe.write_dumps()
    doc = json.loads(path.read_text())
    durs = [e["dur"] for e in doc["traceEvents"] if e["name"] == "dry_run"]
    assert durs == [50.0, 5000.0]
    assert probe.captured == []


def test_recorded_spans_are_out_of_the_collectors_lists_unless_an_arg_is_a_container() -> None:
    import gc

    from raydex.observability.gcstats import UNTRACKING

    fr = FlightRecorder(window_s=5)
    fr.record("dry_run", 10 * S, 500, "requests", {"code": 200, "type": "CreateOrder"})
    fr.record("apply", 10 * S, 500, "apply", {"seqs": [1, 2]})  # a list: could be in a cycle
    atoms, holder = fr.spans()
    assert atoms.args == (("code", 200), ("type", "CreateOrder"))
    assert gc.is_tracked(atoms) is not UNTRACKING  # untracked where the extension is built
    assert gc.is_tracked(holder)
    doc = chrome_trace([atoms, holder], "p")
    assert [e["args"] for e in doc["traceEvents"] if e["ph"] == "X"] == [
        {"code": 200, "type": "CreateOrder"},
        {"seqs": [1, 2]},
    ]
