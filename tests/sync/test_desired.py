"""What the sync applies, pure: owned metadata only, kept fields left out, PreferCloud never
applied as is, what stays in the cluster for the transition rules, drift."""

from __future__ import annotations

import json
from typing import Any

from reconciler.names import SOURCE_COMMIT_ANNOTATION
from reconciler.stored_status import FIRMWARE_STATUS_ANNOTATION, ROLLOUT_STATE_ANNOTATION
from reconciler.sync.desired import (
    FIRMWARE_REQUEST_ANNOTATION,
    apply_body,
    drifted,
    firmware_request_value,
    firmware_requested,
    what_stays,
)

PAUSE = ("spec", "driver", "upgradePolicy", "pause")


def obj(**driver: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpu.metax-tech.com/v1alpha1", "kind": "ClusterOperator",
        "metadata": {"name": "cluster-operator", "resourceVersion": "42", "uid": "u",
                     "generation": 3, "managedFields": [{}], "creationTimestamp": "x",
                     "labels": {"team": "gpu"}, "annotations": {"note": "hi"}},
        "spec": {"driver": {"payload": {"version": "2.33.0.9"},
                            "upgradePolicy": {"enableRollout": True, "pause": False},
                            **driver},
                 "devicePlugin": {"enable": True}},
        "status": {"upgradeStatus": {"phase": "Idling"}},
    }


def test_server_metadata_and_status_are_never_applied_and_kept_fields_are_left_out() -> None:
    body = apply_body(obj(), name="cluster-operator", source_commit="c" * 40, kept=[PAUSE])
    assert body["metadata"] == {
        "name": "cluster-operator", "labels": {"team": "gpu"},
        "annotations": {"note": "hi", SOURCE_COMMIT_ANNOTATION: "c" * 40}}
    assert "status" not in body
    assert body["spec"]["driver"]["upgradePolicy"] == {"enableRollout": True}
    assert body["spec"]["devicePlugin"] == {"enable": True}, "unknown sections are kept"


def test_empty_values_are_left_out_of_what_is_applied() -> None:
    """Helm renders an unset value as null; server-side apply refuses a null, a create prunes
    it: the sync applies it as a key left out (docs/validation.md, null-left-out)."""
    proposed = obj()
    proposed["spec"]["openshift"] = None
    proposed["spec"]["vendor"] = {"vendorID": None, "domain": "metax-tech.com"}
    proposed["spec"]["maca"] = {"payload": {"images": [None, "metax/maca:1"]}}
    body = apply_body(proposed, name="cluster-operator", source_commit="c" * 40)
    assert "openshift" not in body["spec"]
    assert body["spec"]["vendor"] == {"domain": "metax-tech.com"}
    assert body["spec"]["maca"] == {"payload": {"images": ["metax/maca:1"]}}
    assert proposed["spec"]["openshift"] is None, "the proposed object is left as it was"


def test_helm_ownership_metadata_and_finalizers_are_never_applied_other_metadata_is() -> None:
    proposed = obj()
    proposed["metadata"].update({
        "finalizers": [],
        "labels": {"app.kubernetes.io/managed-by": "gpu-gitops-reconciler",
                   "app.kubernetes.io/part-of": "metax-operator", "helm.sh/chart": "mine-1"},
        "annotations": {"meta.helm.sh/release-name": "other", "meta.helm.sh/x": "y",
                        "helm.sh/resource-policy": "keep", "note": "hi"},
    })
    body = apply_body(proposed, name="cluster-operator", source_commit="c" * 40)
    # managed-by and meta.helm.sh/* are Helm's
    # (docs/gitops.md#metadata-what-the-sync-applies-and-what-it-leaves-alone); any other key in the
    # file is ours
    assert body["metadata"] == {
        "name": "cluster-operator",
        "labels": {"app.kubernetes.io/part-of": "metax-operator", "helm.sh/chart": "mine-1"},
        "annotations": {"helm.sh/resource-policy": "keep", "note": "hi",
                        SOURCE_COMMIT_ANNOTATION: "c" * 40}}
    only_helm = obj()
    only_helm["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    assert "labels" not in apply_body(only_helm, name="cluster-operator",
                                      source_commit="c" * 40)["metadata"]


