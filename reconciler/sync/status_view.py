"""What ``reconciler status`` shows: pure, from a status snapshot (the Git file's shape, or the
same built from the live object) and ``now``.

The report answers: which phase and step, how far each batch is, what failed, and what the
rollout waits for and why (a person at a gate, a pause timer and its time left, ``pause: true``,
busy nodes, unavailable nodes), plus the firmware flow's per-node stages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from reconciler.firmware.status_view import firmware_rows, firmware_summary
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.timefmt import format_clock, format_wait
from reconciler.timefmt import parse_time_or_none as parse_time


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class StepRow:
    step: int
    target: int
    nodes: int
    pause: str
    state: str


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
    waiting_for: list[str] = field(default_factory=list)
    steps: list[StepRow] = field(default_factory=list)
    conditions: list[dict[str, str]] = field(default_factory=list)
    rejection: dict[str, Any] | None = None
    firmware: dict[str, Any] | None = None
    #: the change the promotion gate holds (SPEC 10)
    held: dict[str, Any] | None = None
    #: the upstream rolled back the version this cluster runs (SPEC 10)
    upstream_rolled_back: dict[str, Any] | None = None
    busy_nodes: dict[str, list[str]] = field(default_factory=dict)
    unavailable_nodes: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    #: each health check's last value and verdict (SPEC 9): check, node (node checks),
    #: state (Passed, Waiting, Failed), value, since
    health_checks: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {_camel(k): v for k, v in data.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _pause_label(step: Mapping[str, Any]) -> str:
    pause = step.get("pauseDuration")
    if isinstance(pause, Mapping):
        return "gate (a person)"
    if isinstance(pause, int) and not isinstance(pause, bool):
        return "none" if pause == 0 else format_wait(pause / 1000)
    return "?"


def report(snapshot: Mapping[str, Any], *, now: float,
           nodes: Mapping[str, Any] | None = None) -> StatusReport:
    """The report for one cluster. ``nodes`` (from the cluster only): ``busy`` (node -> pods
    that hold a GPU) and ``unavailable`` (node -> why)."""
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
        except (ValueError, ZeroDivisionError):
            targets = []
        before = 0
        for number, (step, target) in enumerate(zip(steps_raw, targets, strict=False), 1):
            if number < index or (number == index and state == "Completed"):
                row_state = "done"
            elif number == index:
                row_state = state or "current"
            else:
                row_state = "pending"
            rows.append(StepRow(number, target, max(target - before, 0), _pause_label(step),
                                row_state))
            before = max(before, target)
    conditions = [
        {k: str(c.get(k, "")) for k in ("type", "status", "reason", "message",
                                         "lastTransitionTime")}
        for c in upgrade.get("condition") or () if isinstance(c, Mapping)
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
        busy_nodes={k: list(v) for k, v in _mapping(_mapping(nodes).get("busy")).items()},
        unavailable_nodes=dict(_mapping(_mapping(nodes).get("unavailable"))),
        source=dict(_mapping(snapshot.get("git"))),
    )
    result.health_checks = health_rows(_mapping(upgrade.get("health")))
    result.waiting_for = waiting_for(result, upgrade, raw_policy, now=now)
    return result


def waiting_for(report: StatusReport, upgrade: Mapping[str, Any],
                policy: Mapping[str, Any], *, now: float) -> list[str]:
    """What the rollout waits for, and why, in a person's words."""
    out: list[str] = []
    inner = _mapping(upgrade.get("status"))
    conditions = {c["type"]: c for c in report.conditions if c.get("status") == "True"}
    if report.rejection:
        first = (report.rejection.get("findings") or [{}])[0]
        where = f"{first.get('file', '')}:{first.get('line', '')}".strip(":")
        out.append(f"a fixed commit: {str(report.rejection.get('commit', ''))[:12]} was "
                   f"rejected ({where}: {first.get('message', '')})")
    active = report.phase in ("Progressing", "Terminating", "Disabling")
    if active and report.step_state == "StepPaused":
        if "BatchFailed" in conditions:
            out.append("a person: the batch failed ("
                       f"{conditions['BatchFailed'].get('message', '')}); fix the cause, then "
                       "merge `pause: false` (or `enableRollout: false` to roll back)")
        elif "ManualGate" in conditions:
            out.append(f"a person: step {report.step} is done; merge `pause: false` to "
                       "release the next batch (manual gate)")
        elif policy.get("pause") is True:
            out.append("a person: the policy says `pause: true`; merge `pause: false` to go on")
        else:
            recheck = parse_time(inner.get("recheckTime"))
            if recheck is not None:
                left = recheck - now
                until = format_clock(recheck)
                out.append(f"the pause timer: {format_wait(left)} left (until {until})"
                           if left > 0 else "the pause timer ended; the next step starts now")
    if active and report.step_state in ("StepUpgrade", "StepUpgradeInit"):
        out.append(f"nodes upgrading: {report.nodes_ready}/{report.nodes_total} on the new "
                   "driver")
    if report.busy_nodes:
        named = ", ".join(f"{n} ({', '.join(p)})" for n, p in sorted(report.busy_nodes.items()))
        out.append(f"busy nodes (GPU pods must finish first): {named}")
    if report.unavailable_nodes:
        named = ", ".join(f"{n} ({why})" for n, why in sorted(report.unavailable_nodes.items()))
        out.append(f"unavailable nodes: {named}")
    message = report.message
    window = _window_wait(message, now) if active else None
    if window:
        out.append(window)
    elif active and message and not any(message in line for line in out) and (
            "busy" in message or "unavailable" in message or "waiting" in message):
        out.append(message)
    rolled = _mapping(report.upstream_rolled_back)
    if rolled:
        out.append(f"a person: {rolled.get('message')}; decide whether to roll back here too")
    if report.held:
        out.append(f"the promotion gate: {report.held.get('version')} waits for "
                   f"{report.held.get('upstream')} ({report.held.get('reason')})")
    firmware = report.firmware or {}
    if firmware.get("phase") == "AwaitingReboot":
        waiting = [r.node for r in firmware_rows(firmware) if r.stage == "awaiting-reboot"]
        out.append(f"a person: reboot {', '.join(waiting) or 'the nodes'} (firmware upgrade)")
    return out


