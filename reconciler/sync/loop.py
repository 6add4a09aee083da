"""The sync role for one cluster: each new commit is read, verified, validated against the live
``ClusterOperator`` and applied (or rejected, visibly); the object's status goes to Git as
snapshots, and the rollout's own spec changes go to Git as write-backs (SPEC 4.6).

Threads: the commit source and the ClusterOperator watch only record what they saw and wake one
worker, which does everything that acts (apply, events, Git writes) in order. Only the leader
acts: each pass holds ``_acting`` and checks ``is_leader`` first, and ``stop_acting()`` (the
leader election's ``on_stopped_leading``) takes the same lock, so no pass acts after it returned.

Restart-safe: the commit the cluster runs is an annotation on the object
(``gpu.metax-tech.com/source-commit``; else the status snapshot's ``sourceCommit``), and the
baseline of field ownership is that commit's object plus the reconciler's own write-back commits
that landed after it.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.files import YamlRefused, parse_yaml
from reconciler.firmware.status_view import firmware_snapshot
from reconciler.gitops.commits import Identity
from reconciler.gitops.credentials import GitCredentials
from reconciler.gitops.edits import read_field, same_value
from reconciler.gitops.errors import GitOpsError, RepoConfigError
from reconciler.gitops.ownership import (
    CONTROLLER_FIELDS,
    FieldPath,
    controller_changed_fields,
    decide_ownership,
    record_write_back,
    set_field,
)
from reconciler.gitops.publisher import PendingChange, Skipped
from reconciler.gitops.reader import PolicyFileRefused
from reconciler.gitops.repository import PolicyRepository
from reconciler.gitops.source import NewCommit
from reconciler.gitops.status_policy import build_snapshot, step_label
from reconciler.kube.api import JSON, KubeApi, KubeError, NotFound
from reconciler.kube.objects import (
    CONTROLLER_FIELD_MANAGER,
    SYNC_FIELD_MANAGER,
    cluster_operator_path,
)
from reconciler.kube.watch import ListWatch
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.ops.metrics import NODE_STATES, Metrics
from reconciler.policy.findings import Finding
from reconciler.policy.validation import parse_only, validate_document
from reconciler.sync.desired import (
    FW_VIRT_FIELD,
    SOURCE_COMMIT_ANNOTATION,
    apply_body,
    drifted,
    firmware_request_value,
    firmware_requested,
    sync_owned_tree,
    what_stays,
)
from reconciler.sync.events import record_event
from reconciler.trust.signatures import CommitVerifier, effective_mode, methods_for_mode

log = logging.getLogger(__name__)

PAUSE: FieldPath = ("spec", "driver", "upgradePolicy", "pause")
VERSION: FieldPath = ("spec", "driver", "payload", "version")
FW_POLICY: FieldPath = ("spec", "driver", "fwUpgradePolicy")
#: most findings kept in a status snapshot's rejection (the log and the event have them all)
MAX_FINDINGS = 20


@dataclass(slots=True)
class SyncStats:
    applied: int = 0
    rejected: int = 0
    write_backs: int = 0
    drift_repairs: int = 0
    errors: int = 0
    #: (commit, seconds from the commit being reported to the apply answered)
    applies: list[tuple[str, float]] = field(default_factory=list)


class SyncRejected(Exception):
    """The commit is not applied; ``findings`` say where and why."""

    def __init__(self, reason: str, findings: list[Finding]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.findings = findings


class ClusterSync:
    def __init__(
        self,
        api: KubeApi,
        repo: str,
        *,
        cluster: str,
        branch: str = "main",
        state_dir: Path | str | None = None,
        cluster_operator: str = CLUSTER_OPERATOR_NAME,
        fetch_interval: float | None = None,
        status_min_interval: float | None = None,
        identity: Identity | None = None,
        verifier: CommitVerifier | None = None,
        signature_mode: str | None = None,
        signing: tuple[list[str], list[str], dict[str, str]] | None = None,
        metrics: Metrics | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        controller_field_manager: str = CONTROLLER_FIELD_MANAGER,
        node_counts: Callable[[], Mapping[str, int]] | None = None,
        clock: Callable[[], float] = time.time,
        git_credentials: GitCredentials | None = None,
    ) -> None:
        """``node_counts``: node states only a controller in this process knows (in flight,
        unavailable), for the ``gpu_reconciler_nodes`` metric."""
        self.api = api
        self.cluster = cluster
        self.name = cluster_operator
        self.verifier = verifier
        self.signature_mode = signature_mode
        self.metrics = metrics
        self.is_leader = is_leader
        self.controller_manager = controller_field_manager
        self.node_counts = node_counts
        self.clock = clock
        self.stats = SyncStats()
        self.repo = PolicyRepository(
            repo, cluster=cluster, on_commit=self._on_commit, branch=branch,
            state_dir=state_dir, identity=identity, fetch_interval=fetch_interval,
            status_min_interval=status_min_interval, on_landed=self._on_landed,
            on_skipped=self._on_skipped, credentials=git_credentials,
        )
        if signing is not None:
            self.repo.mirror.signing = signing
        if metrics is not None:
            for part in (self.repo.source, self.repo.policy_publisher, self.repo.status_publisher):
                part.on_git_error = metrics.count_git_error
        self.branch = branch
        self._cond = threading.Condition()
        self._acting = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # what the sources saw (guarded by _cond)
        self._head: str | None = None
        self._head_seen_at: float = 0.0
        self._live: JSON | None = None
        self._live_dirty = False
        self._resync = True
        # what the worker knows (worker thread; _baseline also from on_landed, under _cond)
        self.applied_commit: str | None = None
        self.handled_commit: str | None = None
        #: the person's commit behind ``handled_commit``
        self.handled_source: str | None = None
        self.rejection: dict[str, Any] | None = None
        self._baseline: dict[str, Any] | None = None
        self._restored = False
        self._pending_write_backs: dict[str, tuple[FieldPath, Any]] = {}
        self._landed_early: list[tuple[FieldPath, Any]] = []
        self._last_body: dict[str, Any] | None = None
        self._last_drift_repair = 0.0
        self._retry_at: float | None = None
        self._recheck_at: float | None = None
        self._failing = False
        self._last_drift: list[str] = []
        self._failures_seen = 0
        #: write-back path -> since when the cluster shows a value whose reason is not written yet
        self._unexplained_since: dict[FieldPath, float] = {}
        self._rollback_seen: str | None = None
        self._backoff = 0.2
        self.watch = ListWatch(
            api, cluster_operator_path(), on_event=self._on_cluster_operator,
            query={"fieldSelector": f"metadata.name={cluster_operator}"},
            name="sync clusteroperator",
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ClusterSync:
        self.watch.start()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"sync-{self.cluster}",
                                        daemon=True)
        self._thread.start()
        self.repo.start()
        return self

    def stop(self) -> None:
        """Stop acting, then flush what waits for Git (a snapshot not yet due is queued)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(15)
            self._thread = None
        self.watch.stop()
        self.repo.stop()

    @property
    def alive(self) -> bool:
        """The worker runs (liveness)."""
        return self._thread is not None and self._thread.is_alive()

    def synced(self) -> bool:
        return self.watch.wait_synced(0)

    def wait_synced(self, timeout: float = 30.0) -> bool:
        return self.watch.wait_synced(timeout)

    def trigger(self) -> None:
        """Fetch now (the webhook receiver calls this)."""
        self.repo.trigger()

    def resync(self) -> None:
        """Look at the branch head and the live object again (e.g. on becoming the leader)."""
        with self._cond:
            self._resync = True
            self._live_dirty = True
            self._cond.notify_all()

    def stop_acting(self) -> None:
        """Returns once no pass is acting; later passes see ``is_leader`` false."""
        with self._acting:
            pass

    # -- inputs ------------------------------------------------------------------------------
    def _on_commit(self, new: NewCommit) -> None:
        with self._cond:
            self._head = new.sha
            self._head_seen_at = time.monotonic()
            self._cond.notify_all()

    def _on_cluster_operator(self, event: str, obj: JSON) -> None:
        with self._cond:
            self._live = None if event == "DELETED" else obj
            self._live_dirty = True
            self._cond.notify_all()

    def _on_landed(self, change: PendingChange, sha: str) -> None:
        if self.metrics is not None:
            self.metrics.count_status_commit(_commit_kind(change))
        if change.kind != "spec":
            return
        with self._cond:
            for edit in change.edits:
                if self._baseline is not None:
                    self._baseline = record_write_back(self._baseline, edit.field, edit.value)
                else:  # landed before the baseline was restored after a start
                    self._landed_early.append((tuple(edit.field), edit.value))
            self._pending_write_backs.pop(change.change_id, None)

    def _on_skipped(self, skipped: Skipped) -> None:
        with self._cond:
            self._pending_write_backs.pop(skipped.change.change_id, None)

    # -- worker ------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while not self._stop.is_set() and not self._has_work():
                    self._cond.wait(self._wait_timeout())
                if self._stop.is_set():
                    return
            with self._acting:
                if not self.is_leader() or not self.watch.wait_synced(0):
                    self._stop.wait(0.2)
                    continue
                try:
                    self._pass()
                    self._retry_at, self._recheck_at = self._recheck_at, None
                    self._failing = False
                    self._backoff = 0.2
                except (KubeError, GitOpsError) as exc:
                    self.stats.errors += 1
                    if isinstance(exc, GitOpsError) and self.metrics is not None:
                        self.metrics.count_git_error("read")
                    log.warning("sync of %s failed: %s; retrying in %.1f s", self.cluster, exc,
                                self._backoff)
                    self._retry_at = time.monotonic() + self._backoff
                    self._failing = True
                    self._backoff = min(self._backoff * 2, 10.0)
                except Exception:
                    self.stats.errors += 1
                    log.exception("sync of %s failed; retrying in %.1f s", self.cluster,
                                  self._backoff)
                    self._retry_at = time.monotonic() + self._backoff
                    self._failing = True
                    self._backoff = min(self._backoff * 2, 10.0)

    def _has_work(self) -> bool:
        if self._retry_at is not None:
            if time.monotonic() >= self._retry_at:
                return True
            if self._failing:
                return False  # back off: the API server or Git failed the last pass
        return (self._resync or self._live_dirty
                or (self._head is not None and self._head != self.handled_commit))

    def _wait_timeout(self) -> float:
        if self._retry_at is not None:
            return max(0.01, self._retry_at - time.monotonic())
        return 1.0

    def _pass(self) -> None:
        with self._cond:
            resync = self._resync
            self._resync = False
            self._live_dirty = False
            head = self._head
            seen_at = self._head_seen_at
        if resync:
            self._refresh_live()
            branch_head = self.repo.mirror.head(self.branch)
            if branch_head is not None and head is None:
                head = branch_head
                seen_at = time.monotonic()
            if not self._restored:
                self._restore_baseline()
        if head is not None and (resync or head != self.handled_commit):
            self._sync_commit(head, seen_at)
        live = self._current_live()
        if live is not None:
            self._cluster_changed(live)

    # -- state -------------------------------------------------------------------------------
    def _current_live(self) -> JSON | None:
        with self._cond:
            return self._live

    def _refresh_live(self) -> JSON | None:
        try:
            obj = self.api.get(cluster_operator_path(self.name))
        except NotFound:
            obj = None
        with self._cond:
            self._live = obj
        return obj

    def _restore_baseline(self) -> None:
        """After a start: which commit the cluster runs, and its object with our landed
        write-backs (the baseline of SPEC 4.6)."""
        self._restored = True
        live = self._current_live()
        annotations = ((live or {}).get("metadata") or {}).get("annotations") or {}
        commit = annotations.get(SOURCE_COMMIT_ANNOTATION) or self.repo.last_reported_commit()
        if not commit or self.repo.mirror.resolve(f"{commit}^{{commit}}") is None:
            log.info("%s: no record of the commit the cluster runs; a gate is released only "
                     "by a new commit that changes it", self.cluster)
            return
        baseline = self._object_at(commit)
        if baseline is None:
            return
        with self._cond:
            baseline = self._replay_write_backs(baseline, commit)
            for path, value in self._landed_early:
                baseline = record_write_back(baseline, path, value)
            self._landed_early.clear()
            self._baseline = baseline
        self.applied_commit = commit
        log.info("%s: the cluster runs %s (restored baseline)", self.cluster, commit[:12])

    def _replay_write_backs(self, baseline: dict[str, Any], since: str) -> dict[str, Any]:
        """``baseline`` plus the fields our own write-back commits after ``since`` set (call
        with ``_cond`` held: a write-back landing meanwhile is then either in the branch head
        read here or recorded by ``_on_landed`` afterwards, never lost)."""
        head = self.repo.mirror.head(self.branch)
        if head is None or head == since:
            return baseline
        for info in reversed(self.repo.mirror.commits_between(since, head, limit=500)):
            if not info.is_own or not info.subject.startswith("policy("):
                continue
            parent = self.repo.mirror.resolve(f"{info.sha}^")
            before = self._object_at(parent) if parent else None
            after = self._object_at(info.sha)
            if before is None or after is None:
                continue
            for path in CONTROLLER_FIELDS:
                value = read_field(after, path)
                if not same_value(path, read_field(before, path), value):
                    baseline = record_write_back(baseline, path, value)
        return baseline

    def _object_at(self, commit: str) -> dict[str, Any] | None:
        try:
            config = self.repo.reader.config(commit)
            files = self.repo.reader.cluster_files(commit, self.cluster, config)
        except (GitOpsError, ValueError):
            return None
        for policy in files:
            obj = parse_only(policy.data, policy.path).obj
            if isinstance(obj, dict) and obj.get("kind") == "ClusterOperator":
                return obj
        return None

    # -- one commit --------------------------------------------------------------------------
    def _source_of(self, head: str) -> str:
        """The newest commit by a person in the head's history: what the cluster runs, for
        people (the head itself may be one of our status commits on top of it)."""
        for info in self.repo.mirror.commits_between(None, head, limit=500):
            if not info.is_own:
                return info.sha
        return head

    def _sync_commit(self, sha: str, seen_at: float) -> None:
        """Read and validate the head ``sha``; record and report the person's commit."""
        live = self._refresh_live()
        source = self._source_of(sha)
        try:
            self._check_signature(sha, source)
            config = self._config(sha)
            files = self.repo.reader.cluster_files(sha, self.cluster, config)
            if not files:
                if self.handled_commit != sha:
                    log.warning(
                        "%s: commit %s has no policy under %s/: nothing applied; the "
                        "ClusterOperator %s is kept (deleting a cluster folder never deletes "
                        "it)", self.cluster, sha[:12], config.cluster_dir(self.cluster),
                        self.name)
                self.handled_commit = sha
                return
            path, data, obj = self._policy_file(files)
            self._apply(source, path, data, obj, live, seen_at, head=sha)
        except SyncRejected as rejected:
            self._reject(source, rejected, live)
        except PolicyFileRefused as exc:  # a link or an oversized file in the commit
            refused = exc.refused
            self._reject(source, SyncRejected(f"{refused.path}: {refused.reason}", [
                _finding(refused.path, refused.problem, refused.reason)]), live)
        if self.metrics is not None:
            self.metrics.set_sync_rejected(self.cluster, self.rejection is not None)
        self.handled_commit = sha
        self.handled_source = source

    def _config(self, sha: str) -> Any:
        try:
            return self.repo.reader.config(sha)
        except RepoConfigError as exc:
            raise SyncRejected(
                str(exc), [_finding("reconciler.yaml", "repo-config", str(exc))]) from None

    def _check_signature(self, sha: str, source: str) -> None:
        """The person's commit and every commit above it (our own, which must then be signed
        by a trusted key too) carry a trusted signature; so nothing unverified is applied,
        not even under a commit that claims to be the reconciler's."""
        chain = [info.sha for info in self.repo.mirror.commits_between(source, sha, limit=500)]
        for commit in [*chain, source]:
            self._check_one_signature(sha, commit)

    def _check_one_signature(self, sha: str, commit: str) -> None:
        repo_mode = _repo_signature_mode(self.repo.reader.read(sha, "reconciler.yaml"))
        try:
            mode = effective_mode(self.signature_mode, repo_mode)
        except ValueError as exc:
            raise SyncRejected(str(exc), [
                _finding("reconciler.yaml", "signature-config", str(exc))]) from None
        if mode == "none":
            return
        where = f"commit {commit[:12]}"
        if self.verifier is None:
            message = (f"signatures.mode {mode} needs trusted keys, but this reconciler has none "
                       "configured (--trusted-gpg-key / --allowed-signers)")
            raise SyncRejected(message, [_finding(where, "CommitSignatureCheckFailed", message)])
        check = self.verifier.verify(self.repo.mirror.path, commit)
        if not check.trusted:
            raise SyncRejected(check.message, [_finding(where, check.reason, check.message)])
        if check.method is not None and check.method not in methods_for_mode(mode):
            message = (f"commit {commit[:12]} is signed with {check.method.value}, but "
                       f"signatures.mode is {mode}")
            raise SyncRejected(message, [_finding(where, "CommitSignerUntrusted", message)])

    def _policy_file(self, files: list[Any]) -> tuple[str, bytes, dict[str, Any]]:
        candidates = []
        for policy in files:
            obj = parse_only(policy.data, policy.path).obj
            if isinstance(obj, dict) and obj.get("kind") == "ClusterOperator":
                candidates.append((policy.path, policy.data, obj))
        if len(candidates) > 1:
            names = ", ".join(c[0] for c in candidates)
            message = f"more than one ClusterOperator policy for cluster {self.cluster}: {names}"
            raise SyncRejected(message, [_finding(candidates[1][0], "duplicate-policy", message)])
        if candidates:
            return candidates[0]
        # nothing recognisable: the full validation of every file says why
        findings = [f for p in files for f in validate_document(p.data, p.path).errors]
        if not findings:
            findings = [_finding(files[0].path, "no-policy",
                                 "no ClusterOperator document in this cluster's folder")]
        raise SyncRejected(findings[0].message, findings)

    def _apply(self, sha: str, path: str, data: bytes, obj: dict[str, Any], live: JSON | None,
               seen_at: float, *, head: str) -> None:
        """Validate and apply ``obj`` (read at ``head``); ``sha`` is the person's commit."""
        with self._cond:
            baseline = copy.deepcopy(self._baseline)
        changed = (controller_changed_fields((live or {}).get("metadata", {}).get(
            "managedFields") or (), manager=self.controller_manager) if live else set())
        plan = decide_ownership(last_applied=baseline, proposed=obj, cluster=live or {},
                                controller_changed=changed)
        # transition rules compare what will run (kept fields stay as the cluster has them)
        previous = None
        if live is not None:
            owned = sync_owned_tree((live.get("metadata") or {}).get("managedFields") or (),
                                    SYNC_FIELD_MANAGER)
            previous = what_stays(live, obj, owned)
            for decision in plan.decisions:
                if decision.source == "cluster":
                    set_field(previous, decision.field, decision.git_value)
        upgrade = ((live or {}).get("status") or {}).get("upgradeStatus") or {}
        firmware = ((live or {}).get("status") or {}).get("firmwareUpgrade") or {}
        result = validate_document(
            data, path, previous=previous, phase=upgrade.get("phase"),
            firmware_phase=firmware.get("phase"),
        )
        for warning in result.warnings:
            log.info("%s: %s:%d: %s", self.cluster, warning.file, warning.line, warning.message)
        if not result.ok:
            raise SyncRejected(result.errors[0].message, result.errors)
        name = (obj.get("metadata") or {}).get("name")
        if name is not None and name != self.name:
            message = (f"metadata.name is {name!r}, but this reconciler manages the "
                       f"ClusterOperator {self.name!r}")
            raise SyncRejected(message, [_finding(path, "object-name", message)])
        request = None
        if firmware_requested(obj, live, baseline) and FW_POLICY not in plan.kept:
            request = firmware_request_value(
                fw_enable_virt=bool(read_field(obj, FW_VIRT_FIELD) is True), source_commit=sha)
        body = apply_body(obj, name=self.name, source_commit=sha, kept=plan.kept, live=live,
                          firmware_request=request)
        applied = self.api.apply(cluster_operator_path(self.name), body,
                                 field_manager=SYNC_FIELD_MANAGER, force=True)
        elapsed = time.monotonic() - seen_at
        with self._cond:
            self._live = applied
            self._baseline = self._replay_write_backs(copy.deepcopy(obj), head)
        self._last_body = body
        self.applied_commit = sha
        self.rejection = None
        self.stats.applied += 1
        self.stats.applies.append((sha, elapsed))
        del self.stats.applies[:-1000]
        if self.metrics is not None:
            self.metrics.observe_merge_to_apply(self.cluster, elapsed)
        info = self.repo.reader.info(sha)
        kept = ", ".join(".".join(f[1:]) for f in plan.kept)
        log.info("%s: applied %s (%s) by %s to ClusterOperator %s%s", self.cluster, sha[:12],
                 info.subject, info.author, self.name,
                 f"; kept the controller's {kept}" if kept else "",
                 extra={"cluster": self.cluster, "commit": sha})
        if request is not None:
            log.info("%s: firmware upgrade requested by %s; handed to the firmware orchestrator",
                     self.cluster, sha[:12])
        record_event(self.api, self.name, applied, reason="PolicyApplied",
                     message=f"applied commit {sha[:12]}: {info.subject}")
        for decision in plan.write_backs:
            self._write_back(decision.field, decision.cluster_value, decision.git_value, applied)

    def _reject(self, sha: str, rejected: SyncRejected, live: JSON | None) -> None:
        first_time = self.handled_source != sha
        self.rejection = {
            "commit": sha,
            "findings": [f.as_dict() for f in rejected.findings[:MAX_FINDINGS]],
        }
        if not first_time:
            return
        self.stats.rejected += 1
        where = rejected.findings[0] if rejected.findings else None
        located = f"{where.file}:{where.line}: " if where else ""
        log.warning("%s: rejected commit %s, nothing applied: %s%s", self.cluster, sha[:12],
                    located, rejected.reason, extra={"cluster": self.cluster, "commit": sha})
        for finding in rejected.findings[1:MAX_FINDINGS]:
            log.warning("%s:   %s:%d: %s", self.cluster, finding.file, finding.line,
                        finding.message)
        reason = "PolicyRejected"
        if where is not None and where.rule.startswith("Commit"):
            reason = where.rule
        if self.metrics is not None:
            self.metrics.count_sync_rejection(self.cluster, reason)
        record_event(self.api, self.name, live, reason=reason, warning=True,
                     message=f"commit {sha[:12]} not applied: {located}{rejected.reason}")
        if live is not None:
            self._offer_status(live)

    # -- the cluster changed -----------------------------------------------------------------
    def _cluster_changed(self, live: JSON) -> None:
        self._offer_status(live)
        self._update_metrics(live)
        with self._cond:
            baseline = copy.deepcopy(self._baseline)
        if baseline is None or self.applied_commit is None:
            return
        changed = controller_changed_fields(
            (live.get("metadata") or {}).get("managedFields") or (),
            manager=self.controller_manager)
        plan = decide_ownership(last_applied=baseline, proposed=baseline, cluster=live,
                                controller_changed=changed)
        for decision in plan.write_backs:
            self._write_back(decision.field, decision.cluster_value, decision.git_value, live)
        self._repair_drift(live, changed)

    def _repair_drift(self, live: JSON, controller_owned: set[FieldPath]) -> None:
        body = self._last_body
        if body is None:
            return
        drift = drifted(body, live, ignore=controller_owned)
        # the same drift right after a repair (e.g. a field the server prunes) is repaired at
        # most once a minute, so a field the cluster refuses does not cause an apply storm
        if not drift:
            self._last_drift = []
            return
        pause = 60.0 if drift == self._last_drift else 1.0
        if time.monotonic() - self._last_drift_repair < pause:
            return
        self._last_drift = drift
        self._last_drift_repair = time.monotonic()
        log.warning("%s: the ClusterOperator differs from Git at %s (changed in the cluster); "
                    "applying Git's value again", self.cluster, ", ".join(drift[:5]))
        applied = self.api.apply(cluster_operator_path(self.name), body,
                                 field_manager=SYNC_FIELD_MANAGER, force=True)
        self.stats.drift_repairs += 1
        with self._cond:
            self._live = applied

    def _write_back(self, path: FieldPath, cluster_value: Any, git_value: Any,
                    live: JSON) -> None:
        with self._cond:
            if any(p == path and same_value(path, v, cluster_value)
                   for p, v in self._pending_write_backs.values()):
                return
        upgrade = ((live.get("status") or {}).get("upgradeStatus") or {})
        snapshot = {"upgradeStatus": upgrade, "spec": {"driver": (live.get("spec") or {})
                                                       .get("driver") or {}}}
        step = step_label(snapshot)
        spec = self.repo.spec
        if path == PAUSE:
            if cluster_value is not True:
                return
            # the controller sets pause before it writes the condition that says why
            reason = self._reason_once_explained(PAUSE, _pause_reason(upgrade),
                                                 "paused by the rollout controller")
            if reason is None:
                return
            change = spec.pause(self.cluster, reason=reason, step=step,
                                source_commit=self.applied_commit)
        elif path == VERSION:
            if not isinstance(cluster_value, str) or not isinstance(git_value, str):
                return
            change = spec.restore_payload_version(
                self.cluster, version=cluster_value, rolled_back=git_value,
                reason=_rollback_reason(upgrade), step=step, source_commit=self.applied_commit)
        elif path == FW_POLICY:
            if cluster_value != "Never" or not isinstance(git_value, str):
                return
            # the orchestrator sets Never before it writes the phase that says why
            reason = self._reason_once_explained(
                FW_POLICY, _firmware_never_reason((live.get("status") or {})
                                                  .get("firmwareUpgrade") or {}),
                "firmware upgrade ended")
            if reason is None:
                return
            change = spec.firmware_never(self.cluster, reason=reason,
                                         source_commit=self.applied_commit, expected=git_value)
        else:
            return
        with self._cond:
            self._pending_write_backs[change.change_id] = (path, cluster_value)
        self.stats.write_backs += 1
        self.repo.policy_publisher.kick()
        log.info("%s: %s", self.cluster, change.subject)

    def _reason_once_explained(self, path: FieldPath, reason: str | None,
                               generic: str) -> str | None:
        """``reason`` when known; None (look again shortly) while the status write that explains
        the cluster's value may still be on its way; ``generic`` after 2 s without it."""
        if reason is not None:
            self._unexplained_since.pop(path, None)
            return reason
        first = self._unexplained_since.setdefault(path, time.monotonic())
        if time.monotonic() - first < 2.0:
            self._recheck_at = time.monotonic() + 0.5
            return None
        del self._unexplained_since[path]
        return generic

    def _offer_status(self, live: JSON) -> None:
        status = live.get("status") or {}
        snapshot = build_snapshot(live, source_commit=self.applied_commit,
                                  rejection=self.rejection,
                                  firmware=firmware_section(status.get("firmwareUpgrade")))
        self.repo.status.offer(snapshot)

    def _update_metrics(self, live: JSON) -> None:
        if self.metrics is None:
            return
        upgrade = (live.get("status") or {}).get("upgradeStatus") or {}
        inner = upgrade.get("status") or {}
        if upgrade.get("phase"):
            self.metrics.set_rollout_phase(self.cluster, str(upgrade["phase"]))
        self.metrics.set_rollout_conditions(self.cluster, {
            str(c.get("type")) for c in upgrade.get("condition") or ()
            if isinstance(c, Mapping) and c.get("status") == "True"})
        steps = ((((live.get("spec") or {}).get("driver") or {}).get("upgradePolicy") or {})
                 .get("upgradeSteps") or [])
        index = inner.get("currentStepIndex")
        state = inner.get("currentStepState")
        if state:
            self.metrics.set_rollout_step(
                self.cluster, index if isinstance(index, int) else 0, str(state),
                steps=len(steps) if isinstance(steps, list) else 0)
        total = int(inner.get("totalUpgradeReplicas") or 0)
        ready = int(inner.get("totalUpgradeReadyReplicas") or 0)
        counts = dict.fromkeys(NODE_STATES, 0)
        counts["upgraded"] = ready
        counts["pending"] = max(total - ready, 0)
        if self.node_counts is not None:
            counts.update(self.node_counts())
            counts["pending"] = max(total - ready - counts.get("in_flight", 0), 0)
        self.metrics.set_nodes(self.cluster, counts)
        failures = int(inner.get("currentFailureRetry") or 0)
        if failures > self._failures_seen:
            for _ in range(failures - self._failures_seen):
                self.metrics.count_node_failure(self.cluster, "driver-pod-failed")
        self._failures_seen = failures
        rolled_back = next((c for c in upgrade.get("condition") or ()
                            if isinstance(c, Mapping) and c.get("type") == "RolledBack"
                            and c.get("status") == "True"), None)
        marker = (str(rolled_back.get("lastTransitionTime")) if rolled_back else None)
        if rolled_back is not None and marker != self._rollback_seen:
            self.metrics.count_rollback(self.cluster, str(rolled_back.get("reason") or "unknown"))
        self._rollback_seen = marker