def test_the_reconcilers_own_annotations_in_a_file_are_never_applied() -> None:
    """docs/validation.md, reconciler-annotation: the object keeps what the reconciler wrote; a
    request in the file starts no firmware flow, a commit's own request is still put on."""
    proposed = obj()
    proposed["metadata"]["annotations"] = {
        SOURCE_COMMIT_ANNOTATION: "f" * 40, ROLLOUT_STATE_ANNOTATION: "{}",
        FIRMWARE_STATUS_ANNOTATION: "{}", "gpu.metax-tech.com/firmware-done": "flow:Succeeded",
        "gpu.metax-tech.com/notifications-sent": "{}", "gpu.metax-tech.com/owner": "gpu-team",
        FIRMWARE_REQUEST_ANNOTATION: firmware_request_value(fw_enable_virt=True,
                                                            source_commit="f" * 40)}
    body = apply_body(proposed, name="cluster-operator", source_commit="c" * 40)
    assert body["metadata"]["annotations"] == {"gpu.metax-tech.com/owner": "gpu-team",
                                               SOURCE_COMMIT_ANNOTATION: "c" * 40}
    proposed["spec"]["driver"]["fwUpgradePolicy"] = "PreferCloud"
    request = firmware_request_value(fw_enable_virt=False, source_commit="c" * 40)
    body = apply_body(proposed, name="cluster-operator", source_commit="c" * 40,
                      live=obj(fwUpgradePolicy="Never"), firmware_request=request)
    assert body["metadata"]["annotations"][FIRMWARE_REQUEST_ANNOTATION] == request


def test_prefer_cloud_is_handed_over_as_a_request() -> None:
    proposed = obj(fwUpgradePolicy="PreferCloud", fwEnableVirt=True)
    live = obj(fwUpgradePolicy="Never", fwEnableVirt=False)
    assert firmware_requested(proposed, live, last_applied=obj(fwUpgradePolicy="Never"))
    assert firmware_requested(proposed, live, last_applied=None)
    request = firmware_request_value(fw_enable_virt=True, source_commit="a" * 40)
    body = apply_body(proposed, name="cluster-operator", source_commit="a" * 40, live=live,
                      firmware_request=request)
    assert body["spec"]["driver"]["fwUpgradePolicy"] == "Never"
    assert body["spec"]["driver"]["fwEnableVirt"] is False
    assert json.loads(body["metadata"]["annotations"][FIRMWARE_REQUEST_ANNOTATION]) == {
        "fwUpgradePolicy": "PreferCloud", "fwEnableVirt": True, "sourceCommit": "a" * 40}
    # a later commit that still says PreferCloud asks for nothing new, keeps the request
    live["metadata"]["annotations"][FIRMWARE_REQUEST_ANNOTATION] = request
    assert not firmware_requested(proposed, live, last_applied=proposed)
    again = apply_body(proposed, name="cluster-operator", source_commit="b" * 40, live=live)
    assert again["metadata"]["annotations"][FIRMWARE_REQUEST_ANNOTATION] == request
    assert again["spec"]["driver"]["fwUpgradePolicy"] == "Never"
    # while the orchestrator runs (the cluster says PreferCloud), nothing is requested
    running = obj(fwUpgradePolicy="PreferCloud")
    assert not firmware_requested(proposed, running, last_applied=obj(fwUpgradePolicy="Never"))


def test_what_stays_hides_fields_git_does_not_name_unless_the_sync_owns_them() -> None:
    live = obj(deployPolicy="PreferCloud", fwEffectPolicy="NextReboot")
    owned = {"f:spec": {"f:driver": {"f:fwEffectPolicy": {}}}}
    stays = what_stays(live, obj(), owned)
    assert "deployPolicy" not in stays["spec"]["driver"], "another manager's field stays"
    assert stays["spec"]["driver"]["fwEffectPolicy"] == "NextReboot", "ours: a real removal"


def test_drift_is_what_git_owns_and_the_cluster_lost() -> None:
    body = apply_body(obj(), name="cluster-operator", source_commit="c" * 40)
    live = obj()
    live["metadata"]["annotations"][SOURCE_COMMIT_ANNOTATION] = "c" * 40
    assert drifted(body, live) == []
    live["spec"]["driver"]["upgradePolicy"]["enableRollout"] = False
    live["spec"]["driver"]["upgradePolicy"]["pause"] = True
    assert drifted(body, live, ignore=[PAUSE]) == ["spec.driver.upgradePolicy.enableRollout"]


def test_annotations_other_managers_write_are_not_drift_unless_the_file_names_them() -> None:
    """The controller's own annotations on the ClusterOperator (the rollout state, the firmware
    flow's, the notifier's ledger) are not in Git's body, so their changes are never drift."""
    written = {"gpu.metax-tech.com/rollout-state": '{"phase": "Progressing"}',
               "gpu.metax-tech.com/firmware-upgrade": '{"phase": "AwaitingReboot"}',
               "gpu.metax-tech.com/notifications-sent": '{"team": ["gate-1"]}'}
    body = apply_body(obj(), name="cluster-operator", source_commit="c" * 40)
    live = obj()
    live["metadata"]["annotations"].update({SOURCE_COMMIT_ANNOTATION: "c" * 40, **written})
    assert drifted(body, live) == []
    for key in written:
        assert key not in body["metadata"]["annotations"], "the sync never applies them"
