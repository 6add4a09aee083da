"""``reconciler simulate`` end to end (the real command, the real planner), checked against
timelines computed by hand in the comments."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from reconciler.cli.main import cli

DATA = Path(__file__).parent / "data"
SEED_10 = DATA / "seed-10-nodes.yaml"
SEED_100 = DATA / "seed-100-nodes.yaml"


def simulate(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, ["simulate", *map(str, args)], catch_exceptions=False)


def as_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    result = simulate(*args, "--format", "json")
    return result.exit_code, json.loads(result.stdout)


def write_faults(tmp_path: Path, *entries: tuple[str, str]) -> Path:
    path = tmp_path / "faults.yaml"
    path.write_text(
        "faults:\n" + "".join(f"  - {{node: {n}, fault: {f}}}\n" for n, f in entries),
        encoding="utf-8",
    )
    return path


def types_at(out: dict[str, Any], kind: str) -> list[float]:
    return [e["t"] for e in out["events"] if e["type"] == kind]


def test_seed_10_nodes_completes_in_the_hand_computed_time() -> None:
    # install 60 s, maxParallel 100% of each batch: every batch is one 60 s wave.
    # step 1 (2 nodes) 60 + gate 30; steps 2-4 (3, 3, 2 nodes) 60 + 10 s pause each
    # = 60 + 30 + 3 * 70 = 300 s
    code, out = as_json(SEED_10, "--nodes", "10", "--from-version", "2.32.0.6",
                        "--auto-confirm", "30")
    assert code == 0
    assert out["completed"] is True
    assert out["duration_seconds"] == 300
    assert out["max_in_flight"] == 3 and out["max_unavailable_seen"] == 0
    final = out["final"]
    assert final["phase"] == "Idling" and final["upgrading"] is False
    assert final["status"]["currentStepIndex"] == 4
    assert final["status"]["currentStepState"] == "Completed"
    assert final["status"]["totalUpgradeReadyReplicas"] == 10
    assert {n["version"] for n in out["nodes"]} == {"2.33.0.9"}
    assert [n["name"] for n in out["nodes"]][:2] == ["node-0001", "node-0002"]
    assert types_at(out, "GateOpened") == [60]
    assert types_at(out, "StepStarted") == [90, 160, 230]
    times = [e["t"] for e in out["events"]]
    assert times == sorted(times)


def test_seed_100_nodes_completes_in_the_hand_computed_time() -> None:
    # install 120 s, gates confirmed after 60 s, maxParallel 50% of each batch (2 waves each):
    # step 1: 5 nodes, 3 + 2 -> 240, gate -> 300
    # step 2: 25 nodes, 13 + 12 -> 540, pause 300 -> 840
    # step 3: 30 nodes, 15 + 15 -> 1080, pause 300 -> 1380
    # step 4: 40 nodes, 20 + 20 -> 1620, gate -> 1680
    code, out = as_json(SEED_100, "--nodes", "100", "--from-version", "2.32.0.6",
                        "--install-seconds", "120", "--auto-confirm", "60")
    assert code == 0 and out["completed"] is True
    assert out["duration_seconds"] == 1680
    assert out["max_in_flight"] == 20
    assert types_at(out, "GateOpened") == [240, 1620]
    assert types_at(out, "StepCompleted") == [540, 1080]
    assert types_at(out, "RolloutCompleted") == [1680]


def test_cordon_ahead_changes_no_step_and_no_timing() -> None:
    # the seed-100 run above, cordon ahead off: the same decisions at the same virtual times
    # (a node cordoned ahead is neither in flight nor unavailable; only its start is shorter)
    args = (SEED_100, "--nodes", "100", "--from-version", "2.32.0.6",
            "--install-seconds", "120", "--auto-confirm", "60")
    code_on, on = as_json(*args)
    code_off, off = as_json(*args, "--no-cordon-ahead")
    assert code_on == code_off == 0
    assert off["duration_seconds"] == on["duration_seconds"] == 1680
    assert off["max_in_flight"] == on["max_in_flight"] == 20
    assert off["max_unavailable_seen"] == on["max_unavailable_seen"]
    assert [(e["t"], e["type"]) for e in off["events"]] == [
        (e["t"], e["type"]) for e in on["events"]]


def test_without_auto_confirm_the_simulation_stops_at_the_first_gate() -> None:
    code, out = as_json(SEED_100, "--nodes", "100", "--from-version", "2.32.0.6",
                        "--install-seconds", "120")
    assert code == 1
    assert out["completed"] is False and out["stop_reason"] == "manual-gate"
    assert out["duration_seconds"] == 240
    assert out["final"]["status"]["currentStepState"] == "StepPaused"
    assert sum(n["version"] == "2.33.0.9" for n in out["nodes"]) == 5


def test_image_pull_fault_reaches_the_threshold_and_pauses(tmp_path: Path) -> None:
    # step 2 starts at 90 with nodes 3-5; node-0003 fails at once (1), retried after 30 s
    # at 120 (2), after 60 s at 180 (3 = maxFailureThreshold): fallback pause at 180
    faults = write_faults(tmp_path, ("node-0003", "imagepull"))
    code, out = as_json(SEED_10, "--nodes", "10", "--from-version", "2.32.0.6",
                        "--auto-confirm", "30", "--faults", faults)
    assert code == 1
    assert out["stop_reason"] == "fallback-pause"
    assert out["duration_seconds"] == 180
    assert types_at(out, "NodeFailed") == [90, 120, 180]
    final = out["final"]
    assert final["phase"] == "Progressing" and final["upgrading"] is True
    assert final["status"]["currentStepState"] == "StepPaused"
    assert final["status"]["currentFailureRetry"] == 3
    failed = next(c for c in final["conditions"] if c["type"] == "BatchFailed")
    assert failed["reason"] == "FailureThresholdReached" and "node-0003" in failed["message"]
    versions = {n["name"]: n["version"] for n in out["nodes"]}
    assert versions["node-0003"] == "2.33.0.9"  # its pod is on the new version, not Ready
    assert not next(n for n in out["nodes"] if n["name"] == "node-0003")["ready"]


def test_crash_loop_fault_with_fallback_rollback(tmp_path: Path) -> None:
    # seed-100 with fallback: rollback; node-0007 crash-loops on the new version.
    # step 2 starts at 300 with 13 nodes (6-18); node-0007 crashes at 420 (1), others Ready;
    # nodes 19-30 start at 420. Retries at 450, 630, 870, 1230 (back-off 30, 60, 120, 240),
    # each crashing 120 s later: failures 2, 3, 4, 5 -> at 1350 the threshold (5) is reached.
    # Rollback within maxParallel 13: node-0007 first and 12 more at 1350, 13 at 1470, the
    # last 4 at 1590, all Ready on the old version at 1710.
    policy = tmp_path / "policy.yaml"
    policy.write_text(SEED_100.read_text().replace("fallback: pause", "fallback: rollback"))
    faults = write_faults(tmp_path, ("node-0007", "crashloop"))
    code, out = as_json(policy, "--nodes", "100", "--from-version", "2.32.0.6",
                        "--install-seconds", "120", "--auto-confirm", "60", "--faults", faults)
    assert code == 1
    assert out["stop_reason"] == "rolled-back" and out["completed"] is False
    assert types_at(out, "NodeFailed") == [420, 570, 750, 990, 1350]
    assert types_at(out, "RollbackStarted") == [1350]
    assert out["duration_seconds"] == 1710
    rollback = [e for e in out["events"] if e["type"] == "NodeRollbackStarted"]
    assert rollback[0]["node"] == "node-0007"
    assert [e["t"] for e in rollback].count(1350) == 13
    assert out["max_in_flight"] == 13
    assert {n["version"] for n in out["nodes"]} == {"2.32.0.6"}
    assert all(n["ready"] for n in out["nodes"])
    final = out["final"]
    assert final["phase"] == "Idling" and final["status"]["currentStepState"] == "Completed"
    assert final["status"]["currentStepIndex"] == 2
    rolled = next(c for c in final["conditions"] if c["type"] == "RolledBack")
    assert rolled["reason"] == "FailureThresholdReached" and "2.33.0.9" in rolled["message"]


def test_never_ready_fault_fails_by_ready_timeout(tmp_path: Path) -> None:
    # step 4 starts at 230 with nodes 9 and 10; node-0010 never turns Ready: failures at
    # 830 (timeout 600), retry 860 -> 1460, retry 1520 -> 2120 (3 = threshold): pause
    faults = write_faults(tmp_path, ("node-0010", "never-ready"))
    code, out = as_json(SEED_10, "--nodes", "10", "--from-version", "2.32.0.6",
                        "--auto-confirm", "30", "--faults", faults)
    assert code == 1
    assert types_at(out, "NodeFailed") == [830, 1460, 2120]
    assert out["duration_seconds"] == 2120
    assert out["stop_reason"] == "fallback-pause"


def test_not_ready_node_blocks_fresh_starts_with_max_unavailable_zero(tmp_path: Path) -> None:
    faults = write_faults(tmp_path, ("node-0005", "node-notready"))
    code, out = as_json(SEED_10, "--nodes", "10", "--from-version", "2.32.0.6",
                        "--auto-confirm", "30", "--faults", faults)
    assert code == 1 and out["stop_reason"] == "stalled"
    assert out["max_unavailable_seen"] == 1
    assert out["final"]["phase"] == "Progressing"
    assert "unavailable" in out["final"]["status"]["message"]
    assert {n["version"] for n in out["nodes"]} == {"2.32.0.6"}


def test_until_bounds_virtual_time() -> None:
    code, out = as_json(SEED_100, "--nodes", "100", "--from-version", "2.32.0.6",
                        "--install-seconds", "120", "--auto-confirm", "60", "--until", "1000")
    assert code == 1 and out["stop_reason"] == "until"
    assert out["duration_seconds"] == 1000


def test_text_format_shows_the_timeline_and_the_predicted_total() -> None:
    result = simulate(SEED_10, "--nodes", "10", "--from-version", "2.32.0.6",
                      "--auto-confirm", "30")
    assert result.exit_code == 0
    text = result.stdout
    assert "predicted total 0:05:00 (300 s)" in text
    assert "GateOpened" in text and "RolloutCompleted" in text
    # per-step durations: step 1 upgraded in 1:00 and left after the 30 s gate
    step1 = next(line for line in text.splitlines() if line.strip().startswith("1 "))
    assert "0:01:00" in step1 and "0:01:30" in step1


def test_toleration_shows_in_the_step_table_and_the_nodes_left_behind(tmp_path: Path) -> None:
    """docs/rollout.md#failures-tolerated-in-a-step: step 2 of the seed (nodes 3-5) tolerates one
    failure; node-0004 crash-loops and is left behind, the rollout completes (exit 0)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(SEED_10.read_text(encoding="utf-8").replace(
        "      - replicas: 5\n", "      - replicas: 5\n        toleration: 33%\n"),
        encoding="utf-8")
    faults = write_faults(tmp_path, ("node-0004", "crashloop"))
    args = (policy, "--nodes", "10", "--from-version", "2.32.0.6", "--auto-confirm", "30",
            "--faults", faults)
    result = simulate(*args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[3].split()[:5] == ["step", "target", "batch", "parallel", "tolerate"]
    # 33% of step 2's 3 nodes, rounded up: 1; the other steps tolerate none
    assert [line.split()[4] for line in lines[4:8]] == ["0", "1", "0", "0"]
    assert "NodeFailureTolerated node-0004: driver pod failed (CrashLoopBackOff), tolerated by " \
           "step 2 (toleration 1)" in result.stdout
    assert "step 2 done (4/10 nodes, 1 tolerated)" in result.stdout
    assert "tolerated (left behind on the failed driver): node-0004 (step 2)" in lines
    page = tmp_path / "rollout.html"
    code, out = as_json(*args, "--html", page)
    assert code == 0 and out["completed"] is True and out["stop_reason"] == "completed"
    assert out["tolerated"] == [{"node": "node-0004", "step": 2}]
    html = page.read_text(encoding="utf-8")
    assert "<th>failures tolerated</th>" in html and "<td>1</td>" in html
    assert '<p id="tolerated">left behind within their step\'s toleration: node-0004 ' \
           "(step 2)</p>" in html
    assert out["final"]["status"]["currentFailureRetry"] == 0
    assert out["final"]["status"]["totalUpgradeReadyReplicas"] == 9
    assert not any(e["type"] in ("NodeFailed", "FallbackPaused") for e in out["events"])
    # without a toleration the output has neither the column nor the key
    plain = simulate(SEED_10, "--nodes", "10", "--from-version", "2.32.0.6")
    assert "tolerate" not in plain.stdout
    assert "tolerated" not in as_json(SEED_10, "--nodes", "10", "--from-version", "2.32.0.6")[1]


def test_node_names_are_zero_padded_to_the_fleet_size() -> None:
    code, out = as_json(SEED_10, "--nodes", "12345", "--from-version", "2.32.0.6",
                        "--until", "0")
    assert code == 1 and out["stop_reason"] == "until"
    assert out["nodes"][0]["name"] == "node-00001"
    assert out["nodes"][-1]["name"] == "node-12345"


def test_same_image_is_no_rollout() -> None:
    result = simulate(SEED_10, "--nodes", "3", "--from-version", "2.33.0.9-amd64",
                      "--format", "json")
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert out["completed"] is True and out["stop_reason"] == "idle"
    assert out["duration_seconds"] == 0
    assert {n["version"] for n in out["nodes"]} == {"2.33.0.9-amd64"}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("driver:\n  payload: {version: 2.0.0.1}\n  upgradePolicy:\n    enableRollout: 'false'\n",
         "expected boolean"),
        ("driver:\n  upgradePolicy:\n    enableRollout: true\n    upgradeSteps:\n"
         "      - {replicas: 100%, pauseDuration: 0}\n", "no spec.driver.payload.version"),
        ("driver: [\n", "policy.yaml:"),
    ],
)
def test_bad_policy_file_is_a_located_error_not_a_traceback(
    tmp_path: Path, content: str, expected: str
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(content, encoding="utf-8")
    result = simulate(policy, "--nodes", "3", "--from-version", "1.0.0.0")
    assert result.exit_code == 2
    assert expected in result.stderr
    assert "Traceback" not in result.output


def test_fragment_findings_point_at_the_fragment_lines(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "driver:\n  payload: {version: 2.0.0.1}\n  upgradePolicy:\n    maxParallel: 50 %\n",
        encoding="utf-8",
    )
    result = simulate(policy, "--nodes", "3", "--from-version", "1.0.0.0")
    assert result.exit_code == 2
    assert f"{policy}:4:18:" in result.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("faults:\n  - {node: node-0099, fault: imagepull}\n", "no node named 'node-0099'"),
        ("faults:\n  - {node: node-0001, fault: meltdown}\n", "unknown fault 'meltdown'"),
        ("faults:\n  - {node: node-0001}\n", "expected exactly the keys"),
        ("faults:\n  - {node: node-0001, fault: imagepull}\n"
         "  - {node: node-0001, fault: crashloop}\n", "already has a fault"),
        ("- node-0001\n", "expected a mapping with one key 'faults'"),
        ("faults: [\n", "cannot read faults file"),
    ],
)
def test_bad_faults_file_is_a_clear_error(tmp_path: Path, content: str, expected: str) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text(content, encoding="utf-8")
    result = simulate(SEED_10, "--nodes", "10", "--from-version", "2.32.0.6",
                      "--faults", faults)
    assert result.exit_code == 2
    assert expected in result.stderr


