#!/usr/bin/env python3
"""Benchmark: ``reconciler plan --against main`` on a repository of 100 clusters with one
changed (issue 33, performance).

Each cluster has a full-install-sized policy file (every spec section) and a status snapshot
with ``fleet: {nodes, installSeconds}``; the pull request bumps one cluster's driver version,
so the plan validates that cluster's files against main, resolves its steps and runs the
simulator on its fleet (``--nodes``, default 1,000). Goal: the whole process (start, imports,
Git, validation, the simulated rollout, the markdown comment) under 3 s, median of several runs.

Usage: bench/plan_scale.py [--clusters 100] [--nodes 1000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
if VENV_PYTHON.exists() and Path(sys.executable) != VENV_PYTHON and "VIRTUAL_ENV" not in \
        os.environ:
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), *sys.argv])

FULL_INSTALL = ROOT / "examples-repo" / "clusters" / "prod-100" / "cluster-operator.yaml"
GOAL_S = 3.0
OLD, NEW = "2.32.0.6", "2.33.0.9"


def snapshot(cluster: str, nodes: int) -> str:
    """A status snapshot (JSON is YAML) of an idle cluster whose last rollout measured its
    fleet."""
    return json.dumps({
        "cluster": cluster, "observedAt": "2026-11-30T00:00:00Z",
        "upgradeStatus": {"phase": "Idling", "status": {
            "currentStepIndex": 4, "currentStepState": "Completed",
            "totalUpgradeReplicas": nodes}},
        "lastRollout": {"version": OLD, "result": "Completed",
                        "finishedAt": "2026-11-20T00:00:00Z"},
        "fleet": {"nodes": nodes, "installSeconds": 42.5},
        "spec": {"driver": {"payload": {"registry": "registry.example.com/metax",
                                        "name": "driver-image", "version": OLD}}},
    }, indent=1) + "\n"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=Bench", "-c", "user.email=bench@example.com",
                    *args], cwd=cwd, check=True, capture_output=True)


def write_repository(root: Path, clusters: int, nodes: int) -> str:
    """The repository on ``main`` and a branch that bumps one cluster; returns its name."""
    policy = FULL_INSTALL.read_text()
    (root / "status").mkdir(parents=True)
    (root / "reconciler.yaml").write_text("clustersDir: clusters\nstatus: {path: status}\n")
    for index in range(clusters):
        name = f"c{index:03d}"
        folder = root / "clusters" / name
        folder.mkdir(parents=True)
        (folder / "cluster-operator.yaml").write_text(policy)
        (root / "status" / f"{name}.yaml").write_text(snapshot(name, nodes))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the fleet")
    git(root, "checkout", "-q", "-b", "bump")
    changed = f"c{clusters // 2:03d}"
    path = root / "clusters" / changed / "cluster-operator.yaml"
    text = path.read_text()
    assert f"version: {OLD}" in text
    path.write_text(text.replace(f"version: {OLD}", f"version: {NEW}", 1))
    return changed


#: CPU seconds (user + system) of each child run, beside its wall time: on a shared machine
#: the wall time also counts the time other processes hold the cores
CPU: list[float] = []


def run(command: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return seconds, done


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    command = [sys.executable, "-c", "from reconciler.cli.main import main; main()", "plan",
               "--against", "main"]
    with tempfile.TemporaryDirectory(prefix="plan-scale-") as tmp:
        root = Path(tmp) / "repo"
        changed = write_repository(root, args.clusters, args.nodes)
        run([*command, "--format", "markdown"], root)  # warm the page cache
        times = []
        CPU.clear()
        for _ in range(args.runs):
            seconds, done = run([*command, "--format", "markdown"], root)
            if done.returncode != 0 or f"### {changed}: starts a rollout" not in done.stdout:
                print(done.stdout + done.stderr, file=sys.stderr)
                return 1
            times.append(seconds)
        cpu = list(CPU)
        json_times = [run([*command, "--format", "json"], root)[0] for _ in range(args.runs)]
        startup = [run([*command[:3], "plan", "--help"], root)[0] for _ in range(args.runs)]
    median = statistics.median(times)
    rows = [
        (f"plan, {args.clusters} clusters, one changed ({args.nodes} nodes), markdown, whole "
         f"process (median of {args.runs})", f"< {GOAL_S:.1f} s", f"{median:.2f} s",
         f"{median / GOAL_S:.2f}"),
        ("  CPU seconds of the same runs (user + system)", "-",
         f"{statistics.median(cpu):.2f} s", "-"),
        ("  same, --format json", "-", f"{statistics.median(json_times):.2f} s", "-"),
        ("  process start + imports (plan --help)", "-", f"{statistics.median(startup):.2f} s",
         "-"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"repository: {args.clusters} clusters (full-install policy files, status snapshots "
          f"with fleet), {changed} bumped {OLD} -> {NEW}; {os.cpu_count()} cores, load "
          f"average {os.getloadavg()[0]:.1f}")
    print(f"{'figure':<{width}}  {'goal':>8}  {'measured':>10}  {'ratio':>6}")
    for figure, goal, measured, ratio in rows:
        print(f"{figure:<{width}}  {goal:>8}  {measured:>10}  {ratio:>6}")
    print(f"runs (s): {', '.join(f'{t:.2f}' for t in times)}")
    return 0 if median < GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
