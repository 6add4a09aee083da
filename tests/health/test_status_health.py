"""``reconciler status`` shows each health check's last value and verdict, read from a status
snapshot in Git that carries ``upgradeStatus.health`` (and validates)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from reconciler.cli.main import cli
from reconciler.gitops.edits import render_status
from reconciler.policy.validation import validate_status_snapshot
from tests.sync.test_status_view import snapshot


def health_snapshot() -> dict[str, Any]:
    failed = [{"type": "HealthCheckFailed", "status": "True", "reason": "HealthCheckFailed",
               "message": "health check gpus-available failed on node gpu-7: value 0 (query "
                          'min(mx_gpu_state{Hostname="gpu-7"}))',
               "lastTransitionTime": "2026-11-30T09:58:00Z"}]
    snap = snapshot(conditions=failed)
    del snap["upgradeStatus"]["status"]["recheckTime"]  # the helper's '' is no time
    snap["upgradeStatus"]["health"] = {"checks": {
        "gpus-available": {"node": "gpu-7", "state": "Failed", "value": "0",
                           "since": "2026-11-30T09:53:00Z"},
        "no-throttling": {"state": "Waiting", "value": "no sample",
                          "since": "2026-11-30T09:57:00Z"},
    }}
    return snap


def test_status_shows_each_checks_last_value_and_verdict(tmp_path: Path) -> None:
    repo = tmp_path / "policy"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "status").mkdir()
    text = render_status(health_snapshot())
    assert validate_status_snapshot(text, "status/prod-a.yaml").ok
    (repo / "status" / "prod-a.yaml").write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x",
                    "commit", "-q", "-m", "status"], check=True)
    runner = CliRunner()
    shown = runner.invoke(cli, ["status", "--repo", str(repo), "--cluster", "prod-a"],
                          env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "health checks" in shown.output
    row = next(line for line in shown.output.splitlines()
               if line.startswith("│ gpus-available"))
    assert "gpu-7" in row and "Failed" in row and " 0 " in row
    assert any("no-throttling" in line and "(step)" in line and "no sample" in line
               for line in shown.output.splitlines())
    assert "HealthCheckFailed" in shown.output  # the condition table names it
    data = runner.invoke(cli, ["status", "--repo", str(repo), "--cluster", "prod-a",
                               "--format", "json"])
    parsed = json.loads(data.output)
    assert parsed["healthChecks"][0] == {"check": "gpus-available", "node": "gpu-7",
                                         "state": "Failed", "value": "0",
                                         "since": "2026-11-30T09:53:00Z"}
