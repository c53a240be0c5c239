"""The ``raydex`` command line: real subcommands at small sizes; ``--json`` is one JSON object."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from raydex.cluster.cli.commands import build_parser, deploy_job_name, main
from raydex.cluster.control.spec import load_spec

ENGINE_KEYS = {
    "commands_per_s",
    "bare_book_ops_per_s",
    "p50_us",
    "p99_us",
    "p999_us",
    "commands",
    "codes",
    "ratio_engine_vs_bare",
    "ratio_without_harness",
    "harness_seconds",
    "neighbour",
    "peak_rss_mb",
    "liquidations",
}


def _one_json_object(stdout: str) -> dict[str, Any]:
    decoded, end = json.JSONDecoder().raw_decode(stdout)
    assert stdout[end:].strip() == "", "anything after the JSON object"
    assert isinstance(decoded, dict)
    return decoded


def test_bench_engine_json_through_the_console_entry_point_prints_one_object_with_the_keys() -> (
    None
):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "raydex.cluster.cli.commands",
            "bench",
            "engine",
            "--json",
            "--commands",
            "3000",
            "--seed",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = _one_json_object(done.stdout)
    assert set(report) >= ENGINE_KEYS
    assert report["commands"] == 3_000
    assert sum(report["codes"].values()) == 3_000
    assert report["valid"] is True
    assert report["bare_book_ops_per_s"] > 0 and report["commands_per_s"] > 0
    assert 0 < report["p50_us"] <= report["p99_us"] <= report["p999_us"] <= report["max_us"]
    assert sum(t["count"] for t in report["by_type"].values()) == 3_000
    shares = [t["time_share"] for t in report["by_type"].values()]
    assert all(s >= 0 for s in shares) and abs(sum(shares) - 1) < 0.01  # the whole timed time
    n = report["neighbour"]  # what ran beside it: this run itself keeps one CPU busy
    assert len(n["load_avg_1m"]) == 2 and n["cpus"] >= 1
    assert 0 <= n["cpus_busy_others"] <= n["cpus_busy"] <= n["cpus"]


def test_engine_demo_json_reports_trades_volume_state_hash_and_a_valid_state(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--engine", "--json", "--commands", "2000"]) == 0
    report = _one_json_object(capsys.readouterr().out)
    assert report["commands"] == 2_000
    assert report["valid"] is True
    assert len(bytes.fromhex(report["state_hash"])) >= 16
    assert report["trades"] > 0
    assert set(report["volume_usd"]) <= {"BTC", "ETH", "SOL", "DOGE", "XRP", "LINK", "AVAX", "HYPE"}


def test_engine_demo_prints_a_human_summary_with_the_validation_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--engine", "--commands", "1500", "--seed", "4"]) == 0
    text = capsys.readouterr().out
    assert "validate_internal_state(): passed" in text
    assert "final state hash" in text
    assert "commands/s" in text


def test_bench_codecs_json_prints_one_object_with_every_codec(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "codecs", "--json"]) == 0
    report = _one_json_object(capsys.readouterr().out)
    names = {"construct", "construct_compiled", "hot", "struct_floor", "msgpack", "pickle"}
    assert names <= set(report["block_decode_us"])
    assert names <= set(report["block_encode_us"])


def test_bench_apply_json_times_decode_cache_update_and_fanout_per_delta(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "apply", "--json", "--commands", "600", "--warmup", "600", "--repeat", "1"]
    assert main([*argv, "--huge-pages", "off"]) == 0  # off: this process's allocator stays
    out = json.loads(capsys.readouterr().out)
    assert out["events"] > 600 and out["blocks"] == 60 and out["fanout_messages"] > 0
    assert set(out["steps_ns_per_delta"]) == {"decode", "cache_update", "fanout"}
    assert out["ledger_ns_per_delta"] > 0  # the account-history fold, reported apart
    assert out["ns_per_delta"] >= sum(out["steps_ns_per_delta"].values()) * 0.99
    assert out["ns_per_delta_in_reference_loops"] > 0
    assert out["evict_mb"] == 0 and not out["huge_pages"]["arenas"]


def test_bench_apply_evicts_the_caches_between_blocks_when_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "apply", "--json", "--commands", "300", "--warmup", "300", "--repeat", "1"]
    assert main([*argv, "--evict-mb", "1", "--huge-pages", "off"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the same blocks, timed the same way, with 1 MiB written before each (untimed)
    assert out["evict_mb"] == 1 and out["blocks"] == 30 and out["events"] > 300


def test_bench_wal_times_both_segment_layouts_in_the_given_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["bench", "wal", "--json", "--blocks", "40", "--rounds", "1", "--dir", str(tmp_path)]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    appended, preallocated = out["layouts"]["appended"], out["layouts"]["preallocated"]
    assert appended["sync_us"]["count"] == preallocated["sync_us"]["count"] == 40
    # each run's log: one segment, of the layout it measures
    assert (appended["segments_appended"], appended["segments_preallocated"]) == (1, 0)
    assert (preallocated["segments_appended"], preallocated["segments_preallocated"]) == (0, 1)
    assert out["record_bytes"] > 10 * 100 and set(out["preallocated_over_appended"]) == {
        "sync_p50", "sync_p99", "sync_cpu_p50"}  # fmt: skip
    assert list(tmp_path.iterdir()) == []  # its logs removed


@pytest.mark.slow
def test_bench_sequencer_feeds_signed_valid_batches_and_splits_the_sequencers_cpu_by_step(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """One short rate through the real processes: every tx the feeders sent is answered and
    executed OK (nonces in order per account), the committer's audit finds every signature
    valid, the steps and the rest add up to the process's CPU per tx, the WAL folder is removed."""
    argv = ["bench", "sequencer", "--json", "--rates", "300", "--step-seconds", "1.5",
            "--feeders", "2", "--dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    (step,) = out["steps"]
    assert step["txs"] > 0 and step["unanswered_batches"] == 0
    assert set(step["codes"]) == {"OK"} and step["codes"]["OK"] == step["sent_txs"]
    assert step["followers_behind_blocks"]["audit_failed_txs"] == 0
    by_step = step["us_per_tx_by_step"]
    assert set(by_step) == {"decode", "engine", "wal", "publish", "rest"}
    assert all(by_step[k] > 0 for k in ("decode", "engine", "wal", "publish"))
    assert sum(by_step.values()) == pytest.approx(step["us_per_tx"], abs=0.1)
    assert out["setup_codes"] == {"OK": sum(out["setup_codes"].values())}
    assert out["goal"]["tps"] == 20_740 and "placement" in out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bench"],
        ["bench", "wal", "--blocks", "0"],
        ["bench", "engine", "--commands", "0"],
        ["bench", "apply", "--evict-mb", "-1"],
        ["bench", "apply", "--huge-pages", "maybe"],
        ["bench", "sequencer", "--feeders", "0"],
        ["bench", "sequencer", "--rates", "fast"],
        ["bench", "nothing"],
        ["deploy"],
    ],
)
def test_a_missing_or_unknown_subcommand_or_bad_size_exits_with_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage: raydex" in capsys.readouterr().err


