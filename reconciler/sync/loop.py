"""The sync role's worker for one cluster: threads, wake-ups and scheduling.

Each new commit is read (``observe.py``), judged by the ordered steps (``steps.py``) and applied
or rejected, visibly (``apply.py``); the object's status goes to Git as snapshots, and the
rollout's own spec changes go to Git as write-backs (``drift.py``,
docs/gitops.md#git-stays-the-truth).

Threads: the commit source and the ClusterOperator watch only record what they saw and kick one
worker (``reconciler.runtime.worker.Worker``, the core the controllers run on), which
does everything that acts (apply, events, Git writes) in order. A pass returns when to look
again: a write-back's recheck, a held promotion's recheck. Only the leader acts: each pass holds
the worker's acting barrier and checks ``is_leader`` first, and ``stop_acting()`` (the leader
election's ``on_stopped_leading``) takes the same barrier, so no pass acts after it returned.
A not-leader looks again every 0.2 s; a failed pass is logged and retried after 0.2 s doubling
to 10 s, which kicks do not cut short (``SyncFailures``).

Restart-safe: the commit the cluster runs and the baseline of field ownership are read back
from the object and Git after a start (``baseline.py``). Times come from the injected clocks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from reconciler import clock as clocks
from reconciler.clock import Clock
from reconciler.gitops.commits import Identity
from reconciler.gitops.credentials import GitCredentials
from reconciler.gitops.errors import GitOpsError
from reconciler.gitops.ownership import controller_changed_fields, decide_ownership
from reconciler.gitops.publisher import APPLIED_KINDS, PendingChange, Skipped
from reconciler.gitops.reader import PolicyFileRefused
from reconciler.gitops.repository import PolicyRepository
from reconciler.gitops.source import NewCommit
from reconciler.kube.api import JSON, KubeApi, NotFound
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.watch import ListWatch
from reconciler.names import CLUSTER_OPERATOR_NAME, CONTROLLER_FIELD_MANAGER
from reconciler.notify.ledger import AnnotationLedger
from reconciler.notify.notifier import Notifier
from reconciler.ops.metrics import Metrics
from reconciler.runtime.failures import FailureKind, LoopFailures, PassFailures
from reconciler.runtime.worker import Worker
from reconciler.settings.live import LiveSettings
from reconciler.sync.apply import CommitShell
from reconciler.sync.baseline import Baseline
from reconciler.sync.commit_view import LiveObject
from reconciler.sync.drift import DriftRepair, WriteBacks
from reconciler.sync.observe import observe_commit
from reconciler.sync.record import SyncRecord, SyncStats, log
from reconciler.sync.rollout_metrics import RolloutMetrics, commit_kind
from reconciler.sync.rollout_start import RolloutStart
from reconciler.sync.steps import plan_commit, policy_document
from reconciler.trust.signatures import CommitVerifier
from reconciler.views.waits import GitContext, pause_line

FIRST_BACKOFF = 0.2
#: a change the promotion gate holds is judged again at least this often (seconds)
HOLD_RECHECK = 10.0
MAX_BACKOFF = 10.0
#: how often a replica that is not the leader (or whose watch is not synced) looks again
NOT_LEADER_RECHECK = 0.2


class SyncFailures(LoopFailures):
    """The sync role's failure policy: a pass that raised is counted (a Git error also in the
    metrics) and retried after ``FIRST_BACKOFF`` doubling to ``MAX_BACKOFF`` seconds whatever
    its kind (one run of failures), which kicks do not cut short. No condition: the sync's own
    outcomes are in its status snapshot and Events."""

    def __init__(self, *, cluster: str, monotonic: Clock, stats: SyncStats,
                 metrics: Metrics | None) -> None:
        self.cluster = cluster
        self.stats = stats
        self.metrics = metrics
        self.back_off = PassFailures(monotonic, first_retry=FIRST_BACKOFF, max_retry=MAX_BACKOFF)
        super().__init__(monotonic, what=f"sync of {cluster}", logger=log, retry=self.back_off,
                         stalled=self.back_off, counted=self._count)

    def _count(self, kind: FailureKind, exc: Exception) -> None:
        self.stats.errors += 1
        if isinstance(exc, GitOpsError) and self.metrics is not None:
            self.metrics.count_git_error("read")


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
        clock: Clock = clocks.wall,
        monotonic: Clock = clocks.monotonic,
        git_credentials: GitCredentials | None = None,
        settings: LiveSettings | None = None,
    ) -> None:
        """``node_counts``: node states only a controller in this process knows (in flight,
        unavailable), for the ``gpu_reconciler_nodes`` metric. ``clock``: wall time for what
        is written down (Events); ``monotonic``: every timer, back-off and latency.
        ``settings``: the live view of reconciler.yaml this sync publishes to at each commit it
        applies (the controllers in this process read it)."""
        self.api = api
        self.cluster = cluster
        self.name = cluster_operator
        self.verifier = verifier
        self.signature_mode = signature_mode
        self.metrics = metrics
        self.is_leader = is_leader
        self.controller_manager = controller_field_manager
        self.clock = clock
        self.monotonic = monotonic
        self.stats = SyncStats()
        self.record = SyncRecord()
        self.repo = PolicyRepository(
            repo, cluster=cluster, on_commit=self._on_commit, branch=branch,
            state_dir=state_dir, identity=identity, fetch_interval=fetch_interval,
            status_min_interval=status_min_interval, on_landed=self._on_landed,
            on_skipped=self._on_skipped, credentials=git_credentials, monotonic=monotonic,
        )
        if signing is not None:
            self.repo.mirror.signing = signing
        if metrics is not None:
            for part in (self.repo.source, self.repo.policy_publisher, self.repo.status_publisher):
                part.on_git_error = metrics.count_git_error
        self.branch = branch
        self.baseline = Baseline(self.repo, cluster=cluster, branch=branch)
        self.drift = DriftRepair(api, cluster_operator, cluster=cluster, monotonic=monotonic,
                                 stats=self.stats)
        self.write_backs = WriteBacks(self.repo, cluster=cluster, monotonic=monotonic,
                                      applied_commit=lambda: self.record.applied_commit,
                                      stats=self.stats)
        self.rollout_metrics = (RolloutMetrics(metrics, cluster=cluster, node_counts=node_counts)
                                if metrics is not None else None)
        #: reconciler.yaml of the commit the cluster runs, resolved for it
        #: (docs/configuration.md#a-fleet-of-clusters-clustersname-windows-promotion and
        #: docs/live-clusters.md)
        self.settings = settings or LiveSettings(cluster)
        self.shell = CommitShell(
            api, self.repo, cluster=cluster, cluster_operator=cluster_operator,
            record=self.record, stats=self.stats, baseline=self.baseline, drift=self.drift,
            write_backs=self.write_backs, metrics=metrics, wall=clock, monotonic=monotonic,
            set_live=self._set_live, settings=self.settings,
        )
        #: where the applied commit's policy lives, for the notifications' exact change
        self._git = GitContext(branch=branch)
        #: the commit that started the rollout: the notifications' keys and the forge's
        #: commit statuses (docs/notifications.md, docs/forges.md)
        self.rollout_start = RolloutStart(self.repo, cluster=cluster, record=self.record)
        #: events to chat and webhooks (docs/notifications.md): offered by the passes (the leader's
        #: only)
        self.notifier = Notifier(
            cluster, sinks=lambda: self.settings.current().notify,
            ledger=AnnotationLedger(api, cluster_operator), is_leader=lambda: self.is_leader(),
            git=lambda: self._git, object_name=cluster_operator, wall=clock,
            monotonic=monotonic)
        self.failures = SyncFailures(cluster=cluster, monotonic=monotonic, stats=self.stats,
                                     metrics=metrics)
        self.worker = Worker(
            self._run_pass, name=f"sync-{cluster}", clock=monotonic,
            is_leader=lambda: self.is_leader(), ready=self.synced, failures=self.failures,
            not_leader_requeue=NOT_LEADER_RECHECK, idle_wait=1.0,
        )
        # what the sources saw (guarded by _lock); each change kicks the worker
        self._lock = threading.Lock()
        self._head: str | None = None
        self._head_seen_at: float = 0.0
        self._live: JSON | None = None
        self._live_dirty = False
        self._resync = True
        #: when a held change is judged again (monotonic; None: nothing held; worker thread)
        self._hold_at: float | None = None
        self.watch = ListWatch(
            api, cluster_operator_path(), on_event=self._on_cluster_operator,
            query={"fieldSelector": f"metadata.name={cluster_operator}"},
            name="sync clusteroperator",
        )

    # what the worker knows, for tests and the status command
    @property
    def applied_commit(self) -> str | None:
        return self.record.applied_commit

    @property
    def handled_commit(self) -> str | None:
        return self.record.handled_commit

    @property
    def handled_source(self) -> str | None:
        return self.record.handled_source

    @property
    def rejection(self) -> dict[str, Any] | None:
        return self.record.rejection

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ClusterSync:
        self.watch.start()
        self.worker.start_thread()
        self.repo.start()
        return self

    def stop(self) -> None:
        """Stop acting, then flush what waits for Git (a snapshot not yet due is queued)."""
        self.worker.stop_thread(15)
        self.notifier.stop()
        self.watch.stop()
        self.repo.stop()

    @property
    def alive(self) -> bool:
        """The worker runs (liveness)."""
        return self.worker.thread_alive

    def synced(self) -> bool:
        return self.watch.wait_synced(0)

    def wait_synced(self, timeout: float = 30.0) -> bool:
        return self.watch.wait_synced(timeout)

    def trigger(self) -> None:
        """Fetch now (the webhook receiver calls this)."""
        self.repo.trigger()

    def resync(self) -> None:
        """Look at the branch head and the live object again (e.g. on becoming the leader)."""
        with self._lock:
            self._resync = True
            self._live_dirty = True
        self.notifier.leadership_changed()
        self.worker.kick()

    def stop_acting(self) -> None:
        """Returns once no pass is acting; later passes see ``is_leader`` false."""
        self.worker.stop_acting()

    # -- inputs ------------------------------------------------------------------------------
    def _on_commit(self, new: NewCommit) -> None:
        with self._lock:
            self._head = new.sha
            self._head_seen_at = self.monotonic()
        self.worker.kick()

    def _on_cluster_operator(self, event: str, obj: JSON) -> None:
        with self._lock:
            self._live = None if event == "DELETED" else obj
            self._live_dirty = True
        self.worker.kick()

    def _on_landed(self, change: PendingChange, sha: str) -> None:
        if self.metrics is not None:
            self.metrics.count_status_commit(commit_kind(change))
        if change.kind in APPLIED_KINDS:
            # a policy change of ours to apply (docs/health.md#operator-mode and
            # docs/configuration.md#promotion): fetch now
            self.repo.trigger()
        if change.kind == "spec":
            for edit in change.edits:
                self.baseline.landed(edit.field, edit.value)
        self.write_backs.settled(change)

    def _on_skipped(self, skipped: Skipped) -> None:
        self.write_backs.settled(skipped.change)

    # -- worker ------------------------------------------------------------------------------
    def _run_pass(self) -> float | None:
        """The worker's pass; returns when to look again (monotonic): a write-back's recheck
        or a held change's, whichever comes first."""
        self._pass()
        retry_at = self.write_backs.take_recheck()
        self._hold_at = self._hold_recheck()
        if self._hold_at is not None:
            retry_at = min(retry_at or self._hold_at, self._hold_at)
        return retry_at

    def _pass(self) -> None:
        """One pass: after a (re)start or leadership change, look at the branch and the object
        again; judge a new head; then follow the cluster's changes."""
        with self._lock:
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
                seen_at = self.monotonic()
            if not self.baseline.restored:
                restored = self.baseline.restore(self._current_live())
                if restored is not None:
                    self.record.applied_commit = restored
                    self._settings_at(restored)
        hold_due = (self._hold_at is not None and self.monotonic() >= self._hold_at
                    and (self.record.held is not None or self.record.recheck_at is not None))
        if head is not None and (resync or hold_due or head != self.record.handled_commit):
            self._sync_commit(head, seen_at,
                              recheck=not resync and head == self.record.handled_commit)
        live = self._current_live()
        if live is not None:
            self._cluster_changed(live)

    def _hold_recheck(self) -> float | None:
        """When a change the promotion gate holds is judged again (monotonic): at the earliest
        time it can pass, and at least every ``HOLD_RECHECK`` seconds (the upstream's snapshot
        may change on a status branch, which brings no new policy head)."""
        if self.record.held is None and self.record.recheck_at is None:
            return None
        at = self.monotonic() + HOLD_RECHECK
        if self.record.recheck_at is not None:
            at = min(at, self.monotonic() + max(0.0, self.record.recheck_at - self.clock()))
        return at

    def _sync_commit(self, head: str, seen_at: float, *, recheck: bool = False) -> None:
        """Read ``head``, run the steps, act on the outcome (``recheck``: the same head again,
        for the promotion gate)."""
        view = observe_commit(
            self.repo, head, cluster=self.cluster, cluster_operator=self.name,
            controller_manager=self.controller_manager, live=self._refresh_live(),
            baseline=self.baseline.current(), flag_mode=self.signature_mode,
            verifier=self.verifier, now=self.clock(),
        )
        document = policy_document(view)
        if document is not None:
            self._git = GitContext(policy_file=document.path,
                                   pause_line=pause_line(document.data), branch=self.branch)
        self.shell.settle(view, plan_commit(view), seen_at=seen_at, recheck=recheck)

    def _settings_at(self, commit: str) -> None:
        """After a start: the settings of the commit the cluster runs, in force until a newer
        commit is applied (a head that is rejected keeps them)."""
        try:
            doc = self.repo.reader.config_document(commit)
        except (PolicyFileRefused, GitOpsError) as exc:
            log.warning("%s: reconciler.yaml of %s unreadable (%s)", self.cluster, commit[:12],
                        exc)
            return
        self.settings.offer(doc, source=commit)

    def _cluster_changed(self, live: JSON) -> None:
        """The status to Git, the metrics, write-backs of the controller's changes, and Git's
        values again where the cluster drifted."""
        self._notify(self.shell.offer_status(live))
        if self.rollout_metrics is not None:
            self.rollout_metrics.observe(live)
        baseline = self.baseline.current()
        if baseline is None or self.record.applied_commit is None:
            return
        changed = controller_changed_fields(LiveObject(live).managed_fields,
                                            manager=self.controller_manager)
        plan = decide_ownership(last_applied=baseline, proposed=baseline, cluster=live,
                                controller_changed=changed)
        for decision in plan.write_backs:
            self.write_backs.dispatch(decision.field, decision.cluster_value, decision.git_value,
                                      live)
        repaired = self.drift.repair(live, changed)
        if repaired is not None:
            self._set_live(repaired)

    def _notify(self, snapshot: Mapping[str, Any]) -> None:
        """The snapshot's events to the notifier, keyed by the commit that started the rollout.
        Git unreadable: nothing this pass, and the notifier keeps the snapshot it saw before, so
        a rollout that completed meanwhile is still a transition at the next pass."""
        try:
            rollout = self.rollout_start.commit()
        except (GitOpsError, PolicyFileRefused) as exc:
            log.warning("%s: notifications wait: the commit that started the rollout is not "
                        "readable (%s)", self.cluster, exc)
            return
        except Exception as exc:  # a notification is never worth a failed sync pass
            log.warning("%s: notifications wait: finding the commit that started the rollout "
                        "failed (%s)", self.cluster, type(exc).__name__, exc_info=exc)
            return
        self.notifier.observe(snapshot, rollout=rollout or "")

    # -- the live object ---------------------------------------------------------------------
    def _current_live(self) -> JSON | None:
        with self._lock:
            return self._live

    def _set_live(self, obj: JSON) -> None:
        with self._lock:
            self._live = obj

    def _refresh_live(self) -> JSON | None:
        try:
            obj = self.api.get(cluster_operator_path(self.name))
        except NotFound:
            obj = None
        with self._lock:
            self._live = obj
        return obj
