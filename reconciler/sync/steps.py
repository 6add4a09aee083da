"""The sync pass's decisions as ordered steps: pure functions of one ``CommitView``.

Each step has one signature, ``(view, progress) -> Outcome[Progress]``: it accepts (adding what
it found to the frozen ``Progress``), rejects with located findings (a person must fix the
commit: nothing is applied), or ends the pass with nothing to apply. ``plan_commit`` runs
``SYNC_STEPS`` in order and stops at the first step that does not accept; the shell
(``apply.py``) then applies the plan or records the rejection. No Kubernetes, Git or clock here.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from reconciler.config.settings import ClusterSettings
from reconciler.config.sync import CONFIG_FILE
from reconciler.fieldpath import ensure, resolve
from reconciler.files import FileRefused
from reconciler.fleet.promotion import payload_version, same_version
from reconciler.fleet.promotion import promotion_gate as fleet_gate
from reconciler.gitops.ownership import (
    FieldDecision,
    OwnershipPlan,
    controller_changed_fields,
    decide_ownership,
)
from reconciler.names import SYNC_FIELD_MANAGER
from reconciler.policy.findings import Finding
from reconciler.policy.validation import parse_only, validate_document
from reconciler.sync.commit_view import CommitView, PolicyFile
from reconciler.sync.desired import (
    apply_body,
    firmware_request_value,
    firmware_requested,
    sync_owned_tree,
    what_stays,
)
from reconciler.sync.fields import FW_POLICY, FW_VIRT
from reconciler.sync.outcome import (
    Accepted,
    Held,
    NothingToApply,
    Outcome,
    Rejected,
    finding,
)
from reconciler.timefmt import format_seconds
from reconciler.trust.signatures import SignatureCheck, methods_for_mode

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PolicyDocument:
    """The cluster's ClusterOperator policy: its file, bytes and parsed object."""

    path: str
    data: bytes
    obj: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ApplyPlan:
    """What the shell applies for an accepted commit."""

    #: the server-side apply body (field manager ``gpu-gitops-reconciler``)
    body: dict[str, Any]
    #: the commit's object as written (the next baseline)
    proposed: dict[str, Any]
    #: fields left to the controller (docs/gitops.md#git-stays-the-truth)
    kept: tuple[tuple[str, ...], ...]
    #: the cluster's values to commit to Git
    write_backs: tuple[FieldDecision, ...]
    #: a new firmware request put on the object (None: none)
    firmware_request: str | None
    #: validation's warnings (logged, never a reason to reject)
    warnings: tuple[Finding, ...] = ()
    #: reconciler.yaml resolved for the cluster, published once the commit is applied
    settings: ClusterSettings | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """What the steps so far accepted."""

    settings: ClusterSettings | None = None
    policy: PolicyDocument | None = None
    ownership: OwnershipPlan | None = None
    warnings: tuple[Finding, ...] = ()
    plan: ApplyPlan | None = None


Step = Callable[[CommitView, Progress], Outcome[Progress]]


def verify_signatures(view: CommitView, progress: Progress) -> Outcome[Progress]:
    """Every commit from the person's up to the head carries a trusted signature of a method
    the mode allows, so nothing unverified is applied, not even under a commit that claims to
    be the reconciler's. Rejects: ``reconciler.yaml`` refused as a file, a mode that cannot be
    combined with the flag, a mode without trusted keys, an untrusted or wrong-method
    signature."""
    if view.config_refused is not None:
        return _refused_file(view.config_refused)
    evidence = view.signatures
    if evidence.mode is None:
        message = evidence.mode_error or "signatures.mode cannot be used"
        return Rejected.at(CONFIG_FILE, "signature-config", message)
    if evidence.mode == "none":
        return Accepted(progress)
    if not evidence.verifier:
        first = evidence.commits[0] if evidence.commits else view.source
        message = (f"signatures.mode {evidence.mode} needs trusted keys, but this reconciler "
                   "has none configured (--trusted-gpg-key / --allowed-signers)")
        return Rejected.at(f"commit {first[:12]}", "CommitSignatureCheckFailed", message)
    for commit, check in evidence.checks:
        refusal = signature_refusal(evidence.mode, commit, check)
        if refusal is not None:
            return refusal
    return Accepted(progress)


