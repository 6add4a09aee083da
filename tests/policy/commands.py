"""``reconciler validate`` and git, run in a test's folder the way a person or CI runs them."""

from __future__ import annotations

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


#: Address-space limit of a hostile-input child: generous for the interpreter and its imports,
#: far below what an input that blows up memory would take.
CHILD_ADDRESS_SPACE = 2 * 1024**3


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))


def validate_bounded(
    cwd: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``reconciler validate ARGS`` as a child with an address-space limit and a hang bound
    (``subprocess.TimeoutExpired`` fails the test); for hostile input."""
    code = "from reconciler.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, "validate", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False,
                          preexec_fn=_limit_address_space)
