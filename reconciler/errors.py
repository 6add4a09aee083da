"""Errors more than one layer raises (bottom layer: imports nothing of the package).

``GitOpsError`` is every failed Git operation (its kinds, what the caller does next, are in
``reconciler.gitops.errors``). ``RepoConfigError`` is a ``reconciler.yaml`` that is unreadable
or has a wrong value: the pure policy code finds it, and the Git side raises the same class
when it reads the file at a commit, so it is a ``GitOpsError`` too (a caller of the Git side
handles one kind of error) and a ``ValueError`` (a value was wrong).
"""

from __future__ import annotations


class GitOpsError(Exception):
    """Base class: a Git operation of the reconciler failed."""


class RepoConfigError(GitOpsError, ValueError):
    """``reconciler.yaml`` is unreadable or has a wrong type; the message names the key."""
