"""The sync role's worker for one cluster: threads, wake-ups and scheduling.

Each new commit is read (``observe.py``), judged by the ordered steps (``steps.py``) and applied
or rejected, visibly (``apply.py``); the object's status goes to Git as snapshots, and the
rollout's own spec changes go to Git as write-backs (``drift.py``, SPEC 4.6).

Threads: the commit source and the ClusterOperator watch only record what they saw and wake one
worker, which does everything that acts (apply, events, Git writes) in order. Only the leader
acts: each pass holds ``_acting`` and checks ``is_leader`` first, and ``stop_acting()`` (the
leader election's ``on_stopped_leading``) takes the same lock, so no pass acts after it returned.

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
from reconciler.gitops.repository import PolicyRepository
from reconciler.gitops.source import NewCommit
from reconciler.kube.api import JSON, KubeApi, KubeError, NotFound
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.watch import ListWatch
from reconciler.names import CLUSTER_OPERATOR_NAME, CONTROLLER_FIELD_MANAGER
from reconciler.ops.metrics import Metrics
from reconciler.policy.repo_config import RepoConfigFile
from reconciler.sync.apply import CommitShell
from reconciler.sync.baseline import Baseline
from reconciler.sync.commit_view import LiveObject
from reconciler.sync.drift import DriftRepair, WriteBacks
from reconciler.sync.observe import observe_commit
from reconciler.sync.record import SyncRecord, SyncStats, log
from reconciler.sync.rollout_metrics import RolloutMetrics, commit_kind
from reconciler.sync.steps import plan_commit
from reconciler.trust.signatures import CommitVerifier

FIRST_BACKOFF = 0.2
#: a change the promotion gate holds is judged again at least this often (seconds)
HOLD_RECHECK = 10.0
MAX_BACKOFF = 10.0


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
    ) -> None:
        """``node_counts``: node states only a controller in this process knows (in flight,
        unavailable), for the ``gpu_reconciler_nodes`` metric. ``clock``: wall time for what
        is written down (Events); ``monotonic``: every timer, back-off and latency."""
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
        self.config_file: RepoConfigFile | None = None
        self.shell = CommitShell(
            api, self.repo, cluster=cluster, cluster_operator=cluster_operator,
            record=self.record, stats=self.stats, baseline=self.baseline, drift=self.drift,
            write_backs=self.write_backs, metrics=metrics, wall=clock, monotonic=monotonic,
            set_live=self._set_live,
        )
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
        # the worker's schedule (worker thread)
        self._retry_at: float | None = None
        #: when a held change is judged again (monotonic; None: nothing held)
        self._hold_at: float | None = None
        self._failing = False
        self._backoff = FIRST_BACKOFF
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
            self._head_seen_at = self.monotonic()
            self._cond.notify_all()

    def _on_cluster_operator(self, event: str, obj: JSON) -> None:
        with self._cond:
            self._live = None if event == "DELETED" else obj
            self._live_dirty = True
            self._cond.notify_all()

    def _on_landed(self, change: PendingChange, sha: str) -> None:
        if self.metrics is not None:
            self.metrics.count_status_commit(commit_kind(change))
        if change.kind in APPLIED_KINDS:
            self.repo.trigger()  # a policy change of ours to apply (SPEC 10): fetch now
        if change.kind != "spec":
            return
        for edit in change.edits:
            self.baseline.landed(edit.field, edit.value)
        self.write_backs.settled(change)

    def _on_skipped(self, skipped: Skipped) -> None:
        self.write_backs.settled(skipped.change)

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
                    self._retry_at = self.write_backs.take_recheck()
                    self._hold_at = self._hold_recheck()
                    if self._hold_at is not None:
                        self._retry_at = min(self._retry_at or self._hold_at, self._hold_at)
                    self._failing = False
                    self._backoff = FIRST_BACKOFF
                except (KubeError, GitOpsError) as exc:
                    self.stats.errors += 1
                    if isinstance(exc, GitOpsError) and self.metrics is not None:
                        self.metrics.count_git_error("read")
                    log.warning("sync of %s failed: %s; retrying in %.1f s", self.cluster, exc,
                                self._backoff)
                    self._back_off()
                except Exception:
                    self.stats.errors += 1
                    log.exception("sync of %s failed; retrying in %.1f s", self.cluster,
                                  self._backoff)
                    self._back_off()

    def _back_off(self) -> None:
        self._retry_at = self.monotonic() + self._backoff
        self._failing = True
        self._backoff = min(self._backoff * 2, MAX_BACKOFF)

    def _has_work(self) -> bool:
        if self._retry_at is not None:
            if self.monotonic() >= self._retry_at:
                return True
            if self._failing:
                return False  # back off: the API server or Git failed the last pass
        return (self._resync or self._live_dirty
                or (self._head is not None and self._head != self.record.handled_commit))

    def _wait_timeout(self) -> float:
        if self._retry_at is not None:
            return max(0.01, self._retry_at - self.monotonic())
        return 1.0

    def _pass(self) -> None:
        """One pass: after a (re)start or leadership change, look at the branch and the object
        again; judge a new head; then follow the cluster's changes."""
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
                seen_at = self.monotonic()
            if not self.baseline.restored:
                restored = self.baseline.restore(self._current_live())
                if restored is not None:
                    self.record.applied_commit = restored
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
        if view.config is not None:
            #: the settings of the last commit read (the controller's windows, SPEC 10)
            self.config_file = view.config
        self.shell.settle(view, plan_commit(view), seen_at=seen_at, recheck=recheck)

    def _cluster_changed(self, live: JSON) -> None:
        """The status to Git, the metrics, write-backs of the controller's changes, and Git's
        values again where the cluster drifted."""
        self.shell.offer_status(live)
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

    # -- the live object ---------------------------------------------------------------------
    def _current_live(self) -> JSON | None:
        with self._cond:
            return self._live

    def _set_live(self, obj: JSON) -> None:
        with self._cond:
            self._live = obj

    def _refresh_live(self) -> JSON | None:
        try:
            obj = self.api.get(cluster_operator_path(self.name))
        except NotFound:
            obj = None
        with self._cond:
            self._live = obj
        return obj
