#!/usr/bin/env python3
"""Git side of merge-to-apply latency, and status commit budget (issue 6, performance).

Figures (real git, loopback only):
1. local commit in a watched working copy -> new commit reported by the Git source (watchdog);
2. push to a ``git daemon`` on 127.0.0.1 -> ``trigger()`` -> fetched and reported;
3. a terminal status snapshot offered -> its commit pushed to the remote (background threads);
4. status commits for one 3-step rollout, replayed through the writer's decision rules on a
   virtual clock, slow steps (minutes) and fast steps (simulator speed), against the budget
   3 x steps + 3.
The ClusterOperator update after a commit is reported is the sync loop's and is not measured here.

Usage: bench/gitops_latency.py [--samples 20]
"""

from __future__ import annotations

import argparse
import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reconciler.gitops.mirror import Mirror
from reconciler.gitops.publisher import Publisher
from reconciler.gitops.source import CommitSource, NewCommit
from reconciler.gitops.status_policy import (
    WriterState,
    WriterTiming,
    committed,
    due_at,
    observe,
)
from reconciler.gitops.status_writer import StatusWriter


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def setup(root: Path) -> tuple[Path, Path]:
    os.environ["GIT_CONFIG_GLOBAL"] = str(root / "gitconfig")
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    (root / "gitconfig").write_text(
        "[user]\n\tname = Bench\n\temail = bench@example.com\n[init]\n\tdefaultBranch = main\n")
    bare = root / "srv" / "policy.git"
    bare.parent.mkdir()
    git(root, "init", "-q", "--bare", str(bare))
    work = root / "work"
    git(root, "clone", "-q", str(bare), str(work))
    (work / "README.md").write_text("bench\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "seed")
    git(work, "push", "-q", "origin", "HEAD:main")
    return bare, work


def local_watch(root: Path, work: Path, samples: int) -> list[float]:
    events: queue.Queue[NewCommit] = queue.Queue()
    source = CommitSource(Mirror(str(work), root / "state-local"), ["main"], events.put,
                          interval=3600, watch=work)
    source.start()
    events.get(timeout=30)
    latencies = []
    try:
        for i in range(samples):
            (work / "README.md").write_text(f"local {i}\n")
            git(work, "add", "-A")
            started = time.perf_counter()
            git(work, "commit", "-q", "-m", f"local {i}")
            sha = git(work, "rev-parse", "HEAD")
            while events.get(timeout=30).sha != sha:
                pass
            latencies.append(time.perf_counter() - started)
            time.sleep(0.1)
    finally:
        source.stop()
    git(work, "push", "-q", "origin", "HEAD:main")
    return latencies


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def daemon_trigger(root: Path, bare: Path, work: Path, samples: int) -> list[float]:
    port = free_port()
    daemon = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
         f"--base-path={bare.parent}", "--listen=127.0.0.1", f"--port={port}", str(bare.parent)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        events: queue.Queue[NewCommit] = queue.Queue()
        source = CommitSource(Mirror(f"git://127.0.0.1:{port}/policy.git", root / "state-d"),
                              ["main"], events.put, interval=3600)
        source.start()
        events.get(timeout=30)
        latencies = []
        try:
            for i in range(samples):
                (work / "README.md").write_text(f"push {i}\n")
                git(work, "commit", "-qam", f"push {i}")
                git(work, "push", "-q", "origin", "HEAD:main")  # the merge lands
                sha = git(work, "rev-parse", "HEAD")
                started = time.perf_counter()
                source.trigger()  # what the webhook does
                while events.get(timeout=30).sha != sha:
                    pass
                latencies.append(time.perf_counter() - started)
        finally:
            source.stop()
    finally:
        daemon.terminate()
        daemon.wait(10)
    return latencies


def status_push(root: Path, bare: Path, samples: int) -> list[float]:
    state = root / "state-status"
    publisher = Publisher(Mirror(bare.as_uri(), state), "main", state_dir=state)
    writer = StatusWriter(publisher, "bench", timing=WriterTiming(min_interval=5.0))
    publisher.start()
    writer.start()
    latencies = []
    try:
        for i in range(samples):
            before = git(bare, "rev-parse", "main")
            started = time.perf_counter()
            phase = "Idling" if i % 2 == 0 else "Disabled"
            writer.offer({"sourceCommit": before, "upgradeStatus": {
                "phase": phase, "status": {"currentStepIndex": 0,
                                           "currentStepState": "Completed"}}})
            while git(bare, "rev-parse", "main") == before:
                time.sleep(0.005)
            latencies.append(time.perf_counter() - started)
    finally:
        writer.stop()
        publisher.stop()
    return latencies


def rollout_commits(step_seconds: float, pause_seconds: float, steps: int = 3) -> int:
    """Status commits of one rollout: every state of every step, through the decision rules."""
    def snap(step: int, state: str, phase: str = "Progressing") -> dict[str, Any]:
        return {"upgradeStatus": {"phase": phase, "status": {
            "currentStepIndex": step, "currentStepState": state}}}

    timeline: list[tuple[float, dict[str, Any]]] = []
    t = 0.0
    for step in range(1, steps + 1):
        for state, duration in (("StepUpgradeInit", 0.05), ("StepUpgrade", step_seconds),
                                ("StepPaused", pause_seconds), ("StepReady", 0.05)):
            timeline.append((t, snap(step, state)))
            t += duration
    timeline.append((t, snap(steps, "Completed", "Idling")))
    timing = WriterTiming()
    state = WriterState(committed_key=None)
    state = observe(state, snap(0, "Completed", "Idling"), -1.0)
    state = committed(state, -1.0)
    commits, index, now = 0, 0, 0.0
    while now <= t + 60:
        while index < len(timeline) and timeline[index][0] <= now:
            state = observe(state, timeline[index][1], now)
            index += 1
        due = due_at(state, timing)
        if due is not None and due <= now:
            state = committed(state, now)
            commits += 1
        now += 0.05
    return commits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-gitops-") as tmp:
        root = Path(tmp)
        bare, work = setup(root)
        local = local_watch(root, work, args.samples)
        pushed = daemon_trigger(root, bare, work, args.samples)
        status = status_push(root, bare, max(4, args.samples // 2))
    for name, values in (("local commit -> reported (watch)", local),
                         ("git daemon push -> trigger -> reported", pushed),
                         ("terminal status -> pushed", status)):
        p50 = statistics.median(values) * 1000
        rows.append((f"{name} p50 (ms)", "< 1000", f"{p50:.1f}", f"{p50 / 1000:.3f}"))
        rows.append((f"{name} p95 (ms)", "-", f"{pct(values, 95) * 1000:.1f}", "-"))
    budget = 3 * 3 + 3
    for label, step_s, pause_s in (("slow steps (10 min, 5 min pause)", 600.0, 300.0),
                                   ("fast steps (2 s, no pause)", 2.0, 0.0),
                                   ("steps of 6 s, 6 s pause", 6.0, 6.0)):
        n = rollout_commits(step_s, pause_s)
        rows.append((f"status commits, 3-step rollout, {label}", f"<= {budget}", str(n),
                     f"{n / budget:.2f}"))
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'goal':>8}  {'measured':>9}  {'ratio':>6}")
    for figure, goal, measured, ratio in rows:
        print(f"{figure:<{width}}  {goal:>8}  {measured:>9}  {ratio:>6}")


if __name__ == "__main__":
    main()
