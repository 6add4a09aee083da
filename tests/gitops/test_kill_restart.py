"""A writer process killed (SIGKILL) at random points, then restarted: its queue file is never
corrupt, nothing queued is lost, and no state is committed twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ruamel.yaml import YAML

from reconciler.gitops.mirror import Mirror
from reconciler.gitops.publisher import Publisher
from tests.gitops.conftest import Person, Remote, git

WRITER = """
import sys, time
from reconciler.gitops.mirror import Mirror
from reconciler.gitops.publisher import PendingChange, Publisher

url, state, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
publisher = Publisher(Mirror(url, state), "main", state_dir=state)
for n in range(start, 40):
    snapshot = {"cluster": "prod-a", "upgradeStatus": {"phase": "Progressing", "status": {
        "currentStepIndex": n, "currentStepState": "StepUpgrade"}}}
    publisher.enqueue(PendingChange(kind="status", cluster="prod-a",
                                    path="status/prod-a.yaml", subject=f"step {n}",
                                    snapshot=snapshot))
    print(n, flush=True)
    publisher.flush()
"""


def committed_steps(remote: Remote) -> list[int]:
    steps = []
    for sha in git(remote.path, "rev-list", "--reverse", "main", "--",
                   "status/prod-a.yaml").split():
        data = YAML(typ="safe").load(remote.show(f"{sha}:status/prod-a.yaml"))
        steps.append(data["upgradeStatus"]["status"]["currentStepIndex"])
    return steps


def test_killed_and_restarted_writer(remote: Remote, tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    next_step = 0
    for kill_after in (0.05, 0.3, 0.17):
        process = subprocess.Popen(
            [sys.executable, "-c", WRITER, remote.url, str(state), str(next_step)],
            stdout=subprocess.PIPE, text=True, env=env)
        assert process.stdout is not None
        first = process.stdout.readline()  # it is running and has queued a change
        time.sleep(kill_after)
        process.send_signal(signal.SIGKILL)
        out, _ = process.communicate(timeout=10)
        enqueued = [int(line) for line in (first + out).split()]
        if enqueued:
            next_step = enqueued[-1] + 1
        queue_files = list((state / "queue").glob("*.json"))
        for queue_file in queue_files:
            json.loads(queue_file.read_text())  # never a torn file
    # the restart: whatever was queued goes out, once
    publisher = Publisher(Mirror(remote.url, state), "main", state_dir=state)
    assert publisher.flush().ok
    steps = committed_steps(remote)
    assert steps == sorted(set(steps)), f"a state was committed twice or out of order: {steps}"
    assert steps and steps[-1] == next_step - 1, "the last enqueued state is not in Git"
    assert next_step >= 3, "the writer was killed before it did anything worth testing"
    assert publisher.pending() == []


def test_ref_locks_left_by_a_killed_process_do_not_stop_the_next_fetch(
    remote: Remote, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    Mirror(remote.url, state).fetch()
    mirror_dir = next(p.parent for p in state.rglob("HEAD") if (p.parent / "refs").is_dir())
    # what a SIGKILL during a fetch leaves: the lock of the ref it was updating
    lock = mirror_dir / "refs" / "remotes" / "origin" / "main.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("0" * 40 + "\n")
    person = Person(remote.url, tmp_path / "person")
    pushed = person.commit("a change to fetch", {"extra.txt": "x\n"})
    person.push()
    heads = Mirror(remote.url, state).fetch()  # the next process
    assert not lock.exists()
    assert pushed in heads.values()


def test_a_ref_lock_held_by_an_orphaned_git_is_waited_out(remote: Remote, tmp_path: Path) -> None:
    """A SIGKILLed writer's git fetch lives on for a moment and holds the ref's lock while the
    next process fetches (seen in CI); that fetch waits and tries again."""
    state = tmp_path / "state"
    Mirror(remote.url, state).fetch()
    mirror = Mirror(remote.url, state)  # the next process: it found no stale lock at its start
    mirror_dir = next(p.parent for p in state.rglob("HEAD") if (p.parent / "refs").is_dir())
    lock = mirror_dir / "refs" / "remotes" / "origin" / "main.lock"
    lock.write_text("0" * 40 + "\n")  # the orphan takes the lock now ...
    person = Person(remote.url, tmp_path / "person")
    pushed = person.commit("a change to fetch", {"extra.txt": "x\n"})
    person.push()
    released = threading.Timer(0.5, lock.unlink)  # ... and finishes half a second later
    released.start()
    try:
        heads = mirror.fetch()
    finally:
        released.join()
    assert heads["main"] == pushed