def firmware_section(firmware: Any) -> dict[str, Any] | None:
    """``status.firmwareUpgrade`` as the snapshot's ``firmware`` section (docs/firmware.md)."""
    if not isinstance(firmware, Mapping) or not firmware:
        return None
    return firmware_snapshot(firmware)


def _finding(file: str, rule: str, message: str) -> Finding:
    return Finding(file=file, line=1, column=1, pointer="", rule=rule, severity="error",
                   message=message)


def _repo_signature_mode(text: bytes | None) -> str | None:
    if not text:
        return None
    try:
        data = parse_yaml(text, "reconciler.yaml")
    except YamlRefused:
        return None
    section = data.get("signatures") if isinstance(data, Mapping) else None
    mode = section.get("mode") if isinstance(section, Mapping) else None
    return str(mode) if mode is not None else None


def _pause_reason(upgrade: Mapping[str, Any]) -> str | None:
    for condition in upgrade.get("condition") or ():
        if not isinstance(condition, Mapping) or condition.get("status") != "True":
            continue
        if condition.get("type") == "ManualGate":
            return "manual gate"
        if condition.get("type") == "BatchFailed":
            return f"failure fallback: {condition.get('message') or 'failures'}"
    return None


def _rollback_reason(upgrade: Mapping[str, Any]) -> str:
    for condition in upgrade.get("condition") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "RolledBack":
            return str(condition.get("message") or condition.get("reason") or "rolled back")
    phase = upgrade.get("phase")
    if phase == "Disabling":
        return "grey release turned off"
    return "failure threshold reached" if phase == "Terminating" else "rolled back"


def _firmware_never_reason(firmware: Mapping[str, Any]) -> str | None:
    """Why the orchestrator set ``Never`` (None while its status does not say yet): the commit
    subject must not say "finished" when the upgrade was refused or failed."""
    phase = firmware.get("phase")
    if phase == "Refused":
        refusals = firmware.get("refusals") or []
        first = refusals[0] if refusals and isinstance(refusals[0], Mapping) else {}
        node = first.get("node")
        detail = first.get("reason") or "see the status snapshot"
        where = f" ({node})" if node and node != "*" else ""
        return f"firmware upgrade refused{where}: {detail}"
    if phase == "Failed":
        return f"firmware upgrade failed: {firmware.get('message') or 'see the status snapshot'}"
    return "firmware upgrade finished" if phase == "Completed" else None


def _commit_kind(change: PendingChange) -> str:
    if change.kind == "status":
        return "status"
    fields = {tuple(e.field) for e in change.edits}
    if PAUSE in fields:
        return "pause"
    if VERSION in fields:
        return "rollback"
    return "firmware"


