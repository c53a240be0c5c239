"""The capacity sweep: rates parse from lists and ranges, the knee is the last point of the
keeping-up run from the lowest rate, and a sweep's files (JSON, Markdown, PNG) are written from
the points' reports. The loadtests themselves are replaced by report documents of the shape
``run.run`` returns (the sweep only reads them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from raydex.observability.loadtest.sweep import (
    SweepPoint,
    find_knee,
    loadtest_argv,
    parse_rates,
    point_of,
    run_sweep,
    sweep_report,
)


def test_rates_parse_from_a_list_a_range_or_both() -> None:
    assert parse_rates("1000,2000,3000") == (1000.0, 2000.0, 3000.0)
    assert parse_rates("1000:5000:1000") == (1000.0, 2000.0, 3000.0, 4000.0, 5000.0)
    assert parse_rates("500, 1000:2000:500,2000") == (500.0, 1000.0, 1500.0, 2000.0)
    assert parse_rates("2500.5") == (2500.5,)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no rates given"),
        ("1000,abc", "'abc' in 'abc' is not a number"),
        ("1000:2000", "a range is START:STOP:STEP"),
        ("3000:1000:500", "ends before it starts"),
        ("0,1000", "rates must be > 0"),
        ("100:10000:100", "at most 20"),
        ("1000:2000:0", "rates must be > 0"),
    ],
)
def test_bad_rates_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rates(text)


def pt(offered: float, achieved: float, p99_ms: float, errors: float = 0.0) -> SweepPoint:
    return SweepPoint(offered, achieved, p99_ms / 3, p99_ms, errors)


def test_the_knee_is_the_last_rate_the_stack_keeps_up_with() -> None:
    points = [pt(1000, 999, 40), pt(2000, 1990, 60), pt(3000, 2400, 9000), pt(4000, 2300, 30000)]
    knee = find_knee(points)
    assert knee is not None and knee.offered == 2000


def test_a_latency_blow_up_ends_the_run_even_when_throughput_keeps_up() -> None:
    points = [pt(1000, 1000, 20), pt(2000, 2000, 30), pt(3000, 2990, 450), pt(4000, 3990, 60)]
    knee = find_knee(points)  # 450 ms > 10 x 20 ms: 3,000 is past the knee, 4,000 is not looked at
    assert knee is not None and knee.offered == 2000


def test_errors_end_the_run_and_order_of_the_points_does_not_matter() -> None:
    points = [pt(3000, 3000, 30, errors=5.0), pt(1000, 1000, 20), pt(2000, 2000, 25)]
    knee = find_knee(points)
    assert knee is not None and knee.offered == 2000


def test_no_knee_when_the_lowest_rate_is_already_past_it() -> None:
    assert find_knee([pt(5000, 1400, 8000), pt(6000, 1300, 9000)]) is None
    assert find_knee([]) is None


def test_the_report_names_the_knee_the_point_past_it_and_the_capacity() -> None:
    doc = sweep_report([pt(1000, 999, 40), pt(2000, 1990, 60), pt(3000, 2400, 9000)])
    assert doc["knee"]["offered"] == 2000 and doc["past_knee"]["offered"] == 3000
    assert doc["capacity_tps"] == 2400
    assert [p["offered"] for p in doc["points"]] == [1000, 2000, 3000]


def report_doc(tps: float, achieved: float, p99_us: float, out: Path) -> dict[str, Any]:
    return {
        "run": {"tps": tps, "out_dir": str(out)},
        "achieved_tps": achieved,
        "error_rate_pct": 0.0,
        "request_latency_us": {"count": 10, "p50": p99_us / 4, "p99": p99_us},
        "cpu_us_per_tx": {"sequencer": 400.0, "replica main-0": 500.0, "loadgen": 200.0,
                          "unattributed": 20.0, "total": 1120.0},
    }  # fmt: skip


def test_a_sweep_writes_its_json_markdown_and_plot(tmp_path: Path) -> None:
    seen: list[tuple[float, Path]] = []

    def one(rate: float, folder: Path) -> dict[str, Any]:
        seen.append((rate, folder))
        return report_doc(rate, min(rate, 1500.0), 30_000 if rate < 2000 else 9_000_000, folder)

    doc = run_sweep([1000.0, 2000.0], tmp_path, one)
    assert [r for r, _ in seen] == [1000.0, 2000.0]
    assert seen[0][1] == tmp_path / "tps-1000"
    on_disk = json.loads((tmp_path / "sweep.json").read_text())
    assert on_disk["knee"]["offered"] == 1000 == doc["knee"]["offered"]
    assert on_disk["points"][0]["ledger"]["sequencer"] == 400.0
    md = (tmp_path / "sweep.md").read_text()
    assert "Knee at 1,000 tx/s offered" in md and "| 2,000 |" in md
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_a_point_is_read_from_a_loadtest_report(tmp_path: Path) -> None:
    p = point_of(report_doc(3000, 2500, 120_000, tmp_path))
    assert (p.offered, p.achieved, p.p99_ms, p.p50_ms) == (3000, 2500, 120.0, 30.0)
    assert p.cpu_us_per_tx == 1120.0


def test_the_cli_refuses_a_bad_sweep_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from raydex.cluster.cli.commands import main

    assert main(["loadtest", "--sweep", "1000:x:5"]) == 2
    assert "is not a number" in capsys.readouterr().err
    assert main(["loadtest", "--sweep", "1000,2000", "--ab", "a=pin:on,b=pin:off"]) == 2
    assert "--sweep and --ab do not combine" in capsys.readouterr().err


def test_each_point_is_the_same_loadtest_command_at_its_own_rate(tmp_path: Path) -> None:
    from raydex.cluster.cli.commands import build_parser
    from raydex.observability.loadtest.run import LoadtestOptions

    opts = LoadtestOptions(
        tps=1500, seconds=10, accounts=40, replicas=1, clients=2, out_dir=str(tmp_path),
        profile=True, resync=False, quiet=True, generator_cpus="any",
    )  # fmt: skip
    args = build_parser().parse_args(loadtest_argv(opts))
    assert args.generator_cpus == "any"
    assert (args.tps, args.seconds, args.accounts, args.replicas, args.clients) == (
        1500,
        10,
        40,
        1,
        2,
    )
    assert args.profile and args.no_resync and args.quiet and args.out == str(tmp_path)
    assert args.sweep is None and args.ab is None
    default = build_parser().parse_args(loadtest_argv(LoadtestOptions()))
    assert default.replicas is None  # the spec's count, as the sweep's own command had it
    assert default.generator_cpus == "auto"