def test_missing_policy_file_is_a_clear_error(tmp_path: Path) -> None:
    result = simulate(tmp_path / "nope.yaml", "--nodes", "3", "--from-version", "1")
    assert result.exit_code == 2
    assert "cannot read policy file" in result.stderr


# ----------------------------------------------------------------------------- steps past N


def policy_file(tmp_path: Path, steps: list[tuple[object, object]], **fields: object) -> Path:
    """A bare ``driver:`` fragment with the payload and these steps (pause ``None``: a gate)."""
    body = {"maxParallel": 1, "maxUnavailable": 0, "maxFailureThreshold": 5,
            "fallback": "pause", **fields}
    lines = [
        "driver:",
        "  payload: {registry: reg.local/metax, name: driver-image, version: 2.33.0.9}",
        "  upgradePolicy:",
        "    enableRollout: true",
        "    upgradeSteps:",
        # a gate: pauseDuration left out
        *(f"      - {{replicas: {json.dumps(r)}"
          + ("}" if p is None else f", pauseDuration: {p}}}") for r, p in steps),
        *(f"    {key}: {json.dumps(value)}" for key, value in body.items()),
    ]
    path = tmp_path / "policy.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_steps_past_the_fleet_size_without_a_pause_add_no_time(tmp_path: Path) -> None:
    # 3 nodes, one at a time, 60 s each: 180 s. Steps 3..50 and 100% all resolve to 3 nodes and
    # are done the moment step 3 is; each advances at 180 (it waited for the next readyTimeout
    # wake-up, 600 s after a deletion, before)
    path = policy_file(tmp_path, [*((i, 0) for i in range(1, 51)), ("100%", 0)])
    code, out = as_json(path, "--nodes", "3", "--from-version", "2.32.0.6")
    assert code == 0 and out["completed"] is True
    assert out["duration_seconds"] == 180
    assert types_at(out, "StepStarted") == [60, 120] + [180] * 48
    assert types_at(out, "RolloutCompleted") == [180]
    assert out["final"]["status"]["currentStepIndex"] == 51


