"""The controllers' server-side applies keep each other's fields (docs/gitops.md#git-stays-the-truth
ownership).

The rollout controller and the firmware orchestrator both apply under ``gpu-rollout-controller``,
one concern at a time. A server-side apply removes the fields its manager owned before and leaves
out, so without care a gate's ``pause`` after a rollback deleted the restored payload version,
and a rollout pause after firmware deleted ``fwUpgradePolicy`` and the done annotation (then the
sync role, seeing the field no longer the controller's, applied Git's value and the firmware flow
ran again). On the real API server.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.controller.act import ActionExecutor, Target
from reconciler.firmware.controller import FirmwareController
from reconciler.kube.api import JSON, KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.owned_apply import apply_keeping_owned, owned_values
from reconciler.names import (
    API_VERSION,
    CLUSTER_OPERATOR_NAME,
    CONTROLLER_FIELD_MANAGER,
    KIND,
    SYNC_FIELD_MANAGER,
)
from reconciler.rollout.actions import RestorePayload, SetPolicyPause
from reconciler.sim.fleet import Fleet

pytestmark = pytest.mark.cluster

PATH = cluster_operator_path(CLUSTER_OPERATOR_NAME)


def _body(driver: dict[str, Any]) -> JSON:
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": CLUSTER_OPERATOR_NAME}, "spec": {"driver": driver}}


def _git_apply(kube: KubeApi, version: str, fw: str = "PreferCloud") -> dict[str, Any]:
    """What the sync role applies from Git: a new payload version and firmware policy."""
    payload = dict(kube.get(PATH)["spec"]["driver"]["payload"], version=version)
    kube.apply(PATH, _body({"payload": payload, "fwUpgradePolicy": fw,
                            "upgradePolicy": {"pause": False}}),
               field_manager=SYNC_FIELD_MANAGER, force=True)
    return payload


def _driver(kube: KubeApi) -> dict[str, Any]:
    driver: dict[str, Any] = kube.get(PATH)["spec"]["driver"]
    return driver


def test_a_pause_after_a_rollback_keeps_the_restored_version(fleet: Fleet, kube: KubeApi) -> None:
    payload = _git_apply(kube, "9.9.9")
    executor = ActionExecutor(kube, Target(CLUSTER_OPERATOR_NAME))
    co = kube.get(PATH)
    executor.execute(RestorePayload(dict(payload, version="1.1.1")), co)
    executor.execute(SetPolicyPause(True), co)
    driver = _driver(kube)
    assert driver["payload"]["version"] == "1.1.1"
    assert driver["upgradePolicy"]["pause"] is True
    executor.execute(SetPolicyPause(False), co)
    assert _driver(kube)["payload"]["version"] == "1.1.1"


def test_a_rollout_pause_keeps_the_firmware_result_and_its_done_annotation(
    fleet: Fleet, kube: KubeApi
) -> None:
    _git_apply(kube, "9.9.9", fw="PreferCloud")
    FirmwareController(kube)._apply_spec("Never", False, "fw-done-marker")
    ActionExecutor(kube, Target(CLUSTER_OPERATOR_NAME)).execute(SetPolicyPause(True),
                                                                kube.get(PATH))
    co = kube.get(PATH)
    driver = co["spec"]["driver"]
    assert driver["fwUpgradePolicy"] == "Never"
    assert driver["fwEnableVirt"] is False
    assert driver["upgradePolicy"]["pause"] is True
    annotations = co["metadata"]["annotations"]
    assert "fw-done-marker" in annotations.values()
    # still the controller's: the sync role keeps the cluster's value and writes it back
    owned = owned_values(co, CONTROLLER_FIELD_MANAGER)
    assert owned["spec"]["driver"]["fwUpgradePolicy"] == "Never"


class _PersonWritesDuringRead(KubeApi):
    """The API, with a person's change landing right after the controller's first read."""

    def __init__(self, inner: KubeApi) -> None:
        self.__dict__.update(inner.__dict__)
        self.reads = 0

    def get(self, path: str, **kwargs: Any) -> JSON:
        live = super().get(path, **kwargs)
        self.reads += 1
        if self.reads == 1:
            super().apply(path, _body({"upgradePolicy": {"maxParallel": 7}}),
                          field_manager="kubectl-person", force=True)
        return live


def test_a_change_between_read_and_apply_is_read_again_not_overwritten(
    fleet: Fleet, kube: KubeApi
) -> None:
    payload = _git_apply(kube, "9.9.9")
    apply_keeping_owned(kube, PATH, _body({"payload": dict(payload, version="1.1.1")}),
                        manager=CONTROLLER_FIELD_MANAGER)
    racing = _PersonWritesDuringRead(kube)
    apply_keeping_owned(racing, PATH, _body({"upgradePolicy": {"pause": True}}),
                        manager=CONTROLLER_FIELD_MANAGER)
    assert racing.reads == 2  # the first apply met the newer object: 409, read again
    driver = _driver(kube)
    assert driver["upgradePolicy"]["maxParallel"] == 7
    assert driver["upgradePolicy"]["pause"] is True
    assert driver["payload"]["version"] == "1.1.1"


def test_owned_values_carries_only_the_managers_fields() -> None:
    obj = {
        "metadata": {
            "annotations": {"mine": "1", "theirs": "2"},
            "managedFields": [
                {"manager": "me", "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:mine": {}}},
                              "f:spec": {"f:a": {"f:b": {}}, "f:list": {}}}},
                {"manager": "me", "operation": "Update",
                 "fieldsV1": {"f:spec": {"f:c": {}}}},
                {"manager": "other", "operation": "Apply",
                 "fieldsV1": {"f:spec": {"f:d": {}}}},
            ],
        },
        "spec": {"a": {"b": 1, "x": 2}, "c": 3, "d": 4, "list": [{"k": 1}]},
    }
    assert owned_values(obj, "me") == {
        "metadata": {"annotations": {"mine": "1"}},
        "spec": {"a": {"b": 1}, "list": [{"k": 1}]},
    }
    assert owned_values(obj, "nobody") == {}
