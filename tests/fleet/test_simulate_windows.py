"""``reconciler simulate --start TIME --repo-config F --cluster NAME`` models the cluster's
maintenance windows: the predicted end of a rollout that only runs at night is the hand-computed
one."""

from __future__ import annotations

import json
from pathlib import Path

from tests.policy.commands import reconciler

POLICY = """\
driver:
  payload: {registry: reg.local/metax, name: driver-image, version: 2.33.0.9}
  upgradePolicy:
    enableRollout: true
    upgradeSteps: [{replicas: "100%", pauseDuration: 0}]
    maxParallel: 1
    maxUnavailable: 1
    maxFailureThreshold: 1
    fallback: pause
"""

CONFIG = """\
rollout: {readyTimeout: 5m}
windows:
  allow: [{schedule: '0 1 * * *', duration: 24h}]
clusters:
  prod-100:
    rollout: {readyTimeout: 1h}
    windows:
      timezone: Asia/Shanghai
      allow: [{schedule: '0 6 * * *', duration: 1h}]
"""


def simulate(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "reconciler.yaml").write_text(CONFIG)
    done = reconciler(tmp_path, "simulate", "policy.yaml", "--nodes", "4", "--from-version",
                      "2.32.0.6", "--install-seconds", "1800", *args)
    return done.returncode, done.stdout, done.stderr


def test_a_rollout_that_runs_only_in_its_nightly_window_ends_when_hand_computed(
        tmp_path: Path) -> None:
    # 06:00-07:00 Asia/Shanghai is 22:00-23:00 UTC. From Monday 12:00 UTC: nothing until
    # 22:00; node 1 22:00-22:30, node 2 22:30-23:00; the window closes at 23:00 (node 3 does
    # not start then); Tuesday 22:00 node 3, 22:30 node 4, done 23:00 UTC: 35 h after the start.
    # The cluster's own rollout section gives readyTimeout 1h (the top-level 5m would fail
    # every 30-minute install).
    code, out, err = simulate(tmp_path, "--start", "2026-03-02T12:00:00Z", "--repo-config",
                              "reconciler.yaml", "--cluster", "prod-100", "--format", "json")
    assert code == 0, out + err
    result = json.loads(out)
    assert result["completed"] is True
    assert result["duration_seconds"] == 35 * 3600
    starts = [e["t"] for e in result["events"] if e["type"] == "NodeUpgradeStarted"]
    assert starts == [10 * 3600, 10.5 * 3600, 34 * 3600, 34.5 * 3600]


def test_the_text_report_names_the_wall_clock_end(tmp_path: Path) -> None:
    code, out, err = simulate(tmp_path, "--start", "2026-03-02T20:00:00+08:00",
                              "--repo-config", "reconciler.yaml", "--cluster", "prod-100")
    assert code == 0, out + err
    # 12:00 UTC again, written with an offset
    assert "ending 2026-03-03T23:00:00Z" in out
    assert "maintenance windows in Asia/Shanghai: 1 allow, 0 deny" in out


def test_without_windows_the_same_rollout_takes_four_installs(tmp_path: Path) -> None:
    code, out, err = simulate(tmp_path, "--ready-timeout", "3600", "--format", "json")
    assert code == 0, out + err
    assert json.loads(out)["duration_seconds"] == 4 * 1800


def test_an_invalid_repo_config_or_start_is_a_located_usage_error(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("windows:\n  timezone: Mars/Olympus\n")
    code, _, err = simulate(tmp_path, "--repo-config", "bad.yaml")
    assert code == 2
    assert "bad.yaml:2:13: error: windows.timezone: unknown time zone 'Mars/Olympus'" in err
    code, _, err = simulate(tmp_path, "--start", "next tuesday")
    assert code == 2 and "--start: expected an RFC 3339 time" in err
    code, _, err = simulate(tmp_path, "--start", "0001-01-01T00:00:00+14:00")
    assert code == 2
