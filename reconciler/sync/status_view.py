"""What ``reconciler status`` shows: pure, from a status snapshot (the Git file's shape, or the
same built from the live object) and ``now``.

The report answers: which phase and step, how far each batch is, what failed, and what the
rollout waits for and why, plus the firmware flow's per-node stages. What it waits for comes
from the read model (``reconciler.views.waits``, the dashboard's too): ``waits`` are the typed
entries, ``waiting_for`` their sentences.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from reconciler.firmware.status_view import firmware_rows, firmware_summary
from reconciler.policy.upgrade_policy import UpgradePolicy, pause_ms_of
from reconciler.stored_status import conditions_in_force
from reconciler.timefmt import format_wait
from reconciler.timefmt import parse_time_or_none as parse_time
from reconciler.views.nodes import NodeStates, recorded_skips
from reconciler.views.waits import GitContext, Wait, draining_entries, health_rows, waits

__all__ = ["StatusReport", "StepRow", "firmware_lines", "health_rows", "parse_time", "report"]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class StepRow:
    step: int
    target: int
    nodes: int
    pause: str
    state: str
    #: failures the step tolerates (docs/rollout.md#failures-tolerated-in-a-step)
    toleration: int = 0


@dataclass(slots=True)
class StatusReport:
    cluster: str
    phase: str
    step: str
    step_state: str
    upgrading: bool
    source_commit: str | None
    observed_at: str | None
    version: str | None
    nodes_ready: int
    nodes_total: int
    failures: int
    max_failures: int
    message: str
    #: what the rollout waits for, in a person's words (each entry of ``waits`` in a sentence)
    waiting_for: list[str] = field(default_factory=list)
    #: what the rollout waits for, typed (``reconciler.views.waits``): kind, title, detail,
    #: action, ...
    waits: list[Wait] = field(default_factory=list)
    steps: list[StepRow] = field(default_factory=list)
    conditions: list[dict[str, str]] = field(default_factory=list)
    rejection: dict[str, Any] | None = None
    firmware: dict[str, Any] | None = None
    #: the change the promotion gate holds (docs/configuration.md#promotion)
    held: dict[str, Any] | None = None
    #: the upstream rolled back the version this cluster runs (docs/configuration.md#promotion)
    upstream_rolled_back: dict[str, Any] | None = None
    busy_nodes: dict[str, list[str]] = field(default_factory=dict)
    unavailable_nodes: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    #: each health check's last value and verdict (docs/health.md): check, node (node checks),
    #: state (Passed, Waiting, Failed), value, since
    health_checks: list[dict[str, str]] = field(default_factory=list)
    # -- live clusters (docs/live-clusters.md and docs/rollout.md#topology-aware-waves)
    #: the topology the rollout started with (``upgradeStatus.topology``: key, order, ...)
    topology: dict[str, Any] | None = None
    #: progress per domain of the topology key (from the cluster's nodes only): domain (None:
    #: the nodes without the label), nodes, upgraded, inFlight, draining, failed, skipped,
    #: pending, unavailable, done, states
    domains: list[dict[str, Any]] = field(default_factory=list)
    #: ``upgradeStatus.draining`` as it is: node, since, pods, budgets, waitingFor
    draining: list[dict[str, Any]] = field(default_factory=list)
    #: the nodes the rollout skipped (``upgradeStatus.skipped``, and from the cluster the nodes
    #: in state skipped), by name
    skipped: list[str] = field(default_factory=list)
    #: failed nodes a step's toleration left behind (docs/rollout.md#failures-tolerated-in-a-step;
    #: from the cluster, the nodes in state tolerated), by name
    tolerated: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["waits"] = [w.to_json() for w in self.waits]
        return {_camel(k): v for k, v in data.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _pause_label(step: Mapping[str, Any]) -> str:
    pause = pause_ms_of(step)  # left out (or {}): a gate
    if pause is None:
        return "gate (a person)"
    return "none" if pause == 0 else format_wait(pause / 1000)


def report(snapshot: Mapping[str, Any], *, now: float,
           nodes: NodeStates | Mapping[str, Any] | None = None,
           git: GitContext | None = None) -> StatusReport:
    """The report for one cluster. ``nodes`` (from the cluster only): the node states, or a
    mapping of ``busy`` (node -> pods that hold a GPU) and ``unavailable`` (node -> why).
    ``git``: where the policy lives, for the actions (None: no Git; the object is patched)."""
    states = nodes if isinstance(nodes, NodeStates) else NodeStates(
        busy={k: tuple(v) for k, v in _mapping(_mapping(nodes).get("busy")).items()},
        unavailable={k: str(v) for k, v in _mapping(_mapping(nodes).get("unavailable")).items()})
    upgrade = _mapping(snapshot.get("upgradeStatus"))
    inner = _mapping(upgrade.get("status"))
    driver = _mapping(_mapping(snapshot.get("spec")).get("driver"))
    raw_policy = _mapping(driver.get("upgradePolicy"))
    steps_raw = [s for s in raw_policy.get("upgradeSteps") or () if isinstance(s, Mapping)]
    try:
        policy = UpgradePolicy.from_spec(raw_policy)
    except (ValueError, TypeError, KeyError):
        policy = UpgradePolicy()
    total = _int(inner.get("totalUpgradeReplicas"))
    ready = _int(inner.get("totalUpgradeReadyReplicas"))
    index = _int(inner.get("currentStepIndex"))
    state = str(inner.get("currentStepState") or "")
    phase = str(upgrade.get("phase") or "unknown")
    rows: list[StepRow] = []
    if steps_raw and total:
        try:
            targets = policy.step_targets(total)
            tolerations = policy.step_tolerations(total)
        except (ValueError, ZeroDivisionError):
            targets = tolerations = []
        before = 0
        for number, (step, target) in enumerate(zip(steps_raw, targets, strict=False), 1):
            if number < index or (number == index and state == "Completed"):
                row_state = "done"
            elif number == index:
                row_state = state or "current"
            else:
                row_state = "pending"
            rows.append(StepRow(number, target, max(target - before, 0), _pause_label(step),
                                row_state, tolerations[number - 1]))
            before = max(before, target)
    conditions = [
        {k: str(c.get(k, "")) for k in ("type", "reason", "message", "lastTransitionTime")}
        for c in conditions_in_force(upgrade)
    ]
    payload = _mapping(driver.get("payload"))
    firmware = _mapping(snapshot.get("firmware")) or None
    result = StatusReport(
        cluster=str(snapshot.get("cluster") or "?"),
        phase=phase,
        step=f"{index}/{len(steps_raw)}" if steps_raw else str(index),
        step_state=state,
        upgrading=bool(upgrade.get("upgrading")),
        source_commit=_str(snapshot.get("sourceCommit")),
        observed_at=_str(snapshot.get("observedAt")),
        version=_str(payload.get("version")),
        nodes_ready=ready,
        nodes_total=total,
        failures=_int(inner.get("currentFailureRetry")),
        max_failures=policy.max_failure_threshold,
        message=str(inner.get("message") or upgrade.get("message") or ""),
        steps=rows,
        conditions=conditions,
        rejection=dict(_mapping(snapshot.get("rejection"))) or None,
        firmware=dict(firmware) if firmware else None,
        held=dict(_mapping(_mapping(snapshot.get("promotion")).get("held"))) or None,
        upstream_rolled_back=dict(_mapping(_mapping(snapshot.get("promotion")).get(
            "upstreamRolledBack"))) or None,
        busy_nodes={k: list(v) for k, v in states.busy.items()},
        unavailable_nodes=dict(states.unavailable),
        source=dict(_mapping(snapshot.get("git"))),
    )
    result.health_checks = health_rows(_mapping(upgrade.get("health")))
    result.topology = dict(_mapping(upgrade.get("topology"))) or None
    result.domains = [d.to_json() for d in states.domains]
    result.draining = [dict(e) for e in draining_entries(upgrade)]
    result.skipped = sorted(recorded_skips(upgrade) | set(states.skipped))
    result.tolerated = list(states.tolerated)
    result.waits = waits(snapshot, now=now, nodes=states, git=git)
    result.waiting_for = [w.text for w in result.waits]
    return result


def firmware_lines(firmware: Mapping[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    return firmware_summary(firmware), [(r.node, r.stage, r.message)
                                        for r in firmware_rows(firmware)]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: Any) -> str | None:
    return str(value) if value else None
