"""Field ownership of docs/gitops.md#git-stays-the-truth, as a table."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.fieldpath import MISSING
from reconciler.fieldpath import ensure as set_field
from reconciler.gitops.ownership import (
    CONTROLLER_FIELDS,
    controller_changed_fields,
    decide_ownership,
    record_write_back,
)

PAUSE = ("spec", "driver", "upgradePolicy", "pause")
VERSION = ("spec", "driver", "payload", "version")
FW = ("spec", "driver", "fwUpgradePolicy")


def obj(pause: Any = MISSING, version: str = "2.33.0.9", steps: int = 3,
        fw: str = "Never") -> dict[str, Any]:
    policy: dict[str, Any] = {"enableRollout": True, "maxParallel": steps}
    if pause is not MISSING:
        policy["pause"] = pause
    return {"spec": {"driver": {"payload": {"version": version}, "upgradePolicy": policy,
                                "fwUpgradePolicy": fw}}}


# (case, last applied, new commit, cluster, fields the controller changed,
#  expected source per field, expected write-back fields)
CASES = [
    ("gate: an unrelated newer commit does not release it",
     obj(), obj(steps=3), obj(pause=True), {PAUSE}, {PAUSE: "cluster"}, {PAUSE}),
    ("gate: the old commit replayed does not release it",
     obj(), obj(), obj(pause=True), {PAUSE}, {PAUSE: "cluster"}, {PAUSE}),
    ("gate: a commit made before the write-back landed (pause: false as before) does not",
     obj(pause=False), obj(pause=False), obj(pause=True), {PAUSE}, {PAUSE: "cluster"}, {PAUSE}),
    ("gate: after the write-back landed, a person's pause: false releases it",
     obj(pause=True), obj(pause=False), obj(pause=True), {PAUSE}, {PAUSE: "git"}, set()),
    ("gate: write-back already in Git: nothing to write",
     obj(pause=True), obj(pause=True), obj(pause=True), {PAUSE}, {PAUSE: "cluster"}, set()),
    ("rollback: the failed version is not re-requested by an unrelated commit",
     obj(version="2.33.0.9"), obj(version="2.33.0.9"), obj(version="2.32.0.6"), {VERSION},
     {VERSION: "cluster"}, {VERSION}),
    ("rollback: a commit asking for a new version is applied",
     obj(version="2.32.0.6"), obj(version="2.34.0.1"), obj(version="2.32.0.6"), {VERSION},
     {VERSION: "git"}, set()),
    ("rollback: the arch suffix alone is not a change",
     obj(version="2.33.0.9"), obj(version="2.33.0.9-amd64"), obj(version="2.32.0.6"), {VERSION},
     {VERSION: "cluster"}, {VERSION}),
    ("firmware: Never kept over the PreferCloud Git still says",
     obj(fw="PreferCloud"), obj(fw="PreferCloud"), obj(fw="Never"), {FW}, {FW: "cluster"}, {FW}),
    ("no baseline (first start): the cluster's value is kept",
     None, obj(pause=False), obj(pause=True), {PAUSE}, {PAUSE: "cluster"}, {PAUSE}),
    ("fields the controller did not change are Git's (drift): no decision",
     obj(), obj(steps=5), obj(steps=9, pause=True), set(), {}, set()),
]


@pytest.mark.parametrize(
    ("last", "new", "cluster", "changed", "sources", "write_backs"),
    [case[1:] for case in CASES], ids=[case[0] for case in CASES],
)
def test_field_ownership(last: Any, new: Any, cluster: Any, changed: set[Any],
                         sources: dict[Any, str], write_backs: set[Any]) -> None:
    plan = decide_ownership(last_applied=last, proposed=new, cluster=cluster,
                            controller_changed=changed)
    assert {d.field: d.source for d in plan.decisions} == sources
    assert {d.field for d in plan.write_backs} == write_backs
    for decision in plan.decisions:
        value = plan.spec
        for name in decision.field:
            value = value.get(name, MISSING) if isinstance(value, dict) else MISSING
        expected = decision.cluster_value if decision.source == "cluster" else decision.git_value
        assert value == expected
    # everything else comes from the new commit
    assert plan.spec["spec"]["driver"]["upgradePolicy"]["maxParallel"] == (
        new["spec"]["driver"]["upgradePolicy"]["maxParallel"]
    )


def test_the_baseline_moves_when_a_write_back_lands() -> None:
    last = record_write_back(obj(pause=False), PAUSE, True)
    plan = decide_ownership(last_applied=last, proposed=obj(pause=False), cluster=obj(pause=True),
                            controller_changed={PAUSE})
    assert plan.decisions[0].source == "git"
    assert plan.spec["spec"]["driver"]["upgradePolicy"]["pause"] is False


def test_inputs_are_not_modified() -> None:
    new = obj()
    decide_ownership(last_applied=obj(), proposed=new, cluster=obj(pause=True),
                     controller_changed={PAUSE})
    assert new == obj()


def test_controller_fields_from_managed_fields() -> None:
    managed = [
        {"manager": "gpu-gitops-reconciler", "operation": "Apply", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:spec": {"f:driver": {"f:upgradePolicy": {"f:pause": {}}}}}},
        {"manager": "gpu-rollout-controller", "operation": "Apply", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:spec": {"f:driver": {
             "f:upgradePolicy": {"f:pause": {}},
             "f:payload": {"f:version": {}}}}}},
        {"manager": "gpu-rollout-controller", "operation": "Update", "subresource": "status",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:upgradeStatus": {}}}},
    ]
    assert controller_changed_fields(managed) == {PAUSE, VERSION}
    assert controller_changed_fields(managed, manager="someone") == set()
    assert FW in CONTROLLER_FIELDS


def test_set_field_makes_the_way_and_missing_removes() -> None:
    target: dict[str, Any] = {"spec": {"driver": "not a mapping"}}
    set_field(target, PAUSE, True)
    assert target == {"spec": {"driver": {"upgradePolicy": {"pause": True}}}}
    set_field(target, PAUSE, MISSING)
    assert target == {"spec": {"driver": {"upgradePolicy": {}}}}