def test_gates_and_pauses_past_the_fleet_size_wait_only_for_themselves(tmp_path: Path) -> None:
    # 180 s for the 3 nodes; step 4 (a gate, confirmed 45 s after it opens at 180): 225;
    # steps 5..20 at once; step 21 pauses 30 s: 255; 100% at once
    path = policy_file(tmp_path, [(1, 0), (2, 0), (3, 0), (4, None),
                                  *((i, 0) for i in range(5, 21)), (21, 30_000), ("100%", 0)])
    code, out = as_json(path, "--nodes", "3", "--from-version", "2.32.0.6",
                        "--auto-confirm", "45")
    assert code == 0 and out["completed"] is True
    assert out["duration_seconds"] == 255
    assert types_at(out, "GateOpened") == [180]
    assert types_at(out, "StepStarted") == [60, 120, 180] + [225] * 17 + [255]


# ----------------------------------------------------------------------------- int64 policies


INT64_MAX = 2**63 - 1


def run_child(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``reconciler simulate`` in a child process with 2 GiB of address space."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run(
        [sys.executable, "-m", "reconciler.cli.main", "simulate", *map(str, args)],
        capture_output=True, text=True, timeout=120, preexec_fn=limit, check=False,
    )


@pytest.mark.parametrize("pause", [2**62, INT64_MAX])
def test_an_int64_pause_waits_until_year_9999_in_a_child_process(
    tmp_path: Path, pause: int,
) -> None:
    """Every other integer at its type's maximum too (maxFailureThreshold is int32 in the
    vendor's CRD): the step is capped at N, maxParallel at the batch; the pause's end is
    clamped to the last instant RFC 3339 can write."""
    path = policy_file(tmp_path, [(INT64_MAX, pause), ("100%", INT64_MAX)],
                       maxParallel=INT64_MAX, maxUnavailable=INT64_MAX,
                       maxFailureThreshold=2**31 - 1)
    done = run_child(path, "--nodes", "3", "--from-version", "2.32.0.6", "--format", "json")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    out = json.loads(done.stdout)
    assert out["stop_reason"] == "until" and out["duration_seconds"] == 7 * 86400
    inner = out["final"]["status"]
    assert inner["currentStepIndex"] == 1 and inner["currentStepState"] == "StepPaused"
    assert inner["recheckTime"] == "9999-12-31T23:59:59.999Z"
    assert {n["version"] for n in out["nodes"]} == {"2.33.0.9"}
    assert out["max_in_flight"] == 3
    # run on past year 9999: both pauses end there and the rollout completes, nothing overflows
    done = run_child(path, "--nodes", "3", "--from-version", "2.32.0.6", "--format", "json",
                     "--until", str(253402300799.999 - 1767225600.0))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["stop_reason"] == "completed"
    # 9999-12-31T23:59:59.999Z less the simulator's time 0 (2026-01-01T00:00:00Z)
    assert out["duration_seconds"] == 253402300799.999 - 1767225600.0
    text = run_child(path, "--nodes", "3", "--from-version", "2.32.0.6")
    assert text.returncode == 1 and "Traceback" not in text.stderr
    assert "stopped at --until" in text.stdout
    # past the last instant a status can record, --until is a usage error
    beyond = run_child(path, "--nodes", "3", "--from-version", "2.32.0.6", "--until", "1e15")
    assert beyond.returncode == 2 and "--until" in beyond.stderr


