"""Reading one commit into a ``CommitView``: the Git and signature side of a sync pass.

The only part of the pass's decisions that touches Git or runs a verifier: it reads
``reconciler.yaml`` once (parsed, validated and resolved for the cluster once), the commits from
the person's commit up to the head, their signature verdicts (up to the first that refuses, so an
unsigned chain costs one verification) and the cluster's policy files; the steps then judge the
view without side effects.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from reconciler.config.document import ConfigDocument
from reconciler.config.settings import ClusterSettings
from reconciler.config.sync import SyncSettings
from reconciler.errors import RepoConfigError
from reconciler.gitops.edits import parse_status
from reconciler.gitops.reader import PolicyFileRefused
from reconciler.gitops.repository import PolicyRepository
from reconciler.sync.commit_view import (
    CommitView,
    LiveObject,
    PolicyFile,
    PromotionView,
    SignatureEvidence,
    resolved,
)
from reconciler.sync.steps import signature_refusal
from reconciler.trust.signatures import CommitVerifier, effective_mode

#: the most commits walked between the person's commit and the head
CHAIN_LIMIT = 500


def person_commit(repo: PolicyRepository, head: str) -> str:
    """The newest commit by a person in the head's history: what the cluster runs, for
    people (the head itself may be one of our status commits on top of it)."""
    for info in repo.mirror.commits_between(None, head, limit=CHAIN_LIMIT):
        if not info.is_own:
            return info.sha
    return head


def observe_commit(
    repo: PolicyRepository, head: str, *, cluster: str, cluster_operator: str,
    controller_manager: str, live: Mapping[str, Any] | None,
    baseline: Mapping[str, Any] | None, flag_mode: str | None,
    verifier: CommitVerifier | None, now: float = 0.0,
) -> CommitView:
    """The view of ``head`` the steps judge (raises ``GitOpsError`` when Git cannot be read:
    the worker retries)."""
    source = person_commit(repo, head)
    config: ConfigDocument | None = None
    config_refused = None
    try:
        config = repo.reader.config_document(head)
    except PolicyFileRefused as exc:
        config_refused = exc.refused
    settings, settings_refused = resolved(config, cluster, source)
    evidence = _signatures(repo, head, source, config, flag_mode, verifier)
    files: tuple[PolicyFile, ...] | None = None
    files_refused = None
    layout = _layout(config, settings)
    if layout is not None:
        try:
            files = tuple(PolicyFile(f.path, f.data) for f in
                          repo.reader.cluster_files(head, cluster, layout))
        except PolicyFileRefused as exc:
            files_refused = exc.refused
    return CommitView(
        promotion=_promotion(repo, head, settings), now=now,
        head=head, source=source, cluster=cluster, cluster_operator=cluster_operator,
        controller_manager=controller_manager,
        # the live object is never changed in place (a new one replaces it)
        live=LiveObject(live) if live is not None else None,
        baseline=copy.deepcopy(dict(baseline)) if baseline is not None else None,
        config=config, config_refused=config_refused, signatures=evidence, files=files,
        files_refused=files_refused, settings=settings, settings_refused=settings_refused,
    )


def _layout(config: ConfigDocument | None, settings: ClusterSettings | None
            ) -> SyncSettings | None:
    """Where the cluster's files are: the settings' (a refused section elsewhere in the file
    still names the folder, so the commit's policy is read and shown); None: unknown."""
    if settings is not None:
        return settings.sync
    if config is None or config.refused is not None:
        return None
    try:
        return SyncSettings.from_obj(config.obj)
    except RepoConfigError:
        return None


def _promotion(repo: PolicyRepository, head: str,
               settings: ClusterSettings | None) -> PromotionView | None:
    """``clusters.<cluster>.promotion`` and the upstream's snapshot at the head the daemon
    watches: ``status.branch`` when set, else the newest fetched head of the policy branch (the
    upstream's status commits are ours, so they bring no new ``head`` to judge); one commit,
    never the history."""
    if settings is None:
        return None
    if settings.promotion_error is not None:
        return PromotionView("", 0.0, "hold", None, error=settings.promotion_error)
    promotion = settings.promotion
    if promotion is None:
        return None
    layout = settings.sync
    at = repo.mirror.head(layout.status_branch or repo.branch) or (
        None if layout.status_branch else head)
    snapshot = None
    if at is not None:
        snapshot = parse_status(repo.mirror.read_file(at, layout.status_file(promotion.after)))
    return PromotionView(promotion.after, promotion.soak, promotion.mode, snapshot)


def _signatures(
    repo: PolicyRepository, head: str, source: str, config: ConfigDocument | None,
    flag_mode: str | None, verifier: CommitVerifier | None,
) -> SignatureEvidence:
    if config is None:  # the config file is refused: the pass is rejected before any check
        return SignatureEvidence()
    try:
        mode = effective_mode(flag_mode, config.signature_mode)
    except ValueError as exc:
        return SignatureEvidence(mode=None, mode_error=str(exc))
    if mode == "none":
        return SignatureEvidence(mode=mode, verifier=verifier is not None)
    chain = [info.sha for info in
             repo.mirror.commits_between(source, head, limit=CHAIN_LIMIT)]
    commits = (*chain, source)
    checks = []
    if verifier is not None:
        for commit in commits:
            check = verifier.verify(repo.mirror.path, commit)
            checks.append((commit, check))
            if signature_refusal(mode, commit, check) is not None:
                break
    return SignatureEvidence(mode=mode, verifier=verifier is not None, commits=commits,
                             checks=tuple(checks))

