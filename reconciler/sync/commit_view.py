"""The typed, frozen view of one commit that the sync pass's steps judge (``steps.py``).

Everything a step needs is read before the steps run (``observe.py``): the commit's
``reconciler.yaml`` parsed and validated once and resolved for the cluster, the signature
verdicts, the cluster's policy files, and the cluster side (the live object, the baseline of
docs/gitops.md#git-stays-the-truth). So each step is a pure function of this view and the steps
before it, and a table test builds a view by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.config import settings as config_settings
from reconciler.config.document import ConfigDocument
from reconciler.config.settings import ClusterSettings, SettingsRefused
from reconciler.fieldpath import items, resolve
from reconciler.files import FileRefused
from reconciler.stored_status import firmware_status_of, upgrade_status_of
from reconciler.trust.signatures import SignatureCheck


@dataclass(frozen=True, slots=True)
class PolicyFile:
    """One ``clusters/<name>/*.yaml`` file of the commit."""

    path: str
    data: bytes


@dataclass(frozen=True, slots=True)
class SignatureEvidence:
    """What signature verification needs and found, for the commits from the person's commit up
    to the branch head (our own commits above it must be signed by a trusted key too)."""

    #: ``signatures.mode`` in force (the flag tightened by the repository), or None when the two
    #: cannot be combined (``mode_error`` says why)
    mode: str | None = "none"
    mode_error: str | None = None
    #: a trusted key is configured (``--trusted-gpg-key`` / ``--allowed-signers``)
    verifier: bool = False
    #: the commits to verify, head side first, the person's commit last
    commits: tuple[str, ...] = ()
    #: the verdicts in ``commits`` order, up to the first one that refuses
    checks: tuple[tuple[str, SignatureCheck], ...] = ()


@dataclass(frozen=True, slots=True)
class LiveObject:
    """The ClusterOperator as the cluster has it (a read-only view over the API's JSON)."""

    obj: Mapping[str, Any]

    @property
    def managed_fields(self) -> tuple[Any, ...]:
        return tuple(m for m in items(self.obj, ("metadata", "managedFields"))
                     if isinstance(m, Mapping))

    @property
    def upgrade_phase(self) -> Any:
        return upgrade_status_of(self.obj).get("phase")

    @property
    def firmware_phase(self) -> Any:
        return firmware_status_of(self.obj).get("phase")

    def field(self, path: tuple[str, ...]) -> Any:
        return resolve(self.obj, path)


@dataclass(frozen=True, slots=True)
class CommitView:
    """One commit of the policy branch, with the cluster beside it."""

    #: the branch head that was read
    head: str
    #: the newest commit by a person at or below ``head``: what the cluster runs, for people
    source: str
    cluster: str
    #: the ClusterOperator this reconciler manages
    cluster_operator: str
    #: field manager whose spec changes are the rollout's own (docs/gitops.md#git-stays-the-truth)
    controller_manager: str
    live: LiveObject | None
    #: the last applied object with our landed write-backs (None: not known)
    baseline: Mapping[str, Any] | None
    #: ``reconciler.yaml`` parsed and validated once (None when the file itself is refused)
    config: ConfigDocument | None
    #: ``reconciler.yaml`` is a link, a folder or too large
    config_refused: FileRefused | None
    signatures: SignatureEvidence
    #: the cluster's policy files (None when not read: the config was refused)
    files: tuple[PolicyFile, ...] | None
    #: the cluster folder or one of its files is a link, a folder or too large
    files_refused: FileRefused | None = None
    #: ``clusters.<cluster>.promotion`` with the upstream's snapshot at the watched head
    #: (None: no promotion section)
    promotion: PromotionView | None = None
    #: wall-clock seconds when the commit was read (the promotion gate's ``now``)
    now: float = 0.0
    #: ``config`` resolved for the cluster (None: refused, ``settings_refused`` says why)
    settings: ClusterSettings | None = None
    settings_refused: str | None = None


@dataclass(frozen=True, slots=True)
class PromotionView:
    upstream: str
    soak: float
    mode: str
    #: the upstream's status snapshot (None: it has none)
    snapshot: Mapping[str, Any] | None
    #: why ``clusters.<cluster>.promotion`` cannot be used (the commit is rejected)
    error: str | None = None


def resolved(config: ConfigDocument | None, cluster: str, source: str
             ) -> tuple[ClusterSettings | None, str | None]:
    """``config`` resolved for ``cluster`` (``settings``), or why it is refused
    (``settings_refused``)."""
    if config is None:
        return None, None
    try:
        return config_settings.resolve(config, cluster, source=source), None
    except SettingsRefused as exc:
        return None, str(exc)
