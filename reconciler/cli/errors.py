"""Errors the commands share."""

from __future__ import annotations

import click


class OneLineUsageError(click.ClickException):
    """Exit status 2 with one line (``Error: ...``), without the usage lines: for a value that
    is well formed but cannot be used on this host (a listener's port taken by another
    process)."""

    exit_code = 2
