"""``reconciler validate`` and git, run in a test's folder the way a person or CI runs them."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path


def validate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``reconciler validate ARGS`` in ``cwd`` (this interpreter, not an installed script)."""
    code = "from reconciler.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, "validate", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


def git(cwd: Path, *args: str) -> str:
    """``git ARGS`` in ``cwd`` as a test identity; raises when git fails."""
    return subprocess.run(
        ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args], cwd=cwd,
        capture_output=True, text=True, check=True).stdout


#: Address space of a child run on hostile input: a command that reads /dev/zero or a huge file
#: into memory fails fast instead of eating the machine.
CHILD_ADDRESS_SPACE = 2 * 1024**3


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))


def reconciler(cwd: Path, *args: str, timeout: float = 60,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``reconciler ARGS`` as a child process bounded in memory (RLIMIT_AS) and time: a hang
    raises ``TimeoutExpired``, so a test that returns proves the command ended."""
    code = "from reconciler.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=False, preexec_fn=_limit_memory,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def validate_bounded(
    cwd: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``reconciler validate ARGS`` as a child with an address-space limit and a hang bound
    (``subprocess.TimeoutExpired`` fails the test); for hostile input."""
    return reconciler(cwd, "validate", *args, timeout=timeout)


def reported(stdout: str) -> list[str]:
    """The lines of ``validate``'s text output that are errors or warnings: infos left out (a
    policy with only spec.driver gets one, docs/validation.md#severities)."""
    return [line for line in stdout.splitlines() if ": info: " not in line]
