"""``reconciler validate`` and git, run in a test's folder the way a person or CI runs them."""

from __future__ import annotations

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