@pytest.mark.parametrize("version", ["2.32 .0", "-2.32.0.6", "v" * 129, "2.32.0.6\n"])
def test_a_from_version_that_is_no_image_tag_is_refused(version: str) -> None:
    result = simulate(SEED_10, "--nodes", "3", "--from-version", version)
    assert result.exit_code == 2
    assert "--from-version: expected an image tag like '2.33.0.9'" in result.stderr


def test_a_cluster_without_its_section_is_refused_with_the_names_it_has(
        tmp_path: Path) -> None:
    config = tmp_path / "reconciler.yaml"
    config.write_text("clusters:\n  prod-100: {rollout: {readyTimeout: 1h}}\n"
                      "  staging-50: {rollout: {readyTimeout: 5m}}\n", encoding="utf-8")
    result = simulate(SEED_10, "--nodes", "3", "--from-version", "2.32.0.6",
                      "--repo-config", config, "--cluster", "prod-10")
    assert result.exit_code == 2
    assert (f"--cluster 'prod-10': {config} has no clusters.prod-10 section (it has: "
            "prod-100, staging-50), so --cluster would change nothing; did you mean prod-100?"
            ) in result.stderr
    result = simulate(SEED_10, "--nodes", "3", "--from-version", "2.32.0.6",
                      "--cluster", "prod-100")
    assert result.exit_code == 2
    assert "--cluster picks the clusters.<NAME> section of --repo-config" in result.stderr
    code, out = as_json(SEED_10, "--nodes", "3", "--from-version", "2.32.0.6",
                        "--auto-confirm", "1", "--repo-config", config, "--cluster", "prod-100")
    assert code == 0 and out["completed"] is True
