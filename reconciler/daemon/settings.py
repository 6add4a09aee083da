"""What ``reconciler run`` was asked to run, typed: the command line's values (flags and their
environment variables, resolved by the CLI) after their own checks. What ``reconciler.yaml``
adds (the settings in force, the forge section) is read by the assembly, at start and at each
commit.

A refusal names what to fix: ``UsageRefused`` (the settings do not go together: exit 2),
``SettingRefused`` (one flag's value: exit 2, naming the flag), ``ListenFailed`` (a listener's
port is taken: exit 2, one line naming the port and the flag that moves it) and ``StartFailed``
(a part could not start: exit 1). The CLI turns them into its own errors; nothing here knows
the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from reconciler.gitops.credentials import GitCredentials

Role = Literal["all", "sync", "controller"]
Mode = Literal["builtin", "operator"]


class DaemonError(Exception):
    """Base class: the daemon cannot run with these settings."""


class UsageRefused(DaemonError):
    """The settings do not go together (a role without what it needs)."""


class SettingRefused(DaemonError):
    """One setting's value is wrong; ``flag`` names it."""

    def __init__(self, message: str, *, flag: str) -> None:
        super().__init__(message)
        self.flag = flag


class StartFailed(DaemonError):
    """A part could not start (a repository unusable)."""


class ListenFailed(DaemonError):
    """A listener could not bind its address (a port taken by another process): the message is
    one line naming the port and the flag that moves it."""


@dataclass(frozen=True, slots=True)
class RepoConfigArg:
    """``--repo-config``, read once at start (the watch reads it again when it changes)."""

    path: str
    data: dict[str, Any]
    text: bytes


@dataclass(frozen=True, slots=True)
class Signatures:
    """Verifying the head commit's signature, and signing our own commits."""

    mode: str | None = None
    trusted_gpg_keys: tuple[Path, ...] = ()
    allowed_signers: Path | None = None
    signing_gpg_key: str | None = None
    signing_gnupg_home: Path | None = None
    signing_ssh_key: Path | None = None


@dataclass(frozen=True, slots=True)
class Webhook:
    """The push webhook (off without ``listen``)."""

    listen: str | None = None
    secret_file: str | None = None
    repository: str | None = None


@dataclass(frozen=True, slots=True)
class Forge:
    """Commit statuses (``kind`` None: reconciler.yaml's ``forge:`` decides)."""

    kind: str | None = None
    url: str | None = None
    token_file: Path | None = None
    repository: str | None = None
    dashboard_url: str | None = None


@dataclass(frozen=True, slots=True)
class Admission:
    """The validating admission webhook (off without ``listen``)."""

    listen: str | None = None
    cert_dir: Path | None = None
    self_signed: bool = False
    secret: str = "gpu-reconciler-admission-tls"
    webhook_config: str = "gpu-reconciler-admission"
    hosts: tuple[str, ...] = ()
    cert_interval: float = 30.0


@dataclass(frozen=True, slots=True)
class Election:
    """Leader election on a Lease (off: this replica acts alone)."""

    enabled: bool = False
    namespace: str = "metax-operator"
    lease: str = "gpu-reconciler"
    duration: float = 15.0
    deadline: float = 10.0
    retry: float = 2.0


@dataclass(frozen=True, slots=True)
class DaemonSettings:
    role: Role = "all"
    mode: Mode = "builtin"
    repo: str | None = None
    cluster: str | None = None
    branch: str = "main"
    kubeconfig: str | None = None
    cluster_operator: str = "cluster-operator"
    state_dir: Path | None = None
    fetch_interval: float | None = None
    status_min_interval: float | None = None
    #: --ready-timeout: pins reconciler.yaml's rollout.readyTimeout
    ready_timeout: float | None = None
    cordon_ahead: bool = True
    repo_config: RepoConfigArg | None = None
    controller_field_manager: str = "gpu-rollout-controller"
    git: GitCredentials = field(default_factory=GitCredentials)
    signatures: Signatures = field(default_factory=Signatures)
    webhook: Webhook = field(default_factory=Webhook)
    forge: Forge = field(default_factory=Forge)
    admission: Admission = field(default_factory=Admission)
    #: HOST:PORT of /healthz, /readyz and /metrics (None: off)
    ops_listen: str | None = ":8080"
    election: Election = field(default_factory=Election)

    @property
    def runs_sync(self) -> bool:
        return self.role in ("all", "sync")

    @property
    def runs_controller(self) -> bool:
        return self.role == "controller" or (self.role == "all" and self.mode == "builtin")


def check_roles(role: Role, mode: Mode, *, repo: str | None, cluster: str | None) -> None:
    """The role and mode go together, and a sync role has its repository and cluster."""
    if role == "controller" and mode == "operator":
        raise UsageRefused("--role controller --mode operator: in operator mode the vendor "
                           "operator is the controller; run --role sync")
    if role in ("all", "sync"):
        missing = [flag for flag, value in (("--repo", repo), ("--cluster", cluster))
                   if not value]
        if missing:
            raise UsageRefused(f"--role {role} needs {' and '.join(missing)} (or run --role "
                               "controller for the rollout controller alone)")


def check_forge_url(url: str | None) -> None:
    """An API URL the forge's token may go to (docs/forges.md), refused before anything starts."""
    if not url:
        return
    from reconciler.policy.forge_config import ForgeConfigError, check_api_url

    try:
        check_api_url(url, key="--forge-url")
    except ForgeConfigError as exc:
        raise UsageRefused(str(exc)) from None
