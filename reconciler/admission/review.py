"""The review: one admission.k8s.io/v1 ``AdmissionReview`` in, its response out (docs/admission.md).

The object under review goes through :func:`reconciler.policy.validation.validate_document`
exactly as a policy file does (JSON is YAML 1.2), with ``oldObject`` as the spec the cluster runs
and its ``status.upgradeStatus.phase`` / ``status.firmwareUpgrade.phase`` for the transition
rules. Two things differ from a file, both decided here:

- Findings that only make sense for a file are dropped by rule name (:data:`FILE_ONLY_RULES`):
  every stored object carries server-populated metadata, a status and, in a Helm install,
  Helm's ownership metadata. Info findings (docs/validation.md#severities) are not sent.
- The object is whole (the merged result of the write), so a field the vendor's CRD requires
  is an error when missing, as the API server would refuse it; a policy file is applied over
  the installed object, where the same finding is an info.
- What the rollout and the firmware orchestrator write themselves is allowed by its content,
  never by the user name, field manager or header of the request (any client chooses those):
  ``pause: true`` always; the payload set back to the one the rollout started from while a
  rollout is active (with the release of the controller's own pause that the same write makes);
  the firmware parameters set to the running flow's own values. An update
  made only of such changes is allowed whatever else the stored object holds (it was stored
  before), so the controller is never locked out of its own rollback.

An update that leaves the spec as it is (labels, finalizers, the stand-in operator removing its
finalizer on delete) is allowed: there is no new policy to judge. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.names import ACTIVE_PHASES, DONE_ANNOTATION
from reconciler.policy.findings import Finding
from reconciler.policy.payload import Payload
from reconciler.policy.transitions import firmware_upgrade_running, spec_changes
from reconciler.policy.validation import validate_document
from reconciler.stored_status import firmware_status_of, upgrade_status_of

API_VERSION = "admission.k8s.io/v1"
#: The reviewed resource (reconciler.kube.objects names it too; this module imports no client).
GROUP, PLURAL = "gpu.metax-tech.com", "clusteroperators"
KIND = "AdmissionReview"
#: An UPDATE carries two objects of up to 1.5 MiB (etcd's limit) and the review's envelope.
MAX_REVIEW_BYTES = 8 * 1024 * 1024
#: Validation findings of a policy *file* that every stored object would trip (docs/admission.md).
FILE_ONLY_RULES = frozenset({"server-populated-field", "helm-ownership-metadata",
                             "reconciler-annotation"})
#: The transition rules' findings (reconciler.policy.transitions), about the change itself.
TRANSITION_RULES = frozenset({"transition-locked-field", "firmware-locked-field",
                              "firmware-rollout-conflict"})
#: Lines of a denial message and admission warnings; the API server shortens what is longer.
MAX_LINES = 50
MAX_WARNINGS = 20

PAUSE = "/spec/driver/upgradePolicy/pause"
PAYLOAD = "/spec/driver/payload"
FIRMWARE_FIELDS = ("/spec/driver/fwUpgradePolicy", "/spec/driver/fwEnableVirt")


class NotAReview(ValueError):
    """The body is not an admission.k8s.io/v1 AdmissionReview with a request (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What the webhook answers. ``code`` and ``message`` are set when not allowed."""

    allowed: bool
    code: int = 200
    message: str = ""
    warnings: tuple[str, ...] = ()
    #: why an allowed request was allowed (logged, not sent)
    why: str = ""
    errors: tuple[Finding, ...] = field(default=())

    def response(self, uid: str) -> dict[str, Any]:
        body: dict[str, Any] = {"uid": uid, "allowed": self.allowed}
        if not self.allowed:
            # not reason Invalid: kubectl prints only "The request is invalid" for an Invalid
            # status without field causes, and the message is what a person must read
            body["status"] = {"status": "Failure", "code": self.code, "message": self.message,
                              "reason": "Forbidden" if self.code == 403 else "BadRequest"}
        if self.warnings:
            body["warnings"] = list(self.warnings)
        return body


def request_of(review: Any) -> Mapping[str, Any]:
    """The ``request`` of an AdmissionReview; NotAReview says what is wrong with the body."""
    if not isinstance(review, Mapping):
        raise NotAReview(f"expected a JSON object (an AdmissionReview), got {_json_type(review)}")
    kind, api_version = review.get("kind"), review.get("apiVersion")
    if kind != KIND or api_version != API_VERSION:
        raise NotAReview(f"expected kind {KIND} of apiVersion {API_VERSION}, got kind "
                         f"{_shown(kind)} of apiVersion {_shown(api_version)}")
    request = review.get("request")
    if not isinstance(request, Mapping):
        raise NotAReview("the AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise NotAReview("request.uid is missing (the response must carry it back)")
    return request


def review(body: Any) -> dict[str, Any]:
    """The AdmissionReview response to ``body`` (raises NotAReview for anything else)."""
    request = request_of(body)
    return response_review(str(request["uid"]), decide(request))


def response_review(uid: str, decision: Decision) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "response": decision.response(uid)}


def decide(request: Mapping[str, Any]) -> Decision:
    """The decision for one admission request (the ``request`` of an AdmissionReview)."""
    if request.get("subResource"):
        return Decision(True, why=f"the {request['subResource']} subresource is not reviewed")
    resource = _mapping(request, "resource")
    group, plural = resource.get("group"), resource.get("resource")
    if (group, plural) != (GROUP, PLURAL):
        return Decision(False, 400, f"this webhook reviews {PLURAL}.{GROUP} only, got "
                        f"{_shown(plural)}.{_shown(group)}; fix the webhook configuration's rules")
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return Decision(True, why=f"{operation} is not reviewed")
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return Decision(False, 400, f"request.object is missing on {operation}; nothing to "
                                    "validate, so nothing is admitted")
    old: Mapping[str, Any] | None = None
    if operation == "UPDATE":
        raw_old = request.get("oldObject")
        if not isinstance(raw_old, Mapping):
            return Decision(False, 400, "request.oldObject is missing on UPDATE: the transition "
                                        "rules (docs/rollout.md#starting-a-rollout) compare "
                                        "with the stored object, so the change cannot be "
                                        "checked and is refused")
        old = raw_old
    findings = _validate(obj, old)
    if old is not None:
        exception = _own_change(old, obj)
        if exception:
            # the transition findings are about this very change, which its content allows;
            # the rest was in the stored object already
            stored = [f for f in findings if f.rule not in TRANSITION_RULES]
            return Decision(True, warnings=_warnings(stored, stored=True), why=exception)
    errors = [f for f in findings if f.is_error]
    if errors:
        return Decision(False, 403, _lines(errors, MAX_LINES), _warnings(
            [f for f in findings if f.is_warning]), errors=tuple(errors))
    return Decision(True, warnings=_warnings(findings), why="valid")


def _validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[Finding]:
    metadata = _mapping(obj, "metadata")
    label = f"clusteroperator/{metadata.get('name') or metadata.get('generateName') or ''}"
    status = recorded_status(old) if old is not None else {}
    result = validate_document(
        json.dumps(obj), label,
        previous=old,
        phase=_text(_mapping(status, "upgradeStatus").get("phase")) if old is not None else None,
        firmware_phase=(_text(_mapping(status, "firmwareUpgrade").get("phase"))
                        if old is not None else None),
        max_bytes=MAX_REVIEW_BYTES,
        whole_object=True,
    )
    return [f for f in result.findings if f.rule not in FILE_ONLY_RULES and not f.is_info]


def _own_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """Why this update is allowed by its content alone, or "" when it must be validated."""
    old_spec, new_spec = _mapping(old, "spec"), _mapping(new, "spec")
    changes = list(spec_changes(old_spec, new_spec))
    if not changes:
        return "the spec is unchanged"
    status = recorded_status(old)
    rollback = any(pointer.startswith(PAYLOAD + "/") for pointer, _, _ in changes) and all(
        _payload_back(status, new_spec, pointer, after)
        for pointer, _, after in changes if pointer.startswith(PAYLOAD + "/"))
    reasons: set[str] = set()
    for pointer, _before, after in changes:
        if pointer == PAUSE and after is True:
            reasons.add("pause: true is always allowed")
        elif pointer.startswith(PAYLOAD + "/") and rollback:
            reasons.add("the payload is set back to the one the rollout started from")
        elif pointer == PAUSE and rollback:
            # the controller's apply of the payload releases the pause: true it set at a gate
            # (server-side apply drops a field its manager no longer sends)
            reasons.add("the rollback's write releases the rollout's own pause")
        elif pointer in FIRMWARE_FIELDS and _firmware_own(status, new):
            reasons.add("the firmware parameters are the running flow's own")
        else:
            return ""
    return "; ".join(sorted(reasons))


def _payload_back(status: Mapping[str, Any], new_spec: Mapping[str, Any], pointer: str,
                  after: Any) -> bool:
    """A rollback's RestorePayload (docs/rollout.md#fallback-rollback-and-pause): the rollout is
    active and the new payload names the image the rollout started from
    (``lastCoDriverSpec.payload``).

    The controller writes the payload before the status that names the rollback (so a crash in
    between never leaves the spec asking for the failed version), so the stored phase may still
    be ``Progressing``; the planner turns a payload set back during ``Progressing`` into a
    rollback whoever wrote it, so the change is a rollback by its content in every active phase.
    """
    upgrade = _mapping(status, "upgradeStatus")
    if upgrade.get("phase") not in ACTIVE_PHASES:
        return False
    previous = _mapping(_spec_text(upgrade.get("lastCoDriverSpec")), "payload")
    payload = _mapping(_mapping(new_spec, "driver"), "payload")
    if not previous.get("version") or not payload:
        return False
    key = pointer.removeprefix(PAYLOAD + "/")
    if key not in ("registry", "name", "version") and previous.get(key) != after:
        return False  # RestorePayload writes the whole previous payload, nothing else
    return Payload.from_spec(payload).same_image(Payload.from_spec(previous))


def _firmware_own(status: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The firmware orchestrator's own writes (docs/firmware.md) while its flow runs:
    ``PreferCloud`` with the flow's ``fwEnableVirt`` (applied and held), or ``Never`` written
    together with the annotation that records the end of that very flow."""
    firmware = _mapping(status, "firmwareUpgrade")
    if not firmware_upgrade_running(_text(firmware.get("phase"))):
        return False
    driver = _mapping(_mapping(new, "spec"), "driver")
    policy, virt = driver.get("fwUpgradePolicy"), driver.get("fwEnableVirt") is True
    requested = _mapping(firmware, "request")
    if policy == "PreferCloud":
        return virt == (requested.get("fwEnableVirt") is True)
    if policy == "Never":
        annotations = _mapping(_mapping(new, "metadata"), "annotations")
        done = annotations.get(DONE_ANNOTATION)
        flow = firmware.get("flow")
        return (isinstance(done, str) and isinstance(flow, str) and bool(flow)
                and done.startswith(f"{flow}:"))
    return False


def finding_line(finding: Finding) -> str:
    """``pointer: message [rule]``, on one line."""
    message = " ".join(finding.message.split())
    return f"{finding.pointer or '/'}: {message} [{finding.rule}]"


def _lines(findings: list[Finding], limit: int) -> str:
    lines = [finding_line(f) for f in findings[:limit]]
    if len(findings) > limit:
        lines.append(f"... and {len(findings) - limit} more findings "
                     "(`reconciler validate` on the object lists them all)")
    return "\n".join(lines)


def _warnings(findings: Iterable[Finding], *, stored: bool = False) -> tuple[str, ...]:
    shown: list[str] = []
    for finding in findings:
        line = finding_line(finding)
        if finding.is_error and stored:
            line = f"{line} (already in the stored object)"
        shown.append(line)
    if len(shown) > MAX_WARNINGS:
        shown = [*shown[:MAX_WARNINGS], f"... and {len(shown) - MAX_WARNINGS} more"]
    return tuple(shown)


def recorded_status(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The controllers' records of ``obj`` as one ``status`` mapping: ``upgradeStatus`` (its
    CRD fields and our annotation) and ``firmwareUpgrade`` (an annotation: the CRD has no
    field for it); see ``reconciler.stored_status``."""
    return {"upgradeStatus": upgrade_status_of(obj), "firmwareUpgrade": firmware_status_of(obj)}


def _spec_text(value: Any) -> Mapping[str, Any]:
    """``lastCoDriverSpec``: a string in the vendor's CRD (the driver spec as JSON); a mapping
    as older statuses wrote it. Anything else names no payload."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, Mapping) else {}


def _mapping(obj: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if obj is not None else None
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json_type(value: Any) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    text = value if isinstance(value, str) else json.dumps(value)
    return repr(text[:60])
