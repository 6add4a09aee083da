"""`reconciler dev-cluster up --prometheus` as a person uses it, in real processes."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from reconciler.sim.waiting import wait_for
from tests.sim.test_dev_cluster import RECONCILER, alive, descendants, reconciler


def query(url: str, expr: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(
        f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=10
    ) as response:
        result: list[dict[str, Any]] = json.load(response)["data"]["result"]
        return result


@pytest.mark.cluster
def test_up_with_prometheus_prints_its_url_before_the_kubeconfig_and_down_stops_it(
    tmp_path: Path,
) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text("faults:\n  - {node: node-0002, fault: gpu-unavailable}\n")
    state = tmp_path / "dev"
    up = subprocess.Popen(
        [*RECONCILER, "dev-cluster", "up", "--nodes", "2", "--install-seconds", "0.2",
         "--faults", str(faults), "--prometheus", "--dir", str(state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
    )
    try:
        assert up.stdout is not None and up.stderr is not None
        line = up.stdout.readline().strip()
        # Whatever stderr holds once the kubeconfig line is out was written before it.
        fcntl.fcntl(up.stderr, fcntl.F_SETFL, fcntl.fcntl(up.stderr, fcntl.F_GETFL) | os.O_NONBLOCK)
        before = up.stderr.read() or ""
        assert line == str(state / "kubeconfig"), before
        announced = [text for text in before.splitlines() if "prometheus" in text]
        assert len(announced) == 1, before
        url = next(word for word in announced[0].split() if word.startswith("http://"))
        assert url.startswith("http://127.0.0.1:")

        # Scraped already when announced; the fault file's GPU fault shows, its pod is Ready.
        assert [r["value"][1] for r in query(url, 'up{job="mx-exporter"}')] == ["1"]
        states = {r["metric"]["Hostname"]: r["value"][1]
                  for r in query(url, "min by (Hostname) (mx_gpu_state)")}
        assert states == {"node-0001": "1", "node-0002": "0"}
        assert "2/2 driver pods Ready" in before

        spawned = descendants(up.pid)
        stopped = reconciler("dev-cluster", "down", "--dir", str(state))
        assert stopped.returncode == 0, stopped.stderr
        assert up.wait(60) == 0
        wait_for(lambda: not any(alive(p) for p in spawned), timeout=10,
                 what="every process of the dev cluster gone, Prometheus included",
                 observe=lambda: [p for p in spawned if alive(p)])
        assert (state / "prometheus" / "prometheus.log").exists()
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def test_up_with_prometheus_but_no_server_installed_fails_before_starting_anything(
    tmp_path: Path,
) -> None:
    state = tmp_path / "dev"
    result = subprocess.run(
        [*RECONCILER, "dev-cluster", "up", "--nodes", "1", "--prometheus", "--dir", str(state)],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PROMETHEUS_BIN": str(tmp_path / "no-prometheus")},
    )
    assert result.returncode == 1
    assert f"no Prometheus server at {tmp_path / 'no-prometheus'}" in result.stderr
    assert "scripts/install" in result.stderr and "Traceback" not in result.stderr
    assert not state.exists()  # no control plane was started
