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
from reconciler.rollout.model import RolloutNode
from reconciler.rollout.node_states import adopt
from reconciler.rollout.pass_state import Pass
from reconciler.rollout.scan import NodeScan
from reconciler.timefmt import format_time


def note(p: Pass, health: Health, node: str | None) -> None:
    """Each check's last value and verdict, for ``reconciler status``."""
    checks = dict(p.health_status.get("checks") or {})
    for outcome in health.checks:
        entry: dict[str, Any] = {"state": str(outcome.state), "value": outcome.value,
                                 "since": format_time(outcome.since)}
        if node is not None:
            entry["node"] = node
        checks[outcome.check] = entry
    p.health_status["checks"] = checks


def judge_nodes(p: Pass, revision: str) -> tuple[frozenset[str], frozenset[str],
                                                 dict[str, RolloutNode]]:
    """The node checks of the moved nodes Ready on ``revision`` (docs/health.md): returns the nodes
    still verifying (in flight), those that failed now, and the nodes that got the new driver
    without a move (joined mid-rollout), seen as moved from now on."""
    config = p.health
    if config is None or not config.node_checks or p.snap.health is None:
        return frozenset(), frozenset(), {}
    all_readings = p.snap.health.node_readings
    version = p.version()
    waiting: set[str] = set()
    failed: set[str] = set()
    adopted: dict[str, RolloutNode] = {}
    for node in p.snap.nodes.values():
        update: dict[str, str | None] = {}
        if health_gate.joined_unchecked(node, revision):
            update, node = adopt(p, node, revision)
            adopted[node.name] = node
        if not health_gate.verifying(node, revision):
            continue
        readings = all_readings.get(node.name, {})
        health = health_gate.judge_node(config, node, version, readings, p.now)
        note(p, health, node.name)
        text = health.record.to_text()
        if text != node.annotations.get(ANN_HEALTH):
            update[ANN_HEALTH] = text
        results = {c.check: str(c.state) for c in health.checks}
        if health.state is HealthState.PASSED:
            update[ANN_HEALTH_STEP] = str(p.s.current_step_index)
            p.health_passed.append(node.name)
            p.actions.append(AnnotateNode(node.name, update))
            values = ", ".join(f"{c.check}={c.value}" for c in health.checks)
            p.event("HealthCheckPassed", f"{node.name}: node health checks passed "
                    f"({values})", node=node.name, step=p.step_index(),
                    extra={"checks": results})
        elif health.failure is not None:
            failure = health.failure
            update[ANN_HEALTH_FAILURE] = failure.message
            p.actions.append(AnnotateNode(node.name, update))
            failed.add(node.name)
            p.health_failures[node.name] = failure
            p.event("HealthCheckFailed", failure.message, warning=True, node=node.name,
                    step=p.step_index(),
                    extra={"checks": {failure.check: str(HealthState.FAILED)},
                           "value": failure.value, "query": failure.query})
        else:
            if update:
                p.actions.append(AnnotateNode(node.name, update))
            waiting.add(node.name)
            p.requeue.append(p.now + config.interval)
            p.requeue.extend(health.record.started + c.within for c in config.node_checks)
            fresh = health_gate.fresh(readings, health.record.started)
            if health_gate.no_answer(config, health, fresh):
                p.health_hold.append(f"{node.name}: {health.message}")
    return frozenset(waiting), frozenset(failed), adopted


def step_checks(p: Pass, index: int, revision: str) -> bool | HealthFailure:
    """The step checks, once all of the step's nodes passed and before StepReady: True when
    they passed (or there are none), False while they hold, the failure when one failed."""
    config = p.health
    if config is None or not config.step_checks or p.snap.health is None:
        return True
    nodes = sorted({*health_gate.step_nodes(p.snap.nodes.values(), revision, index),
                    *(p.health_passed if index == p.s.current_step_index else ())})
    if not nodes:
        return True
    epoch = p.s.epoch()
    record = health_gate.step_record(p.health_status, epoch, p.now)
    already = all(c.name in record.passed for c in config.step_checks)
    readings = health_gate.fresh(p.snap.health.step_readings, record.started)
    health = step_health(config.step_checks, nodes, p.version(), record, readings, p.now)
    p.health_status["step"] = {"epoch": epoch, "index": index, **health.record.as_data()}
    note(p, health, None)
    results = {c.check: str(c.state) for c in health.checks}
    if health.state is HealthState.PASSED:
        if not already:
            values = ", ".join(f"{c.check}={c.value}" for c in health.checks)
            p.event("HealthCheckPassed", f"step {index}: step health checks passed "
                    f"({values})", step=index, extra={"checks": results})
        return True
    if health.failure is not None:
        return health.failure
    p.set(current_step_state=st.STEP_UPGRADE,
          step_message=health.message or f"step {index}: step health checks hold")
    p.requeue.append(p.now + config.interval)
    p.requeue.extend(since + c.hold for c in config.step_checks
                     if (since := health.record.holding.get(c.name)) is not None)
    if health_gate.no_answer(config, health, readings):
        p.health_hold.append(health.message)
    return False


def failure_condition(p: Pass, scan: NodeScan) -> None:
    """A fallback caused by failed node checks also carries a HealthCheckFailed condition
    naming the check, the node and the value."""
    found = [f.message for f in p.health_failures.values()]
    for node in scan.failed:
        ann = node.annotations
        if ann.get(ANN_FAILURE_REASON) == ConditionType.HEALTH_CHECK_FAILED:
            found.append(ann.get(ANN_HEALTH_FAILURE) or f"health check failed on node "
                         f"{node.name}")
    if not found:
        return
    message = p.named(sorted(found), separator="; ")
    p.condition(ConditionType.HEALTH_CHECK_FAILED, "True",
                ConditionType.HEALTH_CHECK_FAILED.value, message)
