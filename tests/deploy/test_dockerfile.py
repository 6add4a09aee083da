"""The Dockerfile, as far as a machine without a container engine can check it: hadolint, its
structure, and its build stage's own RUN step executed on a copy of the build context."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reconciler.sim.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        keyword, _, rest = whole.partition(" ")
        found.append((keyword.upper(), rest.strip()))
    return found


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, rest))
    return result


def test_hadolint_finds_nothing() -> None:
    lint = subprocess.run([str(HADOLINT), "--failure-threshold", "style", str(DOCKERFILE)],
                          capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_multi_stage_from_a_pinned_slim_base() -> None:
    args = dict(rest.split("=", 1) for keyword, rest in instructions() if keyword == "ARG")
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+", args["PYTHON_IMAGE"])
    build, runtime = stages()
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build")
    assert runtime[0] == ("FROM", "${PYTHON_IMAGE}")
    assert ("COPY", "--from=build /opt/reconciler /opt/reconciler") in runtime


def test_runtime_has_git_a_non_root_user_and_a_health_check_on_healthz() -> None:
    runtime = stages()[-1]
    runs = " ".join(rest for keyword, rest in runtime if keyword == "RUN")
    assert re.search(r"apt-get install .*\bgit\b", runs)
    users = [rest for keyword, rest in runtime if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    health = [rest for keyword, rest in runtime if keyword == "HEALTHCHECK"]
    assert len(health) == 1 and "/healthz" in health[0]
    assert ("ENTRYPOINT", '["reconciler"]') in runtime


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for the patterns used here (last match wins, ! re-includes)."""
    verdict = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        pattern = pattern.removeprefix("**/")
        parts = path.split("/")
        if any(fnmatch.fnmatch("/".join(parts[:i + 1]), pattern) for i in range(len(parts))) \
                or fnmatch.fnmatch(parts[-1], pattern):
            verdict = not negate
    return verdict


def _build_context(target: Path) -> None:
    """The files `docker build .` would send, per .dockerignore."""
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in tracked.splitlines():
        if (ROOT / name).is_file() and not _ignored(name, patterns):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)


@pytest.mark.slow
def test_the_build_stage_run_step_makes_a_working_install(tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    _build_context(context)
    assert not (context / ".venv").exists() and not (context / "tests").exists()
    build = stages()[0]
    src = tmp_path / "src"
    src.mkdir()
    for keyword, rest in build:
        if keyword == "COPY":
            *sources, dest = rest.split()
            for source in sources:
                origin = context / source.rstrip("/")
                assert origin.exists(), f"COPY {source}: not in the build context"
                if origin.is_dir():
                    shutil.copytree(origin, src / dest.rstrip("/"))
                else:
                    shutil.copy2(origin, src / dest if dest != "./" else src / origin.name)
    [run] = [rest for keyword, rest in build if keyword == "RUN"]
    prefix = tmp_path / "opt-reconciler"
    script = (run.replace("/opt/reconciler", str(prefix)).replace("/dist", str(tmp_path / "dist"))
              .replace("python -m", f"{sys.base_prefix}/bin/python3 -m"))
    done = subprocess.run(["sh", "-ec", script], cwd=src, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    # the installed command, away from the source tree: the schemas come from the wheel
    repo = tmp_path / "policy"
    shutil.copytree(ROOT / "examples-repo", repo)
    validate = subprocess.run([str(prefix / "bin" / "reconciler"), "validate", str(repo)],
                              cwd=tmp_path, capture_output=True, text=True, check=False)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "file(s) valid" in validate.stdout + validate.stderr
    schema_file = prefix / "share" / "gpu-gitops-reconciler" / "schemas"
    assert (schema_file / "clusteroperator.schema.json").is_file()
    # the vendor's CRD and rendered object are package data (reconciler/data/)
    data = prefix.glob("lib/python*/site-packages/reconciler/data/metax-operator-0.15.2/*")
    assert {p.name for p in data} == {"gpu.metax-tech.com_clusteroperators.yaml",
                                      "cluster-operator.yaml", "SOURCE.md"}
    version = subprocess.run([str(prefix / "bin" / "reconciler"), "--version"],
                             capture_output=True, text=True, check=True)
    assert "reconciler" in version.stdout


def _healthcheck_command() -> list[str]:
    [health] = [rest for keyword, rest in stages()[-1] if keyword == "HEALTHCHECK"]
    exec_form = health[health.index("CMD") + 3:].strip()
    command: list[str] = json.loads(exec_form)
    return command


@pytest.mark.cluster
def test_the_health_check_command_passes_on_a_live_daemon_and_fails_without(
    audited_plane: Any, tmp_path: Path
) -> None:
    """The image's HEALTHCHECK, run as is (port moved to a free one) against `reconciler run`."""
    from reconciler.sim.control_plane import free_ports

    [port] = free_ports(1)
    command = [part.replace("127.0.0.1:8080", f"127.0.0.1:{port}") for part in
               _healthcheck_command()]
    assert command[0] == "python"
    command[0] = sys.executable
    log = (tmp_path / "daemon.log").open("wb")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "reconciler.cli.main", "run", "--role", "controller",
         "--kubeconfig", str(audited_plane.kubeconfig), "--ops-listen", f"127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def healthy() -> bool:
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()
            return subprocess.run(command, capture_output=True, check=False).returncode == 0

        wait_for(healthy, timeout=30, what="the HEALTHCHECK passing",
                 observe=(tmp_path / "daemon.log").read_text, interval=0.2)
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(30)
        log.close()
    assert subprocess.run(command, capture_output=True, check=False).returncode != 0
