"""The review handler, branch by branch: AdmissionReview in, response out (docs/admission.md)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.admission.review import MAX_LINES, NotAReview, review
from tests.admission.review_cases import (
    OLD_VERSION,
    admission_review,
    changed,
    cluster_operator,
    policy,
)
from tests.policy.vendor_cases import CASES, Refused, as_stored, set_at

UP = ("spec", "driver", "upgradePolicy")
PAYLOAD = ("spec", "driver", "payload")


def answer(body: dict[str, Any]) -> dict[str, Any]:
    out = review(body)
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == body["request"]["uid"]
    response: dict[str, Any] = out["response"]
    return response


def rules_of(response: dict[str, Any]) -> list[str]:
    """The ``[rule]`` of each line of a denial message."""
    lines = response["status"]["message"].splitlines()
    return [line.rsplit("[", 1)[1].rstrip("]") for line in lines]


def test_the_response_carries_the_request_uid() -> None:
    body = admission_review("CREATE", cluster_operator(), uid="7b0f-uid-echo")
    assert review(body)["response"]["uid"] == "7b0f-uid-echo"


def test_a_valid_create_is_allowed_without_warnings() -> None:
    response = answer(admission_review("CREATE", cluster_operator(stored=True)))
    assert response == {"uid": response["uid"], "allowed": True}


@pytest.mark.parametrize(("steps", "rules"), [
    ([{"replicas": 1, "pauseDuration": 0}, {"replicas": "50%", "pauseDuration": 0}],
     ["last-step-100"]),
    ([{"replicas": 2, "pauseDuration": 0}, {"replicas": 1, "pauseDuration": 0},
      {"replicas": "100%", "pauseDuration": 0}], ["steps-increasing"]),
    ([{"replicas": "50%", "pauseDuration": 0}, {"replicas": "20%", "pauseDuration": 0}],
     ["last-step-100", "steps-increasing"]),
    ([], ["schema-min-items"]),
])
def test_a_create_with_a_bad_step_list_is_denied_one_line_per_finding(
        steps: list[Any], rules: list[str]) -> None:
    obj = cluster_operator(upgrade_policy=policy(upgradeSteps=steps))
    response = answer(admission_review("CREATE", obj))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert sorted(rules_of(response)) == sorted(rules)
    for line in response["status"]["message"].splitlines():
        assert line.startswith("/spec/driver/upgradePolicy/upgradeSteps")
        _, _, rest = line.partition(": ")
        assert rest and rest.endswith("]")


def test_a_boolean_given_as_a_string_is_denied_with_the_hint() -> None:
    obj = cluster_operator(upgrade_policy=policy(enableRollout="false"))
    response = answer(admission_review("CREATE", obj))
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(
        "/spec/driver/upgradePolicy/enableRollout: upgradePolicy.enableRollout: expected "
        "boolean, got string 'false'")
    assert rules_of(response) == ["schema-type"]


def test_server_populated_and_helm_metadata_are_never_reported() -> None:
    obj = cluster_operator(stored=True, phase="Idling")
    obj["metadata"]["deletionGracePeriodSeconds"] = 0
    response = answer(admission_review("UPDATE", changed(obj, *UP, "maxParallel", 2), obj))
    assert response == {"uid": response["uid"], "allowed": True}


def test_warning_level_findings_become_admission_warnings() -> None:
    obj = cluster_operator()
    obj["metadata"]["surprise"] = "x"
    response = answer(admission_review("CREATE", obj))
    assert response["allowed"] is True
    assert len(response["warnings"]) == 1
    assert response["warnings"][0].startswith("/metadata/surprise: ")
    assert response["warnings"][0].endswith("[unknown-field-pruned]")


@pytest.mark.parametrize("phase", ["Progressing", "Terminating", "Disabling"])
@pytest.mark.parametrize(("path", "value"), [
    ((*UP, "maxParallel"), 2),
    ((*UP, "upgradeSteps"), [{"replicas": "100%", "pauseDuration": 0}]),
    ((*UP, "fallback"), "rollback"),
    ((*PAYLOAD, "version"), "2.34.0.1"),
])
def test_a_locked_field_changed_during_a_rollout_is_denied_with_spec_4_2s_reason(
        phase: str, path: tuple[str, ...], value: Any) -> None:
    old = cluster_operator(stored=True, phase=phase)
    response = answer(admission_review("UPDATE", changed(old, *path, value), old))
    assert response["allowed"] is False
    assert "transition-locked-field" in rules_of(response)
    message = response["status"]["message"]
    assert f"cannot change while the rollout is {phase}" in message
    assert "Only upgradePolicy.enableRollout and upgradePolicy.pause may change" in message


@pytest.mark.parametrize("phase", ["Idling", "Disabled", None])
def test_any_valid_change_is_allowed_while_no_rollout_is_active(phase: str | None) -> None:
    old = cluster_operator(stored=True, phase=phase)
    new = changed(old, *UP, "maxParallel", 2)
    new = changed(new, *PAYLOAD, "version", "2.34.0.1")
    assert answer(admission_review("UPDATE", new, old))["allowed"] is True


@pytest.mark.parametrize("phase", ["Progressing", "Terminating", "Disabling", "Idling"])
def test_pause_true_is_always_allowed(phase: str) -> None:
    old = cluster_operator(stored=True, phase=phase)
    response = answer(admission_review("UPDATE", changed(old, *UP, "pause", True), old))
    assert response["allowed"] is True and "warnings" not in response


def test_pause_true_is_allowed_even_when_the_stored_object_is_invalid() -> None:
    # stored before the webhook was registered: the controller must still reach its gate
    bad = policy(upgradeSteps=[{"replicas": 1}, {"replicas": 3, "pauseDuration": 0}])
    old = cluster_operator(stored=True, phase="Progressing", upgrade_policy=bad)
    response = answer(admission_review("UPDATE", changed(old, *UP, "pause", True), old))
    assert response["allowed"] is True
    assert [w.rsplit("[", 1)[1] for w in response["warnings"]] == [
        "last-step-100] (already in the stored object)"]


def test_pause_false_is_validated_like_any_other_change() -> None:
    bad = policy(pause=True, upgradeSteps=[{"replicas": 1, "pauseDuration": 0},
                                           {"replicas": 3, "pauseDuration": 0}])
    old = cluster_operator(stored=True, phase="Progressing", upgrade_policy=bad)
    response = answer(admission_review("UPDATE", changed(old, *UP, "pause", False), old))
    assert response["allowed"] is False
    assert rules_of(response) == ["last-step-100"]


def test_pause_true_together_with_a_locked_change_is_denied_for_the_locked_one() -> None:
    old = cluster_operator(stored=True, phase="Progressing")
    new = changed(changed(old, *UP, "pause", True), *UP, "maxParallel", 3)
    response = answer(admission_review("UPDATE", new, old))
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("/spec/driver/upgradePolicy/maxParallel:")
    assert rules_of(response) == ["transition-locked-field"]


def test_enable_rollout_false_during_a_rollout_is_allowed() -> None:
    old = cluster_operator(stored=True, phase="Progressing")
    response = answer(admission_review("UPDATE", changed(old, *UP, "enableRollout", False), old))
    assert response["allowed"] is True


@pytest.mark.parametrize("phase", ["Terminating", "Disabling", "Progressing"])
@pytest.mark.parametrize("version", [OLD_VERSION, OLD_VERSION + "-amd64"])
def test_the_payload_set_back_to_the_previous_one_is_the_rollbacks_own(
        phase: str, version: str) -> None:
    # Progressing too: the controller writes the payload before the status naming the rollback
    old = cluster_operator(stored=True, phase=phase)
    response = answer(admission_review("UPDATE", changed(old, *PAYLOAD, "version", version),
                                       old))
    assert response == {"uid": response["uid"], "allowed": True}  # no warning about itself


@pytest.mark.parametrize(("path", "value"), [
    ((*PAYLOAD, "version"), "2.30.0.1"),            # not the version the rollout started from
    ((*PAYLOAD, "registry"), "evil.example.com"),   # another image
    ((*PAYLOAD, "pullPolicy"), "Always"),           # RestorePayload writes nothing else
])
def test_a_payload_change_that_is_not_the_rollback_is_denied(
        path: tuple[str, ...], value: Any) -> None:
    old = cluster_operator(stored=True, phase="Terminating")
    new = changed(old, *PAYLOAD, "version", OLD_VERSION)
    new = changed(new, *path, value)
    response = answer(admission_review("UPDATE", new, old))
    assert response["allowed"] is False
    assert set(rules_of(response)) == {"transition-locked-field"}


@pytest.mark.parametrize("pause", [False, ...])
def test_the_rollbacks_write_may_release_the_controllers_pause(pause: Any) -> None:
    # RestorePayload is a server-side apply of the payload alone: the pause: true the controller
    # applied at the gate is dropped by the same write
    old = cluster_operator(stored=True, phase="Progressing",
                           upgrade_policy=policy(enableRollout=False, pause=True))
    new = changed(changed(old, *PAYLOAD, "version", OLD_VERSION), *UP, "pause", pause)
    assert answer(admission_review("UPDATE", new, old))["allowed"] is True
    # without the payload set back, releasing the pause is an ordinary (valid) change
    alone = changed(old, *UP, "pause", pause)
    assert answer(admission_review("UPDATE", alone, old))["allowed"] is True


def test_a_pause_release_with_a_payload_that_is_not_the_rollback_is_denied() -> None:
    old = cluster_operator(stored=True, phase="Progressing", upgrade_policy=policy(pause=True))
    new = changed(changed(old, *PAYLOAD, "version", "2.30.0.1"), *UP, "pause", False)
    response = answer(admission_review("UPDATE", new, old))
    assert response["allowed"] is False
    assert rules_of(response) == ["transition-locked-field"]


def test_the_payload_set_back_with_another_change_is_denied() -> None:
    old = cluster_operator(stored=True, phase="Disabling")
    new = changed(changed(old, *PAYLOAD, "version", OLD_VERSION), *UP, "maxParallel", 1)
    response = answer(admission_review("UPDATE", new, old))
    assert response["allowed"] is False
    assert rules_of(response) == ["transition-locked-field", "transition-locked-field"]


def test_the_payload_rollback_needs_the_recorded_previous_payload() -> None:
    old = cluster_operator(stored=True, phase="Terminating")
    del old["status"]["upgradeStatus"]["lastCoDriverSpec"]
    response = answer(admission_review("UPDATE", changed(old, *PAYLOAD, "version", OLD_VERSION),
                                       old))
    assert response["allowed"] is False


def test_an_update_that_keeps_the_spec_is_allowed_even_if_the_stored_spec_is_invalid() -> None:
    # e.g. the stand-in operator removing its finalizer from an object being deleted
    old = cluster_operator(stored=True, phase="Idling",
                           upgrade_policy=policy(upgradeSteps=[{"replicas": 1,
                                                                "pauseDuration": 0}]))
    new = changed(old, "metadata", "finalizers", [])
    response = answer(admission_review("UPDATE", new, old))
    assert response["allowed"] is True
    assert response["warnings"][0].endswith("(already in the stored object)")


def _firmware_running(**request: Any) -> dict[str, Any]:
    old = cluster_operator(stored=True, phase="Idling")
    old["status"]["firmwareUpgrade"] = {
        "phase": "Cordoning", "flow": "fw-20261201-0001",
        "request": {"fwUpgradePolicy": "PreferCloud", "fwEnableVirt": False, **request}}
    return old


def test_the_firmware_flows_own_parameters_are_allowed_while_it_runs() -> None:
    old = _firmware_running(fwEnableVirt=True)
    new = changed(changed(old, "spec", "driver", "fwUpgradePolicy", "PreferCloud"),
                  "spec", "driver", "fwEnableVirt", True)
    assert answer(admission_review("UPDATE", new, old))["allowed"] is True
    # the final Never, applied together with the annotation that ends this very flow
    done = changed(new, "spec", "driver", "fwUpgradePolicy", "Never")
    done["metadata"]["annotations"]["gpu.metax-tech.com/firmware-done"] = (
        "fw-20261201-0001:Completed")
    assert answer(admission_review("UPDATE", done, new))["allowed"] is True


@pytest.mark.parametrize("annotation", [None, "fw-other-flow:Completed"])
def test_a_persons_firmware_change_during_a_flow_is_denied(annotation: str | None) -> None:
    old = _firmware_running()
    old["spec"]["driver"]["fwUpgradePolicy"] = "PreferCloud"
    new = changed(old, "spec", "driver", "fwUpgradePolicy", "Never")
    if annotation:
        new["metadata"]["annotations"]["gpu.metax-tech.com/firmware-done"] = annotation
    response = answer(admission_review("UPDATE", new, old))
    assert response["allowed"] is False
    assert rules_of(response) == ["firmware-locked-field"]
    virt = answer(admission_review("UPDATE", changed(old, "spec", "driver", "fwEnableVirt",
                                                     True), old))
    assert virt["allowed"] is False


def test_the_status_subresource_is_not_reviewed() -> None:
    garbage = {"spec": {"driver": {"upgradePolicy": {"enableRollout": "false"}}}}
    response = answer(admission_review("UPDATE", garbage, garbage, sub_resource="status"))
    assert response == {"uid": response["uid"], "allowed": True}


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_other_operations_are_allowed(operation: str) -> None:
    assert answer(admission_review(operation, None, cluster_operator()))["allowed"] is True


def test_a_review_of_another_resource_is_denied_naming_the_configuration() -> None:
    response = answer(admission_review("CREATE", {"kind": "Pod"}, resource="pods", group=""))
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "reviews clusteroperators.gpu.metax-tech.com only" in response["status"]["message"]


def test_an_update_without_old_object_is_denied_saying_so() -> None:
    response = answer(admission_review("UPDATE", cluster_operator()))
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "request.oldObject is missing on UPDATE" in response["status"]["message"]


@pytest.mark.parametrize("obj", [None, "text", [1]])
def test_a_request_without_an_object_is_denied(obj: Any) -> None:
    body = admission_review("CREATE", None)
    if obj is not None:
        body["request"]["object"] = obj
    response = answer(body)
    assert response["allowed"] is False
    assert "request.object is missing on CREATE" in response["status"]["message"]


@pytest.mark.parametrize(("body", "words"), [
    ([], "got a list"),
    ("AdmissionReview", "got a string"),
    ({"kind": "Pod", "apiVersion": "v1"}, "got kind 'Pod' of apiVersion 'v1'"),
    ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {}},
     "apiVersion 'admission.k8s.io/v1beta1'"),
    ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}, "no request object"),
    ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": ""}},
     "request.uid is missing"),
])
def test_a_body_that_is_not_an_admission_review_is_refused(body: Any, words: str) -> None:
    with pytest.raises(NotAReview, match=words):
        review(body)


def test_a_denial_lists_at_most_max_lines_findings() -> None:
    obj = cluster_operator()
    obj["spec"]["driver"]["upgradePolicy"].update({f"unknown{i}": i for i in range(80)})
    response = answer(admission_review("CREATE", obj))
    lines = response["status"]["message"].splitlines()
    assert len(lines) == MAX_LINES + 1
    assert lines[-1].startswith("... and 30 more findings")


def test_an_object_larger_than_a_policy_file_is_still_validated() -> None:
    obj = cluster_operator()
    obj["metadata"]["annotations"] = {"big": "x" * (1536 * 1024)}  # etcd's 1.5 MiB
    assert answer(admission_review("CREATE", obj))["allowed"] is True


def test_a_deeply_nested_object_is_denied_not_crashed() -> None:
    deep: Any = "leaf"
    for _ in range(500):
        deep = {"d": deep}
    obj = cluster_operator()
    obj["spec"]["devicePlugin"] = deep
    response = answer(admission_review("CREATE", obj))
    assert response["allowed"] is False
    assert rules_of(response) == ["too-deep"]


def test_a_message_finding_is_one_line_even_if_the_value_has_newlines() -> None:
    obj = cluster_operator(upgrade_policy=policy(fallback="roll\nback"))
    response = answer(admission_review("CREATE", obj))
    lines = response["status"]["message"].splitlines()
    assert len(lines) == 1 and lines[0].endswith("[schema-enum]")



# -- the vendor's CRD (docs/validation.md#our-schema-and-the-vendors-crd) ----------------------

def test_the_vendor_object_as_stored_is_allowed_and_no_info_is_sent() -> None:
    """Every spec section the vendor's CRD has: no warning, and the info that most of them are
    not acted on is validate's, not an admission warning."""
    response = answer(admission_review("CREATE", as_stored()))
    assert response["allowed"] is True and "warnings" not in response


@pytest.mark.parametrize("path", [("spec", "maca"), ("spec", "openshift"),
                                  ("spec", "driver", "deviceAsRootGroup")])
def test_the_whole_object_must_carry_what_the_crd_requires(path: tuple[str, ...]) -> None:
    """The webhook sees the merged object, as the API server validates it: a section the CRD
    requires is refused when missing (a policy file leaving it out is only an info)."""
    obj = changed(cluster_operator(), *path, ...)
    response = answer(admission_review("CREATE", obj))
    assert response["allowed"] is False
    (line,) = response["status"]["message"].splitlines()
    assert line.startswith("/" + "/".join(path) + ": missing required field")
    assert line.endswith("the API server refuses a ClusterOperator without it [required-field]")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_value_the_api_server_refuses_is_denied_with_one_line(case: Refused) -> None:
    obj = set_at(as_stored(), case.pointer, case.value)
    response = answer(admission_review("CREATE", obj))
    assert response["allowed"] is False
    (line,) = response["status"]["message"].splitlines()
    assert line.startswith(f"{case.at or case.pointer}: ") and line.endswith(f"[{case.rule}]")