def signature_refusal(mode: str, commit: str, check: SignatureCheck) -> Rejected | None:
    """Why ``check`` of ``commit`` is not enough under ``mode`` (None: it is)."""
    where = f"commit {commit[:12]}"
    if not check.trusted:
        return Rejected.at(where, check.reason, check.message)
    if check.method is not None and check.method not in methods_for_mode(mode):
        message = (f"commit {commit[:12]} is signed with {check.method.value}, but "
                   f"signatures.mode is {mode}")
        return Rejected.at(where, "CommitSignerUntrusted", message)
    return None


def read_config(view: CommitView, progress: Progress) -> Outcome[Progress]:
    """The repository's settings resolved for the cluster (sets ``settings``: the Git side's and
    the controllers', in force once the commit is applied). Rejects a ``reconciler.yaml`` that
    is not YAML, has a wrong key or a ``rollout``, ``notify`` or ``firmware`` section that does
    not validate, naming the key or the line (the settings in force stay)."""
    if view.config_refused is not None:
        return _refused_file(view.config_refused)
    if view.settings is None:
        message = view.settings_refused or f"{CONFIG_FILE} cannot be read"
        return Rejected.at(CONFIG_FILE, "repo-config", message)
    return Accepted(replace(progress, settings=view.settings))


def pick_policy_file(view: CommitView, progress: Progress) -> Outcome[Progress]:
    """The one ClusterOperator document of the cluster's folder (sets ``policy``). Nothing to
    apply when the folder holds no policy file (deleting a folder never deletes the object).
    Rejects: a link, folder or oversized file in the folder; two ClusterOperator documents;
    files none of which is a ClusterOperator (their own validation says why)."""
    if view.files_refused is not None:
        return _refused_file(view.files_refused)
    files = view.files or ()
    if not files:
        folder = (progress.settings.sync.cluster_dir(view.cluster) if progress.settings
                  else view.cluster)
        return NothingToApply(
            f"commit {view.head[:12]} has no policy under {folder}/: nothing applied; the "
            f"ClusterOperator {view.cluster_operator} is kept (deleting a cluster folder never "
            "deletes it)")
    candidates = [doc for doc in map(_cluster_operator_document, files) if doc is not None]
    if len(candidates) > 1:
        names = ", ".join(c.path for c in candidates)
        message = f"more than one ClusterOperator policy for cluster {view.cluster}: {names}"
        return Rejected.at(candidates[1].path, "duplicate-policy", message)
    if candidates:
        return Accepted(replace(progress, policy=candidates[0]))
    # nothing recognisable: the full validation of every file says why
    findings = [f for p in files for f in validate_document(p.data, p.path).errors]
    if not findings:
        return Rejected.at(files[0].path, "no-policy",
                           "no ClusterOperator document in this cluster's folder")
    return Rejected.of(findings[0].message, findings)


def validate(view: CommitView, progress: Progress) -> Outcome[Progress]:
    """The policy against the schema, the rules, and the transition rules from what will run
    (sets ``ownership`` and ``warnings``): fields the controller keeps count as the cluster has
    them, fields another manager owns and Git does not name stay. Rejects every error found,
    and an object named other than the ClusterOperator this reconciler manages."""
    policy = _need(progress.policy)
    live = view.live
    changed = (controller_changed_fields(live.managed_fields, manager=view.controller_manager)
               if live is not None else set())
    ownership = decide_ownership(last_applied=view.baseline, proposed=policy.obj,
                                 cluster=live.obj if live is not None else {},
                                 controller_changed=changed)
    previous = None
    if live is not None:
        owned = sync_owned_tree(live.managed_fields, SYNC_FIELD_MANAGER)
        previous = what_stays(live.obj, policy.obj, owned)
        for decision in ownership.decisions:
            if decision.source == "cluster":
                ensure(previous, decision.field, decision.git_value)
    result = validate_document(
        policy.data, policy.path, previous=previous,
        phase=live.upgrade_phase if live is not None else None,
        firmware_phase=live.firmware_phase if live is not None else None,
    )
    if not result.ok:
        return Rejected(result.errors[0].message, tuple(result.errors),
                        warnings=tuple(result.warnings))
    name = resolve(policy.obj, ("metadata", "name"), None)
    if name is not None and name != view.cluster_operator:
        message = (f"metadata.name is {name!r}, but this reconciler manages the "
                   f"ClusterOperator {view.cluster_operator!r}")
        return Rejected.at(policy.path, "object-name", message)
    return Accepted(replace(progress, ownership=ownership, warnings=tuple(result.warnings)))


