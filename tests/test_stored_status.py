"""``reconciler.stored_status``: the merged ``upgradeStatus`` cut into what the vendor's CRD keeps
(``status.upgradeStatus``) and our annotation, and read back the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from reconciler.stored_status import (
    FIRMWARE_STATUS_ANNOTATION,
    ROLLOUT_STATE_ANNOTATION,
    annotation_text,
    conditions_in_force,
    crd_upgrade_status,
    firmware_status_of,
    same_record,
    split_upgrade_status,
    status_with_upgrade,
    upgrade_status_of,
)

ROOT = Path(__file__).resolve().parents[1]

MERGED: dict[str, Any] = {
    "lastAppliedSpec": {"payload": {"version": "3.2.1.12-amd64", "name": "metax/driver-image"}},
    "lastCoDriverSpec": {"payload": {"version": "3.2.1.10-amd64"}},
    "upgrading": True,
    "conditions": [
        {"type": "Progressing", "reason": "StepStarted", "message": "step 1 of 2",
         "lastTransitionTime": "2026-12-06T01:00:00Z", "observedGeneration": 3},
        {"type": "ManualGate", "reason": "WaitingForConfirmation", "message": "m",
         "lastTransitionTime": ""},
    ],
    "phase": "Progressing",
    "message": "upgrading",
    "status": {"lastPodSpecRevision": "a", "upgradingPodSpecRevision": "b",
               "currentStepIndex": 1, "currentUpgradeReplicas": 1,
               "CurrentUpgradeReadyReplicas": 0, "currentFailureRetry": 0,
               "currentStepState": "StepUpgrade", "totalUpgradeReplicas": 10,
               "totalUpgradeReadyReplicas": 0, "lastUpdateTime": "2026-12-06T01:00:01Z",
               "message": "", "recheckTime": ""},
    "holds": [{"kind": "window", "detail": "outside the maintenance windows"}],
    "topology": {"key": "topology.kubernetes.io/zone", "order": "sequential"},
    "skipped": [],
}


def crd_status_schema() -> dict[str, Any]:
    # the vendor's own CRD, as the project keeps it (reconciler/data)
    crd = yaml.safe_load((ROOT / "reconciler" / "data" / "metax-operator-0.15.2" /
                          "gpu.metax-tech.com_clusteroperators.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["status"]["properties"]["upgradeStatus"]  # type: ignore[no-any-return]


def test_the_crds_part_has_only_its_fields_and_ours_go_to_the_annotation() -> None:
    crd, own = split_upgrade_status(MERGED)
    assert set(crd) == {"lastAppliedSpec", "lastCoDriverSpec", "upgrading", "conditions", "phase",
                        "message", "status"}
    # the spec copies as the CRD types them: text, the same text for the same spec
    assert json.loads(crd["lastAppliedSpec"]) == MERGED["lastAppliedSpec"]
    assert crd["lastAppliedSpec"] == crd_upgrade_status(dict(MERGED))["lastAppliedSpec"]
    # conditions: no status, no key the CRD would prune, no empty date-time
    assert crd["conditions"] == [
        {"type": "Progressing", "reason": "StepStarted", "message": "step 1 of 2",
         "lastTransitionTime": "2026-12-06T01:00:00Z"},
        {"type": "ManualGate", "reason": "WaitingForConfirmation", "message": "m"}]
    assert "recheckTime" not in crd["status"] and crd["status"]["lastUpdateTime"]
    assert own == {"holds": MERGED["holds"], "topology": MERGED["topology"]}


def test_every_field_written_is_one_the_vendor_crd_names() -> None:
    schema = crd_status_schema()
    crd, _ = split_upgrade_status(MERGED)
    assert set(crd) <= set(schema["properties"])
    assert set(crd["status"]) <= set(schema["properties"]["status"]["properties"])
    assert set(schema["properties"]["status"].get("required", ())) <= set(crd["status"])
    condition = schema["properties"]["conditions"]["items"]["properties"]
    assert all(set(c) <= set(condition) for c in crd["conditions"])


def test_what_is_stored_reads_back_as_the_same_record() -> None:
    crd, own = split_upgrade_status(MERGED)
    obj = {"metadata": {"annotations": {ROLLOUT_STATE_ANNOTATION: annotation_text(own)}},
           "status": status_with_upgrade(None, crd)}
    back = upgrade_status_of(obj)
    assert same_record(back, MERGED)
    assert back["lastAppliedSpec"] == MERGED["lastAppliedSpec"]
    assert back["holds"] == MERGED["holds"]
    assert obj["status"]["state"] == "ready"
    # read again and cut again: the very same text (no write loop)
    assert split_upgrade_status(back) == (crd, own)


def test_a_state_someone_else_set_is_kept() -> None:
    status = status_with_upgrade({"status": {"state": "deploying", "firmwareUpgrade": {}}},
                                 {"phase": "Idling"})
    assert status == {"state": "deploying", "upgradeStatus": {"phase": "Idling"}}


def test_the_vendors_and_the_manuals_spellings_read_alike() -> None:
    vendor = {"status": {"upgradeStatus": {
        "conditions": [{"type": "Upgrading", "reason": "r", "message": "m"}],
        "lastAppliedSpec": "not json", "upgrading": True,
        "status": {"CurrentUpgradeReadyReplicas": 3}}}}
    manual = {"status": {"upgradeStatus": {
        "condition": [{"type": "Upgrading", "status": "True", "reason": "r", "message": "m"},
                      {"type": "Paused", "status": "False", "reason": "r", "message": "m"}],
        "lastAppliedSpec": {}, "upgrading": True,
        "status": {"currentUpgradeReadyReplicas": 3}}}}
    for obj in (vendor, manual):
        read = upgrade_status_of(obj)
        assert [c["type"] for c in read["conditions"]] == ["Upgrading"]
        assert read["status"] == {"CurrentUpgradeReadyReplicas": 3}
        assert read["lastAppliedSpec"] == {}
    assert conditions_in_force({"conditions": ["garbage", {"no": "type"}]}) == []


def test_counters_beyond_int32_are_clamped_not_refused() -> None:
    crd = crd_upgrade_status({"status": {"totalUpgradeReplicas": 2**40,
                                         "currentFailureRetry": "7"}})
    assert crd["status"]["totalUpgradeReplicas"] == 2**31 - 1
    assert crd["status"]["currentFailureRetry"] == 7


def test_the_firmware_record_lives_in_its_annotation() -> None:
    obj = {"metadata": {"annotations": {FIRMWARE_STATUS_ANNOTATION: '{"phase":"Upgrading"}'}},
           "status": {"firmwareUpgrade": {"phase": "Idle"}}}
    assert firmware_status_of(obj) == {"phase": "Upgrading"}
    # an object an older release wrote: its status field (a real API server prunes it)
    assert firmware_status_of({"status": {"firmwareUpgrade": {"phase": "Idle"}}}) == {
        "phase": "Idle"}
    assert firmware_status_of({"metadata": {"annotations": {
        FIRMWARE_STATUS_ANNOTATION: "[broken"}}}) == {}
