"""``UpgradeStatus``: the typed, frozen view of ``status.upgradeStatus``.

The planner reads the status once and writes back JSON that differs only where a value changed,
so reading and writing a status without a transition must give back the very same bytes, and a
transition must leave the value it started from as it was.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.names import ConditionType, Phase, StepState
from reconciler.rollout.model import RolloutSnapshot
from reconciler.rollout.planner import Plan
from reconciler.rollout.simulator import Fault, SimConfig, Simulation
from reconciler.rollout.status import Condition, UpgradeStatus, empty_status, normalized

DATA = Path(__file__).parent / "data"
FROM_VERSION = "2.32.0.6"


def _statuses(
    seed: str, nodes: int, *, faults: dict[str, Fault] | None = None,
    fallback: str | None = None,
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(read, written) for every status the planner read and wrote while a seed scenario of
    tests/rollout/data ran to its end in the simulator."""
    document = yaml.safe_load((DATA / seed).read_text(encoding="utf-8"))
    driver = document["driver"] if "driver" in document else document["spec"]["driver"]
    if fallback is not None:
        driver["upgradePolicy"]["fallback"] = fallback
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def observe(before: RolloutSnapshot, result: Plan, _count: int) -> None:
        seen.append((copy.deepcopy(dict(before.status)), copy.deepcopy(result.status)))

    config = SimConfig(nodes=nodes, from_version=FROM_VERSION, auto_confirm=30,
                       faults=faults or {}, observer=observe)
    Simulation(driver, config).run()
    return seen