def test_the_help_lists_only_subcommands_that_exist() -> None:
    text = build_parser().format_help()
    assert "demo" in text and "bench" in text


def test_node_args_prints_the_ray_start_flags_for_this_host(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["node-args", "--role", "head", "--host", "box1"]) == 0
    flags = capsys.readouterr().out.split()
    assert flags[0] == "--resources" and json.loads(flags[1])
    assert flags[2] == "--labels" and "box1" in flags[3] and "head" in flags[3]


def test_up_refuses_a_bad_spec_before_starting_any_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raydex.cluster.control.spec import SpecError

    monkeypatch.setenv("RAYDEX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # up sets it for its driver: keep it local
    bad = tmp_path / "bad.yaml"
    bad.write_text("chain_id: 1\nsequencer: {wal_dir: /tmp/w, chain_id: 2}\n")
    with pytest.raises(SpecError, match=r"sequencer\.chain_id: not settable here"):
        main(["up", "--spec", str(bad), "--port", "1"])
    assert not (tmp_path / "state").exists()  # no head started, nothing recorded


def test_up_hands_the_flags_after_the_double_dash_to_ray_start() -> None:
    args = build_parser().parse_args(
        ["up", "--port", "7000", "--no-dashboard", "--", "--num-gpus=0", "--object-store-memory=1"]
    )
    assert (args.port, args.no_dashboard) == (7000, True)
    assert args.ray_args == ["--num-gpus=0", "--object-store-memory=1"]


def test_the_status_line_of_an_oversubscribed_host_says_so_and_what_ray_reserves() -> None:
    from raydex.cluster.control.deploy import SHARED_REQUEST, HostLoad

    names = ("raydex-replica-a-0", "raydex-replica-a-1", "raydex-sequencer", "raydex-snapshot")
    crowded = HostLoad("demo", 2, 4, names, (SHARED_REQUEST,))
    assert crowded.oversubscribed
    assert crowded.line() == (
        "host demo: 2 cores, 4 pinned requests: oversubscribed, Ray reserves 0.05 CPU per actor "
        "(4 actors share the cores; Ray counts them as nearly free: run no other Ray work on "
        "this host)"
    )
    roomy = HostLoad("big", 16, 4, names, (1.0,))
    assert not roomy.oversubscribed
    assert roomy.line().endswith("Ray reserves 1 CPU per actor (the cores it pins)")


def test_status_compares_state_hashes_only_at_equal_seq_and_names_a_divergence() -> None:
    from raydex.cluster.control.deploy import state_agreement

    agreeing = {
        "raydex-sequencer": {"state_hash": "aa" * 32, "state_hash_seq": 40},
        "raydex-snapshot": {"state_hash": "bb" * 32, "state_hash_seq": 57},
        "raydex-replica-api-0": {"state_hash": "bb" * 32, "state_hash_seq": 57},
        "raydex-replica-api-1": {"state_hash": "bb" * 32, "state_hash_seq": 57},
        "raydex-committer": {"seq": 57, "chain": "cc" * 32},
        "raydex-replica-api-2": {"error": "RayActorError: dead"},
    }
    found = state_agreement(agreeing)
    assert [(a.seq, a.diverged) for a in found] == [(40, False), (57, False)]
    assert found[0].line().startswith("state at seq 40: raydex-sequencer alone")
    assert found[1].line() == (
        "state agrees at seq 57 (bbbbbbbbbbbb): raydex-replica-api-0, raydex-replica-api-1, "
        "raydex-snapshot"
    )
    split = {**agreeing, "raydex-replica-api-1": {"state_hash": "dd" * 32, "state_hash_seq": 57}}
    (_, bad) = state_agreement(split)
    assert bad.diverged
    assert bad.line() == (
        "STATE DIVERGED at seq 57: raydex-replica-api-0=bbbbbbbbbbbb, "
        "raydex-replica-api-1=dddddddddddd, raydex-snapshot=bbbbbbbbbbbb"
    )


def test_status_compares_state_checks_at_the_newest_shared_and_any_differing_seq() -> None:
    from raydex.cluster.control.deploy import state_agreement

    h = {n: f"{n:02d}" * 32 for n in range(10)}
    statuses = {
        "raydex-sequencer": {"state_hash": h[9], "state_hash_seq": 1234},
        "raydex-snapshot": {"state_checks": {1000: h[1], 2000: h[2], 3000: h[3]}},
        "raydex-replica-api-0": {"state_checks": {1000: h[1], 2000: h[2]}},
        "raydex-replica-api-1": {"state_checks": {1000: h[1], 2000: h[2]}},
    }
    found = state_agreement(statuses)
    # 3000: the holder alone; 1000: agreed, older than the newest shared one; both left out
    assert [(a.seq, sorted(a.hashes), a.diverged) for a in found] == [
        (1234, ["raydex-sequencer"], False),
        (2000, ["raydex-replica-api-0", "raydex-replica-api-1", "raydex-snapshot"], False),
    ]
    statuses["raydex-replica-api-1"] = {"state_checks": {1000: h[5], 2000: h[6]}}
    found = state_agreement(statuses)
    assert [(a.seq, a.diverged) for a in found] == [(1000, True), (1234, False), (2000, True)]
    assert found[0].line().startswith("STATE DIVERGED at seq 1000: ")


def test_grafana_install_refuses_a_folder_that_is_no_ray_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["grafana", "install", "--session-dir", str(tmp_path)]) == 2
    assert "has no Grafana provisioning" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["--l1-address", "0x1234", "--amount", "10"], "--l1-address needs 0x + 40 hex"),
        (["--l1-address", "0x" + "00" * 20, "--amount", "10"], "--l1-address needs 0x + 40 hex"),
        (["--l1-address", "0x" + "ab" * 20, "--amount", "ten"], "--amount: not a decimal"),
        (["--l1-address", "0x" + "ab" * 20, "--amount", "0.0000001"], "--amount: '0.0000001'"),
        (["--l1-address", "0x" + "ab" * 20, "--amount", "0"], "--amount must be positive"),
    ],
)
def test_deposit_refuses_a_bad_address_or_amount_before_connecting_to_ray(
    argv: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deposit", *argv]) == 2
    assert why in capsys.readouterr().err


def test_a_deploying_driver_is_named_in_rays_jobs_page_by_what_it_deploys_where() -> None:
    repo_spec = str(Path(__file__).parents[2] / "raydex.yaml")
    name = deploy_job_name("raydex up", repo_spec, load_spec(repo_spec))
    assert name == (
        "raydex up: deploys raydex.yaml into namespace raydex "
        "(sequencer, snapshot holder, committer; replica groups public x1 per NUMA node)"
    )
