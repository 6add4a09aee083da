"""A listener whose port another process holds (a second daemon on the same host): the command
exits 2 with one line naming the port and the flag that moves it, never a traceback. Each case
runs the real command as a process; the port is held by a listening socket of this test."""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.admission.certificates import issue_ca, issue_serving, write_cert_dir
from reconciler.ops.http_server import listen_failure

ROOT = Path(__file__).resolve().parents[2]

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}
users:
- name: nobody
  user: {token: not-a-token}
contexts:
- name: nowhere
  context: {cluster: nowhere, user: nobody}
current-context: nowhere
"""


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port another process listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield int(holder.getsockname()[1])


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A cluster nobody answers for: the listeners start before anything talks to it."""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return path


def reconciler(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
    env.update(PYTHONPATH=str(ROOT), RECONCILER_WEBHOOK_SECRET="s3cret")
    return subprocess.run([sys.executable, "-m", "reconciler.cli.main", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def assert_one_line(done: subprocess.CompletedProcess[str], *, port: int, flag: str,
                    off: bool = False) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert lines, "nothing said"
    # the daemon may have logged its start before; the refusal is the last line, and alone
    last = lines[-1]
    assert last.startswith("Error: "), done.stderr
    assert [line for line in lines if line.startswith("Error")] == [last]
    assert f"port {port} is already in use" in last
    assert f"give it another with {flag} HOST:PORT" in last
    assert (f"or {flag} off" in last) is off


def test_the_ops_port_taken_by_a_second_daemon(tmp_path: Path, taken: int,
                                               kubeconfig: Path) -> None:
    done = reconciler("run", "--role", "controller", "--kubeconfig", str(kubeconfig),
                      "--ops-listen", f"127.0.0.1:{taken}", cwd=tmp_path)
    assert_one_line(done, port=taken, flag="--ops-listen", off=True)
    # nothing before it either: the ops server is the first thing the daemon starts
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr == (f"Error: --ops-listen 127.0.0.1:{taken}: port {taken} is already in "
                           "use (another process listens on it, e.g. a second reconciler on "
                           f"this host); give it another with --ops-listen HOST:PORT or "
                           "--ops-listen off\n")


def test_the_webhook_port_taken(tmp_path: Path, taken: int, kubeconfig: Path) -> None:
    repo = tmp_path / "policy"
    subprocess.run(["git", "init", "--quiet", str(repo)], check=True)
    done = reconciler("run", "--role", "sync", "--repo", str(repo), "--cluster", "lab",
                      "--state-dir", str(tmp_path / "state"), "--kubeconfig", str(kubeconfig),
                      "--ops-listen", "off", "--webhook-listen", f"127.0.0.1:{taken}",
                      cwd=tmp_path)
    assert_one_line(done, port=taken, flag="--webhook-listen")
    # refused before any role started
    assert "syncing" not in done.stderr, done.stderr


def test_the_admission_port_taken_with_a_mounted_certificate(tmp_path: Path, taken: int,
                                                             kubeconfig: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    certs = tmp_path / "tls"
    certs.mkdir()
    write_cert_dir(certs, issue_serving(issue_ca("test CA", now=now), ["127.0.0.1"], now=now))
    done = reconciler("run", "--role", "controller", "--kubeconfig", str(kubeconfig),
                      "--ops-listen", "off", "--admission-listen", f"127.0.0.1:{taken}",
                      "--admission-cert-dir", str(certs), cwd=tmp_path)
    assert_one_line(done, port=taken, flag="--admission-listen")


def test_the_admission_port_taken_with_self_issued_certificates(tmp_path: Path, taken: int,
                                                                kubeconfig: Path) -> None:
    """Its listener starts only once the certificates exist: the port is tried at start."""
    done = reconciler("run", "--role", "controller", "--kubeconfig", str(kubeconfig),
                      "--state-dir", str(tmp_path / "state"), "--ops-listen", "off",
                      "--admission-listen", f"127.0.0.1:{taken}", "--admission-self-signed",
                      cwd=tmp_path)
    assert_one_line(done, port=taken, flag="--admission-listen")


def test_the_dashboard_port_taken(tmp_path: Path, taken: int, kubeconfig: Path) -> None:
    done = reconciler("dashboard", "--cluster", "lab", "--kubeconfig", str(kubeconfig),
                      "--listen", f"127.0.0.1:{taken}", cwd=tmp_path)
    assert_one_line(done, port=taken, flag="--listen")


def test_other_bind_failures_name_the_flag_too() -> None:
    refused = OSError(13, "Permission denied")
    assert listen_failure(refused, flag="--ops-listen", address=":80", off=True) == (
        "--ops-listen :80: not allowed to listen on port 80 (below 1024 needs privileges); "
        "give it another with --ops-listen HOST:PORT or --ops-listen off")
    foreign = OSError(99, "Cannot assign requested address")
    assert listen_failure(foreign, flag="--listen", address="10.9.9.9:8090") == (
        "--listen 10.9.9.9:8090: 10.9.9.9 is not an address of this host; give it another "
        "with --listen HOST:PORT")
    odd = OSError(24, "Too many open files")
    assert listen_failure(odd, flag="--webhook-listen", address="127.0.0.1:9000") == (
        "--webhook-listen 127.0.0.1:9000: cannot listen on port 9000: Too many open files; "
        "give it another with --webhook-listen HOST:PORT")
