"""scripts/install-gitea: built once into the cache (a second run builds nothing), and only on
the tests' install path, never the demo's."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.gitops.gitea import gitea_home

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-gitea"


def test_a_second_run_finds_the_build_in_the_cache_and_builds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    version = re.search(r"GITEA_VERSION:-([\d.]+)", SCRIPT.read_text())
    assert version
    home = tmp_path / "cache" / f"gitea-{version.group(1)}"
    (home / "bin").mkdir(parents=True)
    (home / "static" / "templates").mkdir(parents=True)
    (home / "bin" / "gitea").write_text("#!/bin/sh\nexit 1\n")
    (home / "bin" / "gitea").chmod(0o755)
    env = {**os.environ, "RECONCILER_CACHE": str(tmp_path / "cache")}
    result = subprocess.run([str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60,
                            check=False)
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr == f"[install-gitea] cached gitea in {home / 'bin'}\n"
    # the tests' helper finds the same build
    monkeypatch.setenv("RECONCILER_CACHE", str(tmp_path / "cache"))
    assert gitea_home() == home

def test_the_install_builds_gitea_for_the_tests_only() -> None:
    install = (ROOT / "scripts" / "install").read_text()
    assert 'if [ -z "$demo" ]; then scripts/install-gitea; fi' in install
