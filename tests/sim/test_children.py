"""A child started with ``die_with_parent`` goes when its parent is killed outright (SIGKILL: no
clean-up runs); one started without it stays (so the first check tells the two apart)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from reconciler.sim.waiting import WaitTimeout, wait_for

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


#: the kernel's flag of a task on its way out (include/linux/sched.h)
PF_EXITING = 0x4


def dying(pid: int) -> bool:
    """Whether ``pid`` has a SIGKILL waiting or is already on its way out."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    masks = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return (any(mask & (1 << (signal.SIGKILL - 1)) for mask in masks)
            or bool(int(stat[6]) & PF_EXITING))


def child_after_parent_killed(mode: str) -> tuple[int, bool]:
    """The child's pid, and whether it lives on, once its parent was killed and reaped. The
    kernel sends the parent-death signal while it hands the child to a new parent, before the
    parent can be reaped: a child not signalled by then never is."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).resolve().parents[2])
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    if mode == "tied" or dying(child):  # tied: its end is the event to wait for
        with contextlib.suppress(WaitTimeout):
            wait_for(lambda: not alive(child), timeout=10, what=f"{child} gone")
    return child, alive(child)


def test_a_tied_child_goes_with_a_parent_killed_outright() -> None:
    _, still_there = child_after_parent_killed("tied")
    assert not still_there


def test_an_untied_child_outlives_it() -> None:
    child, still_there = child_after_parent_killed("untied")
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, signal.SIGKILL)
    assert still_there
