"""Git failures translated once, at the adapter seam, into what the caller does next."""

from __future__ import annotations

from reconciler.policy.repo_config import RepoConfigError as InvalidRepoConfig


class GitOpsError(Exception):
    """Base class: a Git operation of the reconciler failed."""


class RemoteUnavailable(GitOpsError):
    """The remote could not be reached (down, refused, missing): retry later, keep the queue."""


class RemoteAccessDenied(RemoteUnavailable):
    """The remote refused our credentials, or we refused its SSH host key: nothing was fetched
    or pushed; retried like an outage, but a person has to fix the configuration."""


class PushRejected(GitOpsError):
    """The remote has commits we do not (non-fast-forward): fetch, rebase our commit, retry."""


class PushDeclined(GitOpsError):
    """The remote refused the update (hook, protected branch, dirty checked-out working copy):
    not a race; retry later and make it visible."""


class RepoConfigError(GitOpsError, InvalidRepoConfig):
    """``reconciler.yaml`` at a commit is unreadable or has a wrong type; the message names the
    key. The policy package's error, raised again at the Git seam (``gitops.reader``)."""


class NotARepository(GitOpsError):
    """The folder is in no Git working copy (or is not one itself)."""


class StatusNotFound(GitOpsError):
    """No status snapshot for the cluster at the branch head."""
