"""Git failures translated once, at the adapter seam, into what the caller does next."""

from __future__ import annotations

# the bases live in the bottom layer: the policy code raises RepoConfigError too
from reconciler.errors import GitOpsError as GitOpsError
from reconciler.errors import RepoConfigError as RepoConfigError


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


class NotARepository(GitOpsError):
    """The folder is in no Git working copy (or is not one itself)."""


class StatusNotFound(GitOpsError):
    """No status snapshot for the cluster at the branch head."""
