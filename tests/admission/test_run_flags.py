"""`reconciler run --admission-*` usage: mistakes are usage errors naming the flag, in a child
process under an address-space limit, before anything starts."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

RECONCILER = [sys.executable, "-m", "reconciler.cli.main", "run", "--role", "controller",
              "--ops-listen", "off"]
ADDRESS_SPACE = 2 * 1024 ** 3

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    return subprocess.run([*RECONCILER, "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          preexec_fn=_limit)


@pytest.mark.parametrize(("args", "words"), [
    (["--admission-listen", "127.0.0.1:0"], "--admission-listen needs either --admission-cert-dir"),
    (["--admission-listen", "127.0.0.1:0", "--admission-cert-dir", ".", "--admission-self-signed"],
     "--admission-listen needs either --admission-cert-dir"),
    (["--admission-listen", "nonsense", "--admission-cert-dir", "."],
     "Invalid value for --admission-listen: listen address 'nonsense' must be HOST:PORT"),
    (["--admission-listen", "127.0.0.1:0", "--admission-cert-dir", "{empty}"],
     "no tls.crt and tls.key"),
    (["--admission-listen", "127.0.0.1:0", "--admission-cert-dir", "{garbage}"],
     "cannot load tls.crt/tls.key"),
])
def test_admission_flag_mistakes_are_usage_errors(
        tmp_path: Path, args: list[str], words: str) -> None:
    empty, garbage = tmp_path / "empty", tmp_path / "garbage"
    empty.mkdir()
    garbage.mkdir()
    (garbage / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\nAAAA\n")
    (garbage / "tls.key").write_text("not a key")
    args = [a.format(empty=empty, garbage=garbage) for a in args]
    done = _run(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
    assert "Traceback" not in done.stderr