def health_rows(health: Mapping[str, Any]) -> list[dict[str, str]]:
    """``upgradeStatus.health.checks`` as rows, by check name."""
    rows = []
    for name, entry in sorted(_mapping(health.get("checks")).items()):
        entry = _mapping(entry)
        rows.append({"check": str(name), "node": str(entry.get("node") or ""),
                     "state": str(entry.get("state") or ""),
                     "value": str(entry.get("value") or ""),
                     "since": str(entry.get("since") or "")})
    return rows


#: the planner's step message while a maintenance window holds fresh starts (SPEC 10)
_WINDOW_NEXT = "the next window opens at "


def _window_wait(message: str, now: float) -> str | None:
    """``a maintenance window: ...`` with the time left, from the planner's step message."""
    if "no new node starts" not in message or "window" not in message:
        return None
    why = message.split(": no new node starts", 1)[0]
    at = message.rsplit(_WINDOW_NEXT, 1)[1] if _WINDOW_NEXT in message else None
    opens = parse_time(at) if at else None
    if opens is None:
        return f"a maintenance window ({why}); {message.rsplit('; ', 1)[-1]}"
    return (f"a maintenance window ({why}): fresh node starts wait until {at} "
            f"({format_wait(opens - now)} from now)")


def firmware_lines(firmware: Mapping[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    return firmware_summary(firmware), [(r.node, r.stage, r.message)
                                        for r in firmware_rows(firmware)]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: Any) -> str | None:
    return str(value) if value else None
