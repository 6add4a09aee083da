"""A child started with ``die_with_parent`` goes when its parent is killed outright (SIGKILL: no
clean-up runs); one started without it stays (so the first check tells the two apart)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PARENT = """
import subprocess, sys, time
from reconciler.sim.children import die_with_parent
child = subprocess.Popen(["sleep", "300"], start_new_session=True,
                         preexec_fn=die_with_parent if sys.argv[1] == "tied" else None)
print(child.pid, flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def child_after_parent_killed(mode: str, wait: float) -> tuple[int, bool]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).resolve().parents[2])
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + wait
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    return child, alive(child)


def test_a_tied_child_goes_with_a_parent_killed_outright() -> None:
    _, still_there = child_after_parent_killed("tied", wait=10)
    assert not still_there


def test_an_untied_child_outlives_it() -> None:
    child, still_there = child_after_parent_killed("untied", wait=1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, signal.SIGKILL)
    assert still_there
