"""The shell around the pure steps: applies an accepted commit's plan, records a rejection,
and reports both (log, Event, metrics, the status snapshot offered to Git)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from reconciler.clock import Clock
from reconciler.firmware.status_view import firmware_snapshot
from reconciler.fleet.promotion import (
    payload_version,
    promotion_candidate,
    upstream_rolled_back,
)
from reconciler.gitops.edits import EditOutcome, FieldEdit, edit_policy_text
from reconciler.gitops.repository import PolicyRepository
from reconciler.gitops.status_policy import build_snapshot
from reconciler.kube.api import JSON, KubeApi, KubeError
from reconciler.names import ACTIVE_PHASES
from reconciler.ops.metrics import Metrics
from reconciler.policy.findings import Finding
from reconciler.settings.live import LiveSettings
from reconciler.stored_status import firmware_status_of, upgrade_status_of
from reconciler.sync.baseline import Baseline
from reconciler.sync.commit_view import CommitView, PromotionView
from reconciler.sync.drift import DriftRepair, WriteBacks
from reconciler.sync.events import record_event
from reconciler.sync.fleet_measures import FleetMeasures
from reconciler.sync.outcome import Accepted, Held, NothingToApply, Outcome, Rejected
from reconciler.sync.record import SyncRecord, SyncStats, log
from reconciler.sync.steps import ApplyPlan, policy_document
from reconciler.timefmt import format_duration

#: most findings kept in a status snapshot's rejection (the log and the event have them all)
MAX_FINDINGS = 20
#: most apply latencies kept in ``SyncStats.applies``
MAX_APPLIES_KEPT = 1000
#: ``mode: branch`` / ``auto``: the upstream's snapshot is looked at again this often (seconds)
UPSTREAM_RECHECK = 10.0


class NotInstalled(KubeError):
    """The ClusterOperator does not exist and the API server refused to create it from the
    policy file: the vendor's CRD admits only a whole object, which the vendor's chart installs
    (docs/gitops.md#metadata-what-the-sync-applies-and-what-it-leaves-alone). Retried like any
    refusal of the API server: the commit is applied once the object is installed."""

    def __init__(self, refused: KubeError, name: str) -> None:
        super().__init__(
            refused.status, refused.reason,
            f"ClusterOperator {name} is not installed, and the policy file is not a whole object "
            f"the CRD admits ({refused.message}); install the vendor's operator first (its Helm "
            f"chart creates {name}): the commit is applied once it exists",
            method=refused.method, path=refused.path, causes=refused.causes)


class CommitShell:
    """Acts on the outcome of one commit's steps."""

    def __init__(
        self, api: KubeApi, repo: PolicyRepository, *, cluster: str, cluster_operator: str,
        record: SyncRecord, stats: SyncStats, baseline: Baseline, drift: DriftRepair,
        write_backs: WriteBacks, metrics: Metrics | None, wall: Clock, monotonic: Clock,
        set_live: Callable[[JSON], None], settings: LiveSettings,
    ) -> None:
        """``settings``: the live view the applied commits' reconciler.yaml goes to."""
        self.api = api
        self.repo = repo
        self.cluster = cluster
        self.name = cluster_operator
        self.record = record
        self.stats = stats
        self.baseline = baseline
        self.drift = drift
        self.write_backs = write_backs
        self.metrics = metrics
        self.wall = wall
        self.monotonic = monotonic
        self.set_live = set_live
        #: operator mode's holds for the status snapshot (``{kind, until, detail}``; builtin
        #: mode's are in ``upgradeStatus.holds``): set by who knows them (the window watch)
        self.holds: Callable[[], list[dict[str, str]]] = list
        self.settings = settings
        self.fleet_measures = FleetMeasures(api)
        #: each snapshot offered to Git also goes here (forge commit statuses, docs/forges.md)
        self.on_snapshot: Callable[[Mapping[str, Any]], None] | None = None

    def settle(self, view: CommitView, outcome: Outcome[ApplyPlan], *, seen_at: float,
               recheck: bool = False) -> None:
        """Apply, reject or keep; then remember that ``view.head`` was handled. ``recheck``:
        the same head judged again for the promotion gate only (a head already applied is
        not applied again)."""
        if isinstance(outcome, NothingToApply):
            if self.record.handled_commit != view.head:
                log.warning("%s: %s", self.cluster, outcome.message)
            self.record.handled_commit = view.head
            return
        live = view.live.obj if view.live is not None else None
        self.record.upstream_rolled_back = _upstream_rolled_back(view)
        if isinstance(outcome, Held):
            self.hold(view, outcome, live)
            self.promote(view)
            self.record.handled_commit = view.head
            self.record.handled_source = view.source
            return
        held_before = self.record.held
        self.record.held = None
        self.record.recheck_at = None
        warnings = outcome.value.warnings if isinstance(outcome, Accepted) else outcome.warnings
        self._log_warnings(warnings)
        if isinstance(outcome, Accepted | Held):
            self.promote(view)
        if (recheck and isinstance(outcome, Accepted) and held_before is None
                and self.record.applied_commit == view.source):
            return
        if isinstance(outcome, Accepted) and held_before is not None:
            log.info("%s: promotion gate open for %s: applying %s", self.cluster,
                     held_before.get("version"), view.source[:12])
        if isinstance(outcome, Accepted):
            self.apply(view, outcome.value, seen_at=seen_at)
        else:
            self.reject(view.source, outcome, live)
        if self.metrics is not None:
            self.metrics.set_sync_rejected(self.cluster, self.record.rejection is not None)
        self.record.handled_commit = view.head
        self.record.handled_source = view.source

    def apply(self, view: CommitView, plan: ApplyPlan, *, seen_at: float) -> None:
        """Server-side apply of ``plan.body``; then the log line, the Event and the
        write-backs the plan asks for."""
        sha = view.source
        try:
            applied = self.drift.apply_commit(plan.body)
        except KubeError as exc:
            if view.live is None and exc.status == 422:
                raise NotInstalled(exc, self.name) from exc
            raise
        elapsed = self.monotonic() - seen_at
        self.set_live(applied)
        self.baseline.applied(plan.proposed, view.head)
        self.record.applied_commit = sha
        self.record.rejection = None
        if plan.settings is not None:
            self.settings.publish(plan.settings)
        self.stats.applied += 1
        self.stats.applies.append((sha, elapsed))
        del self.stats.applies[:-MAX_APPLIES_KEPT]
        if self.metrics is not None:
            self.metrics.observe_merge_to_apply(self.cluster, elapsed)
        info = self.repo.reader.info(sha)
        kept = ", ".join(".".join(f[1:]) for f in plan.kept)
        log.info("%s: applied %s (%s) by %s to ClusterOperator %s%s", self.cluster, sha[:12],
                 info.subject, info.author, self.name,
                 f"; kept the controller's {kept}" if kept else "",
                 extra={"cluster": self.cluster, "commit": sha})
        if plan.firmware_request is not None:
            log.info("%s: firmware upgrade requested by %s; handed to the firmware orchestrator",
                     self.cluster, sha[:12])
        record_event(self.api, self.name, applied, reason="PolicyApplied",
                     message=f"applied commit {sha[:12]}: {info.subject}", clock=self.wall())
        for decision in plan.write_backs:
            self.write_backs.dispatch(decision.field, decision.cluster_value, decision.git_value,
                                      applied)

    def reject(self, sha: str, rejected: Rejected, live: Mapping[str, Any] | None) -> None:
        """Nothing applied: the findings go to the status snapshot, and the first time for
        this commit to the log, a Warning Event and the rejection metric."""
        first_time = self.record.handled_source != sha
        self.record.rejection = {
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
                     message=f"commit {sha[:12]} not applied: {located}{rejected.reason}",
                     clock=self.wall())
        if live is not None:
            self.offer_status(live)

    def hold(self, view: CommitView, held: Held, live: Mapping[str, Any] | None) -> None:
        """Nothing applied: the promotion gate holds the change (docs/configuration.md#promotion).
        The first time for this commit and version: the log and an Event "held by promotion gate";
        the snapshot says so; the same head is judged again at ``recheck_at`` (and on every new
        head)."""
        first_time = self.record.held is None or any(
            self.record.held.get(k) != held.held.get(k) for k in ("commit", "version"))
        self.record.held = dict(held.held)
        self.record.recheck_at = held.recheck_at
        if first_time:
            log.info("%s: commit %s %s", self.cluster, view.source[:12], held.reason,
                     extra={"cluster": self.cluster, "commit": view.source})
            record_event(self.api, self.name, live, reason="PromotionHeld",
                         message=f"commit {view.source[:12]} {held.reason}", clock=self.wall())
        if live is not None:
            self.offer_status(live)

    def offer_status(self, live: Mapping[str, Any]) -> dict[str, Any]:
        """The status snapshot of ``live`` to Git (coalesced by the status writer); returned
        for the notifications."""
        firmware = firmware_status_of(live)
        upgrade = upgrade_status_of(live)
        # a hold holds a rollout: none is recorded while none runs (no commits for that alone)
        active = isinstance(upgrade, Mapping) and upgrade.get("phase") in ACTIVE_PHASES
        upgrade_map = upgrade if isinstance(upgrade, Mapping) else {}
        topology = self.settings.current().rollout.topology
        snapshot = build_snapshot(live, source_commit=self.record.applied_commit,
                                  rejection=self.record.rejection,
                                  firmware=firmware_section(firmware),
                                  promotion=self._promotion_section(),
                                  holds=self.holds() if active else [],
                                  install_seconds=self.fleet_measures.measured(upgrade_map),
                                  domains=self.fleet_measures.domains(
                                      topology.key if topology is not None else None,
                                      upgrade_map))
        self.repo.status.offer(snapshot)
        if self.on_snapshot is not None:
            self.on_snapshot(snapshot)
        return snapshot

    def promote(self, view: CommitView) -> None:
        """``mode: branch`` and ``auto`` (docs/configuration.md#promotion): once a version the
        upstream completed passes the gate, ``branch`` pushes ``promote/<cluster>/<version>`` with
        this cluster's policy naming it, on top of the head, for a person to merge; ``auto`` commits
        the same edit to the watched branch, a policy change the next pass applies. Once each (an
        existing branch is left alone; the auto commit's change id is found again in Git). The
        upstream's snapshot changes with status commits, which bring no new head: looked at
        again every ``UPSTREAM_RECHECK`` seconds."""
        gate = view.promotion
        document = policy_document(view)
        if (gate is None or gate.error is not None or gate.mode not in ("branch", "auto")
                or document is None):
            return
        file_version = payload_version(document.obj)
        version, earliest = promotion_candidate(
            gate.upstream, gate.snapshot, file_version, soak=gate.soak, now=self.wall())
        again = earliest if earliest is not None else view.now + UPSTREAM_RECHECK
        self.record.recheck_at = (again if self.record.recheck_at is None
                                  else min(self.record.recheck_at, again))
        if version is None:
            return
        if gate.mode == "auto":
            self._commit_promotion(view, gate, version, file_version)
            return
        branch = f"promote/{self.cluster}/{version}"
        mirror = self.repo.mirror
        if branch in self.record.promoted or mirror.head(branch) is not None:
            self.record.promoted.add(branch)
            return
        edited = edit_policy_text(document.data.decode("utf-8"), [
            FieldEdit(("spec", "driver", "payload", "version"), version)])
        if edited.outcome is not EditOutcome.CHANGED or edited.text is None:
            log.warning("%s: cannot write the promotion of %s into %s: %s", self.cluster,
                        version, document.path, edited.detail)
            self.record.promoted.add(branch)
            return
        message = (f"{self.cluster}: promote the driver to {version}\n\n{gate.upstream} "
                   f"completed {version} and the promotion gate passed (soak "
                   f"{format_duration(gate.soak)}); merge this to upgrade {self.cluster}.\n")
        commit = mirror.create_commit(view.head, {document.path: edited.text.encode()},
                                      message, self.repo.policy_publisher.identity)
        mirror.push(commit, branch)
        self.record.promoted.add(branch)
        log.info("%s: pushed %s (%s) for a person to merge", self.cluster, branch, commit[:12])
        record_event(self.api, self.name, view.live.obj if view.live is not None else None,
                     reason="PromotionBranchPushed",
                     message=f"{version} passed the promotion gate after {gate.upstream}: "
                             f"pushed {branch} for a person to merge", clock=self.wall())

    def _commit_promotion(self, view: CommitView, gate: PromotionView, version: str,
                          file_version: str | None) -> None:
        """``mode: auto``: the promotion goes to the policy publisher (pushed without force,
        rebased on a race like every commit of ours), then applied as a new head."""
        key = f"auto:{self.cluster}/{version}"
        if key in self.record.promoted:
            return
        record = gate.snapshot.get("lastRollout") if gate.snapshot is not None else None
        finished = str(record.get("finishedAt") or "") if isinstance(record, Mapping) else ""
        change = self.repo.spec.promote(self.cluster, version=version, replaces=file_version,
                                        upstream=gate.upstream, finished_at=finished,
                                        soak=format_duration(gate.soak))
        self.record.promoted.add(key)
        log.info("%s: %s passed the promotion gate after %s: committing it (mode auto)",
                 self.cluster, version, gate.upstream,
                 extra={"cluster": self.cluster, "commit": view.source})
        record_event(self.api, self.name, view.live.obj if view.live is not None else None,
                     reason="PromotionCommitted",
                     message=f"{version} passed the promotion gate after {gate.upstream}: "
                             f"committed \"{change.subject}\" to the watched branch",
                     clock=self.wall())

    def _promotion_section(self) -> dict[str, Any] | None:
        section: dict[str, Any] = {}
        if self.record.held is not None:
            section["held"] = self.record.held
        if self.record.upstream_rolled_back is not None:
            section["upstreamRolledBack"] = self.record.upstream_rolled_back
        return section or None

    def _log_warnings(self, warnings: tuple[Finding, ...]) -> None:
        for warning in warnings:
            log.info("%s: %s:%d: %s", self.cluster, warning.file, warning.line, warning.message)


def _upstream_rolled_back(view: CommitView) -> dict[str, Any] | None:
    gate = view.promotion
    if gate is None or gate.error is not None or view.live is None:
        return None
    return upstream_rolled_back(gate.upstream, gate.snapshot, payload_version(view.live.obj))


def firmware_section(firmware: Any) -> dict[str, Any] | None:
    """The firmware flow's record as the snapshot's ``firmware`` section (docs/firmware.md)."""
    if not isinstance(firmware, Mapping) or not firmware:
        return None
    return firmware_snapshot(firmware)