def promotion_gate(view: CommitView, progress: Progress) -> Outcome[Progress]:
    """The promotion gate (docs/configuration.md#promotion): a payload version the cluster does not
    run yet waits (``Held``) until the upstream completed it ``soak`` ago and still runs it. Rejects
    an unusable ``promotion`` section, naming the key."""
    gate = view.promotion
    if gate is None:
        return Accepted(progress)
    if gate.error is not None:
        return Rejected.at(CONFIG_FILE, "repo-config", gate.error)
    wanted = payload_version(_need(progress.policy).obj)
    running = payload_version(view.live.obj) if view.live is not None else None
    if wanted is None or (running is not None and same_version(running, wanted)):
        return Accepted(progress)
    verdict = fleet_gate(gate.upstream, gate.snapshot, wanted, soak=gate.soak, now=view.now)
    if verdict.allowed:
        return Accepted(progress)
    reason = f"held by promotion gate: {wanted} waits for {gate.upstream}: {verdict.describe()}"
    held: dict[str, Any] = {"version": wanted, "upstream": gate.upstream,
                            "commit": view.source, "reason": verdict.describe()}
    if verdict.earliest is not None:
        held["earliest"] = format_seconds(math.ceil(verdict.earliest))
    return Held(reason, held, verdict.earliest)


def plan_apply(view: CommitView, progress: Progress) -> Outcome[Progress]:
    """The object to apply and the write-backs to commit (sets ``plan``); never rejects. A
    commit that newly asks for ``fwUpgradePolicy: PreferCloud`` becomes a firmware request."""
    policy, ownership = _need(progress.policy), _need(progress.ownership)
    live = view.live.obj if view.live is not None else None
    sha = view.source
    request = None
    if firmware_requested(policy.obj, live, view.baseline) and FW_POLICY not in ownership.kept:
        request = firmware_request_value(
            fw_enable_virt=bool(resolve(policy.obj, FW_VIRT) is True), source_commit=sha)
    body = apply_body(policy.obj, name=view.cluster_operator, source_commit=sha,
                      kept=ownership.kept, live=live, firmware_request=request)
    plan = ApplyPlan(body=body, proposed=copy.deepcopy(policy.obj), kept=ownership.kept,
                     write_backs=ownership.write_backs, firmware_request=request,
                     warnings=progress.warnings, settings=progress.settings)
    return Accepted(replace(progress, plan=plan))


#: the sync pass, in order
SYNC_STEPS: tuple[Step, ...] = (
    verify_signatures,
    read_config,
    pick_policy_file,
    validate,
    promotion_gate,
    plan_apply,
)


def plan_commit(view: CommitView, steps: tuple[Step, ...] = SYNC_STEPS) -> Outcome[ApplyPlan]:
    """Run ``steps`` in order; the first that does not accept ends the pass."""
    progress = Progress()
    for step in steps:
        outcome = step(view, progress)
        if not isinstance(outcome, Accepted):
            return outcome
        progress = outcome.value
    return Accepted(_need(progress.plan))


def policy_document(view: CommitView) -> PolicyDocument | None:
    """The cluster's ClusterOperator document of the commit, when exactly one file has it."""
    candidates = [doc for doc in map(_cluster_operator_document, view.files or ())
                  if doc is not None]
    return candidates[0] if len(candidates) == 1 else None


def _cluster_operator_document(policy: PolicyFile) -> PolicyDocument | None:
    obj = parse_only(policy.data, policy.path).obj
    if isinstance(obj, dict) and obj.get("kind") == "ClusterOperator":
        return PolicyDocument(policy.path, policy.data, obj)
    return None


def _refused_file(refused: FileRefused) -> Rejected:
    """A link, a folder or an oversized file where a policy or config file should be."""
    return Rejected(f"{refused.path}: {refused.reason}",
                    (finding(refused.path, refused.problem, refused.reason),))


def _need(value: T | None) -> T:
    if value is None:
        raise ValueError("a sync step ran before the step that provides its input")
    return value
