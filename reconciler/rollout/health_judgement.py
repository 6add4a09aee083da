"""Health judgement inside a pass (docs/health.md): the node checks of the nodes moved to the target
(verifying, passed, failed), the step checks once a step reached its target, and what each
records (node annotations, ``upgradeStatus.health``, events). It judges; the steps decide what
a failure does (``steps.step_check_failed``, the fallback).
"""

from __future__ import annotations

from typing import Any

from reconciler.health.checks import Health, HealthFailure, HealthState, step_health
from reconciler.names import (
    ANN_FAILURE_REASON,
    ANN_HEALTH,
    ANN_HEALTH_FAILURE,
    ANN_HEALTH_STEP,
    ConditionType,
)
from reconciler.rollout import health_gate
from reconciler.rollout import status as st
from reconciler.rollout.actions import AnnotateNode
from reconciler.rollout.health_gate import NodeVerdicts
from reconciler.rollout.model import RolloutNode
from reconciler.rollout.node_states import adopt
from reconciler.rollout.pass_state import Decisions, Found, Observed
from reconciler.timefmt import format_time


def note(checks: dict[str, Any], health: Health, node: str | None) -> None:
    """Each check's last value and verdict, for ``reconciler status`` (``checks``: the
    ``checks`` of ``upgradeStatus.health``)."""
    for outcome in health.checks:
        entry: dict[str, Any] = {"state": str(outcome.state), "value": outcome.value,
                                 "since": format_time(outcome.since)}
        if node is not None:
            entry["node"] = node
        checks[outcome.check] = entry


def judge_nodes(seen: Observed, out: Decisions, revision: str) -> NodeVerdicts:
    """The node checks of the moved nodes Ready on ``revision`` (docs/health.md): returns the nodes
    still verifying (in flight), those that failed now, those that passed, and the nodes that got
    the new driver without a move (joined mid-rollout), seen as moved from now on; records each
    node's timers and verdict (its actions, ``upgradeStatus.health.checks``)."""
    config = seen.health
    if config is None or not config.node_checks or seen.snap.health is None:
        return health_gate.NO_VERDICTS
    now = seen.now
    all_readings = seen.snap.health.node_readings
    version = seen.version(out.status)
    waiting: set[str] = set()
    failed: dict[str, HealthFailure] = {}
    passed: list[str] = []
    holds: list[str] = []
    adopted: dict[str, RolloutNode] = {}
    checks: dict[str, Any] | None = None  # ``health.checks`` once a node was judged
    for node in seen.snap.nodes.values():
        update: dict[str, str | None] = {}
        if health_gate.joined_unchecked(node, revision):
            update, node = adopt(seen.now_text, node, revision)
            adopted[node.name] = node
        if not health_gate.verifying(node, revision):
            continue
        readings = all_readings.get(node.name, {})
        health = health_gate.judge_node(config, node, version, readings, now)
        if checks is None:
            checks = dict(out.status.health.get("checks") or {})
        note(checks, health, node.name)
        text = health.record.to_text()
        if text != node.annotations.get(ANN_HEALTH):
            update[ANN_HEALTH] = text
        results = {c.check: str(c.state) for c in health.checks}
        if health.state is HealthState.PASSED:
            update[ANN_HEALTH_STEP] = str(out.status.current_step_index)
            passed.append(node.name)
            out.act(AnnotateNode(node.name, update))
            values = ", ".join(f"{c.check}={c.value}" for c in health.checks)
            out.event("HealthCheckPassed", f"{node.name}: node health checks passed "
                      f"({values})", node=node.name, step=out.step_index(),
                      extra={"checks": results})
        elif health.failure is not None:
            failure = health.failure
            update[ANN_HEALTH_FAILURE] = failure.message
            out.act(AnnotateNode(node.name, update))
            failed[node.name] = failure
            out.event("HealthCheckFailed", failure.message, warning=True, node=node.name,
                      step=out.step_index(),
                      extra={"checks": {failure.check: str(HealthState.FAILED)},
                             "value": failure.value, "query": failure.query})
        else:
            if update:
                out.act(AnnotateNode(node.name, update))
            waiting.add(node.name)
            out.requeue_at(now + config.interval)
            out.requeue_all(health.record.started + c.within for c in config.node_checks)
            fresh = health_gate.fresh(readings, health.record.started)
            if health_gate.no_answer(config, health, fresh):
                holds.append(f"{node.name}: {health.message}")
    if checks is not None:
        out.set(health={**out.status.health, "checks": checks})
    return NodeVerdicts(frozenset(waiting), failed, tuple(passed), adopted, tuple(holds))


def step_checks(seen: Observed, out: Decisions, index: int, found: Found) -> bool | HealthFailure:
    """The step checks, once all of the step's nodes passed and before StepReady: True when
    they passed (or there are none), False while they hold, the failure when one failed."""
    config = seen.health
    snap = seen.snap
    if config is None or not config.step_checks or snap.health is None:
        return True
    status = out.status
    passed = found.health.passed if index == status.current_step_index else ()
    nodes = sorted({*health_gate.step_nodes(snap.nodes.values(), found.revision, index),
                    *passed})
    if not nodes:
        return True
    now = seen.now
    epoch = status.epoch()
    record = health_gate.step_record(status.health, epoch, now)
    already = all(c.name in record.passed for c in config.step_checks)
    readings = health_gate.fresh(snap.health.step_readings, record.started)
    health = step_health(config.step_checks, nodes, seen.version(status), record, readings, now)
    stored = dict(status.health)
    stored["step"] = {"epoch": epoch, "index": index, **health.record.as_data()}
    checks = dict(stored.get("checks") or {})
    note(checks, health, None)
    stored["checks"] = checks
    out.set(health=stored)
    results = {c.check: str(c.state) for c in health.checks}
    if health.state is HealthState.PASSED:
        if not already:
            values = ", ".join(f"{c.check}={c.value}" for c in health.checks)
            out.event("HealthCheckPassed", f"step {index}: step health checks passed "
                      f"({values})", step=index, extra={"checks": results})
        return True
    if health.failure is not None:
        return health.failure
    out.set(current_step_state=st.STEP_UPGRADE,
            step_message=health.message or f"step {index}: step health checks hold")
    out.requeue_at(now + config.interval)
    out.requeue_all(since + c.hold for c in config.step_checks
                    if (since := health.record.holding.get(c.name)) is not None)
    # (a check without an answer holds nothing more here: a step that reached its target starts
    # no node)
    return False


def failure_condition(seen: Observed, out: Decisions, found: Found) -> None:
    """A fallback caused by failed node checks also carries a HealthCheckFailed condition
    naming the check, the node and the value (not for a failure the step tolerated)."""
    scan = found.scan
    left = {node.name for _, node in scan.tolerated}
    causes = [f.message for name, f in found.health.failed.items() if name not in left]
    for node in scan.failed:
        ann = node.annotations
        if ann.get(ANN_FAILURE_REASON) == ConditionType.HEALTH_CHECK_FAILED:
            causes.append(ann.get(ANN_HEALTH_FAILURE) or f"health check failed on node "
                          f"{node.name}")
    if not causes:
        return
    message = seen.named(sorted(causes), separator="; ")
    out.condition(ConditionType.HEALTH_CHECK_FAILED, "True",
                  ConditionType.HEALTH_CHECK_FAILED.value, message)
