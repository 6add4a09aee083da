"""Child processes that do not outlive the process that started them."""

from __future__ import annotations

import contextlib
import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: the kernel sends the child SIGTERM once the thread that started it ends,
    so a test run, demo or benchmark killed outright (no clean-up) leaves nothing running. Only
    from a thread that lives as long as the child should (the main thread, a supervisor)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
