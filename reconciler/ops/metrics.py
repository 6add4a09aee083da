"""Prometheus metric names and the registry that holds them.

One ``Metrics`` object per process, built on its own ``CollectorRegistry`` (not the library's
global one) so tests and several instances in one process do not collide. Names follow the
Prometheus conventions: ``gpu_reconciler_`` prefix, base units, ``_total`` for counters.

Phase and step state are exported as state sets (one series per possible value, 1 for the
current one, 0 for the others), so a dashboard can graph a phase change and an alert can
match ``gpu_reconciler_rollout_phase{phase="Terminating"} == 1``.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from reconciler.names import Phase, StepState

PREFIX: Final = "gpu_reconciler"

# docs/rollout.md#status-fields: status.upgradeStatus.phase and status.currentStepState values.
ROLLOUT_PHASES: Final = tuple(phase.value for phase in Phase)
STEP_STATES: Final = tuple(state.value for state in StepState)

# status.upgradeStatus.condition types (reconciler.rollout.status); a caller may add others.
ROLLOUT_CONDITIONS: Final = ("Progressing", "ManualGate", "BatchFailed", "RolledBack")

# Node states the rollout reports (docs/rollout.md#upgrading-one-node); a caller may add others,
# these always exist so a dashboard shows explicit zeros.
NODE_STATES: Final = ("upgraded", "in_flight", "pending", "failed", "unavailable", "waiting_busy")

# What a rollout can wait for a person at: a gate (ManualGate) or a fallback pause (BatchFailed).
AWAITING_PERSON: Final = ("gate", "fallback")

# Git operations that count their failures; rollback reasons (reconciler.rollout.status).
GIT_OPERATIONS: Final = ("fetch", "push", "read")
ROLLBACK_REASONS: Final = ("FailureThresholdReached", "RolloutDisabled")

# Drain (docs/live-clusters.md#the-drain): what each eviction request or drain deletion came to
# (reconciler.controller.act.EVICTION_RESULTS).
DRAIN_EVICTION_RESULTS: Final = ("evicted", "refused", "gone", "error", "deleted")

WEBHOOK_OUTCOMES: Final = (
    "triggered",
    "ignored",
    "ping",
    "unauthorized",
    "too_large",
    "bad_request",
    "length_required",
    "method_not_allowed",
    "not_found",
    "error",
)

# Merge to apply spans seconds (webhook) to minutes (interval fetch, slow API server).
MERGE_TO_APPLY_BUCKETS: Final = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


class Metrics:
    """The daemon's metrics. Methods take domain values and keep label sets consistent."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.merge_to_apply_seconds = Histogram(
            f"{PREFIX}_merge_to_apply_seconds",
            "Seconds from a commit reaching the watched branch (commit time, or webhook "
            "receipt when earlier known) to the ClusterOperator being updated with it.",
            ["cluster"],
            buckets=MERGE_TO_APPLY_BUCKETS,
            registry=r,
        )
        self.rollout_phase = Gauge(
            f"{PREFIX}_rollout_phase",
            "Rollout phase (status.upgradeStatus.phase): 1 for the current phase, 0 otherwise.",
            ["cluster", "phase"],
            registry=r,
        )
        self.rollout_step = Gauge(
            f"{PREFIX}_rollout_step",
            "Current rollout step, 1-based (status.currentStepIndex); 0 means no step yet.",
            ["cluster"],
            registry=r,
        )
        self.rollout_step_state = Gauge(
            f"{PREFIX}_rollout_step_state",
            "Step state (status.currentStepState): 1 for the current state, 0 otherwise.",
            ["cluster", "state"],
            registry=r,
        )
        self.rollout_condition = Gauge(
            f"{PREFIX}_rollout_condition",
            "Rollout conditions (status.upgradeStatus.condition): 1 while the condition of "
            "that type is True, 0 otherwise.",
            ["cluster", "type"],
            registry=r,
        )
        self.rollout_steps_total = Gauge(
            f"{PREFIX}_rollout_steps",
            "Number of steps in the active rollout's upgradeSteps.",
            ["cluster"],
            registry=r,
        )
        # a start time rather than a duration: the wait's age is time() - value in Prometheus,
        # right across scrapes, restarts and leader changes without any state here
        self.rollout_awaiting_person = Gauge(
            f"{PREFIX}_rollout_awaiting_person_timestamp_seconds",
            "Unix time the rollout began to wait for a person, by what it waits at (gate: "
            "ManualGate, fallback: BatchFailed; the condition's lastTransitionTime); 0 while "
            "it does not wait there.",
            ["cluster", "wait"],
            registry=r,
        )
        self.nodes = Gauge(
            f"{PREFIX}_nodes",
            "Rollout nodes by state.",
            ["cluster", "state"],
            registry=r,
        )
        self.node_failures_total = Counter(
            f"{PREFIX}_node_failures_total",
            "Node upgrade failures (one per failed pod attempt), by failure reason.",
            ["cluster", "reason"],
            registry=r,
        )
        self.rollbacks_total = Counter(
            f"{PREFIX}_rollbacks_total",
            "Rollbacks started, by reason (FailureThresholdReached, RolloutDisabled).",
            ["cluster", "reason"],
            registry=r,
        )
        self.sync_rejected = Gauge(
            f"{PREFIX}_sync_rejected",
            "1 while the newest commit on the watched branch is rejected (nothing of it "
            "applied; the cluster keeps the last applied commit), 0 otherwise.",
            ["cluster"],
            registry=r,
        )
        self.sync_rejections_total = Counter(
            f"{PREFIX}_sync_rejections_total",
            "Commits rejected, by reason (PolicyRejected, or the commit check that failed).",
            ["cluster", "reason"],
            registry=r,
        )
        self.status_commits_total = Counter(
            f"{PREFIX}_status_commits_total",
            "Commits the reconciler pushed to Git, by kind (status, pause, rollback, firmware, "
            "promotion).",
            ["kind"],
            registry=r,
        )
        self.git_errors_total = Counter(
            f"{PREFIX}_git_errors_total",
            "Git operations that failed, by operation (fetch, push, read).",
            ["operation"],
            registry=r,
        )
        self.webhook_requests_total = Counter(
            f"{PREFIX}_webhook_requests_total",
            "Webhook requests by outcome.",
            ["outcome"],
            registry=r,
        )
        self.commit_verifications_total = Counter(
            f"{PREFIX}_commit_verifications_total",
            "Commit signature checks by verdict (trusted, unsigned, untrusted_key, "
            "bad_signature, error).",
            ["verdict"],
            registry=r,
        )
        # the one metric named as its issue gives it, without the project's prefix: dashboards
        # and alerts are written against that name
        self.health_checks_total = Counter(
            "reconciler_health_check_total",
            "Health check readings (docs/health.md), by check and result (pass, fail, waiting: no "
            "usable answer).",
            ["check", "result"],
            registry=r,
        )
        self.forge_status_posts_total = Counter(
            f"{PREFIX}_forge_status_posts_total",
            "Commit statuses sent to the forge (docs/forges.md), by forge and outcome (posted, "
            "failed: one failed try, given_up: retries spent, dropped: queue full).",
            ["forge", "outcome"],
            registry=r,
        )
        self.drain_evictions_total = Counter(
            f"{PREFIX}_drain_evictions_total",
            "Drain's pod evictions (docs/live-clusters.md#the-drain), by result (evicted, "
            "refused: a disruption budget's 429, gone: the pod was gone already, error: any "
            "other answer, deleted: onTimeout delete).",
            ["result"],
            registry=r,
        )
        self.leader = Gauge(
            f"{PREFIX}_leader",
            "1 while this replica holds the leader Lease, 0 otherwise.",
            ["lease"],
            registry=r,
        )
        # Explicit zeros: a counter that never fired still shows up, so rate() and absent()
        # behave from the first scrape.
        for outcome in WEBHOOK_OUTCOMES:
            self.webhook_requests_total.labels(outcome=outcome)
        for operation in GIT_OPERATIONS:
            self.git_errors_total.labels(operation=operation)
        for result in DRAIN_EVICTION_RESULTS:
            self.drain_evictions_total.labels(result=result)

    def set_rollout_phase(self, cluster: str, phase: str) -> None:
        for reason in ROLLBACK_REASONS:  # explicit zeros: the first rollback shows in increase()
            self.rollbacks_total.labels(cluster=cluster, reason=reason)
        known = set(ROLLOUT_PHASES) | {phase}
        for value in sorted(known):
            self.rollout_phase.labels(cluster=cluster, phase=value).set(1 if value == phase else 0)

    def set_rollout_step(
        self, cluster: str, step_index: int, step_state: str, steps: int | None = None
    ) -> None:
        self.rollout_step.labels(cluster=cluster).set(step_index)
        for value in sorted(set(STEP_STATES) | {step_state}):
            self.rollout_step_state.labels(cluster=cluster, state=value).set(
                1 if value == step_state else 0
            )
        if steps is not None:
            self.rollout_steps_total.labels(cluster=cluster).set(steps)

    def set_rollout_conditions(self, cluster: str, true_types: set[str]) -> None:
        """1 for each condition type in ``true_types``, 0 for the other known ones."""
        for ctype in sorted(set(ROLLOUT_CONDITIONS) | true_types):
            self.rollout_condition.labels(cluster=cluster, type=ctype).set(
                1 if ctype in true_types else 0
            )

    def set_awaiting_person(self, cluster: str, since: dict[str, float]) -> None:
        """The start of each wait in ``since`` (``gate``, ``fallback``); 0 for the others."""
        for wait in sorted(set(AWAITING_PERSON) | set(since)):
            self.rollout_awaiting_person.labels(cluster=cluster, wait=wait).set(
                since.get(wait, 0))

    def set_sync_rejected(self, cluster: str, rejected: bool) -> None:
        self.sync_rejected.labels(cluster=cluster).set(1 if rejected else 0)

    def count_sync_rejection(self, cluster: str, reason: str) -> None:
        self.sync_rejections_total.labels(cluster=cluster, reason=reason).inc()

    def set_nodes(self, cluster: str, counts: dict[str, int]) -> None:
        """Replace the per-state node counts; states not given are 0."""
        for state in sorted(set(NODE_STATES) | set(counts)):
            self.nodes.labels(cluster=cluster, state=state).set(counts.get(state, 0))

    def observe_merge_to_apply(self, cluster: str, seconds: float) -> None:
        self.merge_to_apply_seconds.labels(cluster=cluster).observe(max(0.0, seconds))

    def count_node_failure(self, cluster: str, reason: str) -> None:
        self.node_failures_total.labels(cluster=cluster, reason=reason).inc()

    def count_rollback(self, cluster: str, reason: str) -> None:
        self.rollbacks_total.labels(cluster=cluster, reason=reason).inc()

    def count_health_check(self, check: str, result: str) -> None:
        self.health_checks_total.labels(check=check, result=result).inc()

    def count_status_commit(self, kind: str = "status") -> None:
        self.status_commits_total.labels(kind=kind).inc()

    def count_git_error(self, operation: str) -> None:
        self.git_errors_total.labels(operation=operation).inc()

    def count_webhook_request(self, outcome: str) -> None:
        self.webhook_requests_total.labels(outcome=outcome).inc()

    def count_commit_verification(self, verdict: str) -> None:
        self.commit_verifications_total.labels(verdict=verdict).inc()

    def count_forge_status_post(self, forge: str, outcome: str) -> None:
        self.forge_status_posts_total.labels(forge=forge, outcome=outcome).inc()

    def count_drain_eviction(self, result: str) -> None:
        self.drain_evictions_total.labels(result=result).inc()

    def set_leader(self, lease: str, leading: bool) -> None:
        self.leader.labels(lease=lease).set(1 if leading else 0)

    def exposition(self) -> bytes:
        """The text exposition format, as served on ``/metrics``."""
        data: bytes = generate_latest(self.registry)
        return data