SCENARIOS = {
    "seed-10": lambda: _statuses("seed-10-nodes.yaml", 10),
    "seed-100": lambda: _statuses("seed-100-nodes.yaml", 100),
    "seed-100-imagepull-pause": lambda: _statuses(
        "seed-100-nodes.yaml", 100, faults={"node-0003": "imagepull", "node-0004": "imagepull",
                                            "node-0005": "imagepull"}),
    "seed-100-crashloop-rollback": lambda: _statuses(
        "seed-100-nodes.yaml", 100, faults={"node-0007": "crashloop"}, fallback="rollback"),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_status_of_the_seed_scenarios_round_trips_byte_identical(scenario: str) -> None:
    passes = SCENARIOS[scenario]()
    assert len(passes) > 5
    assert Phase.PROGRESSING in {written.get("phase") for _, written in passes}
    for read, written in passes:
        # what a planner wrote comes back as the same bytes
        assert json.dumps(UpgradeStatus.from_json(written).to_json()) == json.dumps(written)
        # a status missing fields of docs/rollout.md#status-fields (the simulator's seed) gains
        # them, the rest as read
        again = UpgradeStatus.from_json(read).to_json()
        assert json.dumps(again) == json.dumps(normalized(read))


def test_the_rollback_scenario_reaches_a_rolled_back_status() -> None:
    passes = SCENARIOS["seed-100-crashloop-rollback"]()
    final = UpgradeStatus.from_json(passes[-1][1])
    assert final.condition_true(ConditionType.ROLLED_BACK)
    assert final.current_step_state == StepState.COMPLETED


RAW: dict[str, Any] = {
    "lastAppliedSpec": {"payload": {"version": "2.33.0.9", "name": "driver-image"}},
    "lastCoDriverSpec": {"payload": {"version": "2.32.0.6"}},
    "upgrading": True,
    "conditions": [
        {"type": "Progressing", "lastTransitionTime": "2026-11-30T10:00:00Z",
         "reason": "StepStarted", "message": "step 2 of 4", "observedGeneration": 7},
        {"type": "PlanningFailed", "reason": "ValueError", "message": "planning pass failed",
         "lastTransitionTime": "2026-11-30T09:00:00Z"},
    ],
    "phase": "Progressing",
    "message": "upgrading driver 2.32.0.6 -> 2.33.0.9",
    "status": {
        "lastPodSpecRevision": "old",
        "upgradingPodSpecRevision": "new",
        "currentStepIndex": 2,
        "currentUpgradeReplicas": 3,
        "CurrentUpgradeReadyReplicas": 1,
        "currentFailureRetry": 0,
        "currentStepState": "StepUpgrade",
        "totalUpgradeReplicas": 10,
        "totalUpgradeReadyReplicas": 3,
        "lastUpdateTime": "2026-11-30T10:01:00Z",
        "message": "",
        "recheckTime": "",
        "futureField": "x",
    },
    "someoneElses": {"kept": [1, 2]},
}


def test_unknown_keys_and_their_order_are_kept() -> None:
    written = UpgradeStatus.from_json(RAW).to_json()
    assert json.dumps(written) == json.dumps(RAW)
    assert written["someoneElses"] == {"kept": [1, 2]}
    assert written["status"]["futureField"] == "x"
    # a condition the planner does not replace keeps its unknown keys too
    assert written["conditions"][0]["observedGeneration"] == 7


def test_a_foreign_key_order_is_written_in_spec_order_as_the_planner_always_did() -> None:
    raw = {"someoneElses": 1, **{k: v for k, v in RAW.items() if k != "someoneElses"}}
    written = UpgradeStatus.from_json(raw).to_json()
    assert written == raw
    assert list(written) == list(RAW)


def test_missing_fields_are_written_at_their_empty_values_after_the_known_ones() -> None:
    raw = {"phase": "Idling", "extra": 1, "status": {"lastPodSpecRevision": "r"}}
    written = UpgradeStatus.from_json(raw).to_json()
    assert list(written) == [*empty_status(), "extra"]
    assert written["status"] == {**empty_status()["status"], "lastPodSpecRevision": "r"}


def test_a_transition_returns_a_new_value_and_leaves_the_original_and_its_json_alone() -> None:
    raw = copy.deepcopy(RAW)
    status = UpgradeStatus.from_json(raw)
    moved = status.evolve(current_step_index=3, step_message="starting step 3").with_condition(
        ConditionType.PROGRESSING, "True", "StepStarted", "step 3 of 4",
        "2026-11-30T10:05:00Z", touch=True,
    )
    assert status.current_step_index == 2 and status.step_message == ""
    assert status.condition(ConditionType.PROGRESSING) == Condition(
        "Progressing", "True", "2026-11-30T10:00:00Z", "StepStarted", "step 2 of 4")
    assert json.dumps(status.to_json()) == json.dumps(RAW)
    assert raw == RAW
    with pytest.raises(dataclasses.FrozenInstanceError):
        status.phase = "Idling"  # type: ignore[misc]
    written = moved.to_json()
    assert written["status"]["currentStepIndex"] == 3
    assert written["status"]["message"] == "starting step 3"
    # the replaced condition is written in the form of docs/rollout.md#status-fields (its unknown
    # key goes), the other kept
    assert written["conditions"][0] == {
        "type": "Progressing", "reason": "StepStarted", "message": "step 3 of 4",
        "lastTransitionTime": "2026-11-30T10:05:00Z"}
    assert written["conditions"][1] == RAW["conditions"][1]
    assert written["someoneElses"] == RAW["someoneElses"]
    assert moved.epoch() == "3@2026-11-30T10:05:00Z"


def test_a_condition_keeps_its_transition_time_while_in_force_and_leaves_the_list_after() -> None:
    status = UpgradeStatus.from_json(RAW)
    same = status.with_condition(ConditionType.PROGRESSING, "True", "Resumed", "m", "LATER")
    ended = status.with_condition(ConditionType.PROGRESSING, "False", "Done", "m", "LATER")
    again = ended.with_condition(ConditionType.PROGRESSING, "True", "StepStarted", "m", "LATEST")
    added = status.with_condition(ConditionType.MANUAL_GATE, "True", "Waiting", "m", "LATER")
    assert same.condition(ConditionType.PROGRESSING).last_transition_time == (  # type: ignore[union-attr]
        "2026-11-30T10:00:00Z")
    # the CRD's conditions have no status: one no longer in force is not listed
    assert ended.condition(ConditionType.PROGRESSING) is None
    assert not ended.condition_true(ConditionType.PROGRESSING)
    assert [c["type"] for c in ended.to_json()["conditions"]] == ["PlanningFailed"]
    assert again.condition(ConditionType.PROGRESSING).last_transition_time == "LATEST"  # type: ignore[union-attr]
    assert added.condition_true(ConditionType.MANUAL_GATE)
    assert [c.type for c in added.conditions] == ["Progressing", "PlanningFailed", "ManualGate"]


def test_enum_values_are_written_as_plain_strings() -> None:
    written = UpgradeStatus.from_json({}).evolve(
        phase=Phase.PROGRESSING, current_step_state=StepState.PAUSED).to_json()
    assert type(written["phase"]) is str and written["phase"] == "Progressing"
    assert type(written["status"]["currentStepState"]) is str
    # safe_dump refuses str subclasses: what the planner writes is plain JSON data
    assert "StepPaused" in yaml.safe_dump(written)


def test_the_manuals_spelling_reads_as_the_crds() -> None:
    """``condition`` with a status (the manual, our older records) and
    ``currentUpgradeReadyReplicas``: a False entry is not in force; the text of a spec copy (as
    the CRD stores it) reads as the mapping."""
    legacy = {
        "lastAppliedSpec": '{"payload":{"version":"2.33.0.9"}}',
        "condition": [
            {"type": "Progressing", "status": "True", "lastTransitionTime": "T1",
             "reason": "StepStarted", "message": "step 1"},
            {"type": "ManualGate", "status": "False", "lastTransitionTime": "T0",
             "reason": "Confirmed", "message": "step 0 confirmed"},
        ],
        "status": {"currentUpgradeReadyReplicas": 4},
    }
    status = UpgradeStatus.from_json(legacy)
    assert [c.type for c in status.conditions] == ["Progressing"]
    assert not status.condition_true(ConditionType.MANUAL_GATE)
    assert status.current_upgrade_ready_replicas == 4
    assert status.applied_payload == {"version": "2.33.0.9"}
    written = status.to_json()
    assert "condition" not in written and written["conditions"] == [
        {"type": "Progressing", "lastTransitionTime": "T1", "reason": "StepStarted",
         "message": "step 1"}]
    assert written["status"]["CurrentUpgradeReadyReplicas"] == 4
