"""`reconciler demo` as a newcomer runs it: the whole story without a terminal, and Ctrl-C
half-way leaving nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.sim.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DEMO = [sys.executable, "-m", "reconciler.cli.main", "demo", "--plain"]


def _processes_mentioning(text: str) -> dict[int, str]:
    """Live processes whose command line mentions ``text`` (the demo's work directory is in the
    arguments of etcd, kube-*, the reconciler and git)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text()
        except OSError:
            continue
        if text in cmdline and state[state.rindex(")") + 2] != "Z":
            found[int(entry.name)] = cmdline
    return found


def test_the_whole_demo_runs_non_interactively(tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [*DEMO, "--install-seconds", "1", "--review-seconds", "1", "--timeout", "400",
         "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=480, check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    # the story, in order
    story = [
        "control plane up",
        "10 GPU nodes Ready on 2.32.0.6",
        "policy repository created from examples-repo/",
        "the reconciler applied clusters/lab-10/cluster-operator.yaml",
        "admission webhook registered (https://127.0.0.1:",
        "pull request #1 (2.32.0.6 -> 2.33.0.9)",
        "Alice merged pull request #1",
        "paused at the manual gate",
        "mid-rollout: refused by the API server: Error from server (Forbidden): admission "
        'webhook "clusteroperators.gpu.metax-tech.com" denied the request: '
        "/spec/driver/upgradePolicy/maxParallel: driver.upgradePolicy.maxParallel cannot change "
        "while the rollout is Progressing",
        "Bob released the gate after step 1",
        "rollout completed: 10/10 nodes on 2.33.0.9",
        "the audit trail",
        "done in",
    ]
    positions = [out.find(line) for line in story]
    assert all(p >= 0 for p in positions), [s for s, p in zip(story, positions, strict=True)
                                            if p < 0]
    assert positions == sorted(positions)
    assert "simulated driver install: 1 s per node (a real one takes minutes)" in out
    assert "to watch it in a browser as well: reconciler demo --dashboard" in out
    # the audit trail: the merge, the reconciler's write-back and status commits, the release
    trail = out[out.find("the audit trail"):]
    assert "Alice Ops: Merge pull request #1: upgrade lab-10 to 2.33.0.9" in trail
    assert "Bob Reviewer: lab-10: release the rollout after step 1" in trail
    reconciler_commits = [line for line in trail.splitlines() if "gpu-gitops-reconciler:" in line]
    assert len(reconciler_commits) >= 3, trail
    # newest first
    assert trail.index("Bob Reviewer") < trail.index("Alice Ops: Merge pull request #1")
    assert "Completed" in trail
    # everything the demo made is gone, processes included
    assert list(tmp_path.iterdir()) == []
    assert _processes_mentioning(str(tmp_path)) == {}
    print(f"demo took {time.monotonic() - started:.0f} s")


def test_ctrl_c_half_way_leaves_no_process_behind(tmp_path: Path) -> None:
    log = tmp_path.parent / f"{tmp_path.name}.out"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [*DEMO, "--install-seconds", "2", "--review-seconds", "30", "--workdir",
             str(tmp_path)],
            stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
        )
    try:
        def half_way() -> bool:
            assert demo.poll() is None, log.read_text()[-4000:]
            return "Bob checks the canary nodes" in log.read_text()

        wait_for(half_way, timeout=300, what="the demo half way",
                 observe=lambda: log.read_text()[-4000:], interval=0.2)
        # mid-rollout: the control plane, the fleet and the daemon all run
        running = _processes_mentioning(str(tmp_path))
        names = " ".join(running.values())
        for part in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                     "reconciler.cli.main run"):
            assert part in names, (part, running)
        # Ctrl-C in a terminal: SIGINT to the foreground process group
        os.killpg(demo.pid, signal.SIGINT)
        code = demo.wait(90)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(10)
    text = log.read_text()
    assert code == 130, text[-4000:]
    assert "interrupted: everything the demo started is stopped" in text
    assert "Traceback" not in text, text[-4000:]
    assert _processes_mentioning(str(tmp_path)) == {}
    for pid in running:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        assert stat[stat.rindex(")") + 2] == "Z", (pid, running[pid])
    assert list(tmp_path.iterdir()) == []
