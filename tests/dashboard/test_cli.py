"""``reconciler dashboard`` as a child process: usage errors, the loopback warning, read-only
serving against the dev cluster, and a clean stop on SIGTERM."""

from __future__ import annotations

import http.client
import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.sim.control_plane import ControlPlane

LIMIT = 2 * 1024 ** 3


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "reconciler.cli.main", "dashboard", *args]


@pytest.mark.parametrize(("args", "message"), [
    (["--cluster", "lab", "--kubeconfig", "/nonexistent/kubeconfig"],
     "cannot use kubeconfig /nonexistent/kubeconfig"),
    (["--cluster", "lab", "--kubeconfig", "K", "--listen", "localhost"],
     "listen address 'localhost' must be HOST:PORT"),
    (["--cluster", "lab", "--kubeconfig", "K", "--listen", "127.0.0.1:70000"],
     "port 70000 is out of range"),
    (["--kubeconfig", "K"], "Missing option '--cluster'"),
])
def test_usage_errors_exit_2_with_the_reason(args: list[str], message: str,
                                             tmp_path: Path) -> None:
    args = [str(tmp_path / "kubeconfig") if a == "K" else a for a in args]
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    run = subprocess.run(_command(*args), capture_output=True, text=True, timeout=60,
                         preexec_fn=_limit, env={"PATH": "/usr/bin:/bin"})
    assert run.returncode == 2, run.stderr
    assert message in run.stderr


@pytest.mark.cluster
def test_a_repository_that_is_not_one_is_a_usage_error(tmp_path: Path,
                                                       control_plane: ControlPlane) -> None:
    run = subprocess.run(
        _command("--cluster", "lab", "--kubeconfig", str(control_plane.kubeconfig),
                 "--repo", str(tmp_path / "missing")),
        capture_output=True, text=True, timeout=60, preexec_fn=_limit)
    assert run.returncode == 2
    assert "is not a Git repository" in run.stderr


@pytest.mark.cluster
def test_serves_read_only_warns_beyond_loopback_and_stops_on_sigterm(
        control_plane: ControlPlane) -> None:
    child = subprocess.Popen(
        _command("--cluster", "lab", "--kubeconfig", str(control_plane.kubeconfig),
                 "--listen", "0.0.0.0:0", "--cluster-operator", "no-such-object"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_limit)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert "dashboard of lab (ClusterOperator no-such-object) at http://" in line
        port = int(line.rstrip().rstrip("/").rsplit(":", 1)[1])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/api/view")
        answer = connection.getresponse()
        body = json.loads(answer.read())
        assert answer.status == 200
        assert answer.getheader("Content-Security-Policy", "").startswith("default-src 'none'")
        assert body["view"]["found"] is False
        assert body["view"]["error"] == "no ClusterOperator 'no-such-object'"
        assert body["view"]["audit"] is None  # no --repo: no Git sections
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request(method, "/api/view", body=b"{}")
            refused = connection.getresponse()
            assert refused.status == 405, method
            assert refused.read() == b"the dashboard is read-only\n"
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/")
        page = connection.getresponse()
        assert page.status == 200 and b"/static/app.js" in page.read()
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 0
        assert child.stderr is not None
        assert "warning: the dashboard listens on 0.0.0.0, beyond this machine" in \
            child.stderr.read()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.cluster
@pytest.mark.slow
def test_demo_serves_the_dashboard_of_its_rollout(tmp_path: Path) -> None:
    import os
    import threading
    import time

    child = subprocess.Popen(
        [sys.executable, "-m", "reconciler.cli.main", "demo", "--plain", "--install-seconds",
         "1", "--review-seconds", "4", "--timeout", "400", "--workdir", str(tmp_path),
         "--dashboard", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    lines: list[str] = []
    assert child.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(child.stdout or ()), daemon=True)
    reader.start()
    seen: dict[str, set[str]] = {"kinds": set(), "waiting": set(), "phases": set()}
    try:
        url = None
        deadline = time.monotonic() + 300
        while child.poll() is None and time.monotonic() < deadline:
            if url is None:
                url = next((line.split("dashboard: ", 1)[1].split()[0] for line in list(lines)
                            if "dashboard: http://" in line), None)
            if url is not None:
                host, port = url.removeprefix("http://").rstrip("/").split(":")
                try:
                    connection = http.client.HTTPConnection(host, int(port), timeout=10)
                    connection.request("GET", "/api/view")
                    view = json.loads(connection.getresponse().read())["view"]
                except (OSError, ValueError):
                    view = None  # the demo is ending
                if view is not None and view["found"]:
                    seen["phases"].add(view["header"]["phase"])
                    seen["waiting"] |= {w["kind"] for w in view["waiting"]}
                    seen["kinds"] |= {a["kind"] for a in view["audit"] or ()}
            time.sleep(0.3)
        assert child.wait(timeout=120) == 0, "".join(lines)[-4000:]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    reader.join(timeout=10)
    out = "".join(lines)
    assert url is not None, out[-3000:]
    assert out.index("dashboard: http://") < out.index("Alice merged pull request #1")
    assert "Progressing" in seen["phases"]
    assert "gate" in seen["waiting"]
    assert {"version", "write-back", "status", "gate-release"} <= seen["kinds"], seen
