"""Semantic rules of docs/policy.md#the-fields and the metadata rules of docs/gitops.md.

They run after the schema layer and look only at values whose type the schema accepted, so a
mistake is reported once, by the layer that explains it best.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from reconciler.names import (
    DONE_ANNOTATION,
    NOTIFIED_ANNOTATION,
    REQUEST_ANNOTATION,
    SOURCE_COMMIT_ANNOTATION,
)
from reconciler.policy.crd_schema import ACTED_ON
from reconciler.policy.document import ParsedDocument, rejected_number
from reconciler.policy.findings import Finding, join_pointer
from reconciler.policy.quantity import PERCENT_RE, Quantity, parse_quantity
from reconciler.policy.schema import load_schema
from reconciler.stored_status import FIRMWARE_STATUS_ANNOTATION, ROLLOUT_STATE_ANNOTATION

POLICY_POINTER = "/spec/driver/upgradePolicy"

#: Written by the API server; a policy file that carries them was copied from `kubectl get`.
SERVER_POPULATED_METADATA = (
    "resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink",
    "deletionTimestamp", "deletionGracePeriodSeconds",
)
#: Helm's ownership metadata
#: (docs/gitops.md#metadata-what-the-sync-applies-and-what-it-leaves-alone): the vendor chart's
#: release owns it, never a policy (a ``helm upgrade`` refuses an object whose managed-by is not
#: Helm). The same keys the sync leaves out of every apply (``reconciler.sync.desired``).
HELM_MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
HELM_ANNOTATION_PREFIX = "meta.helm.sh/"


#: The reconciler's own annotations on the ClusterOperator, with what each records: written by
#: the sync, the controller, the firmware orchestrator and the notifier, never by a policy
#: (docs/gitops.md#metadata-what-the-sync-applies-and-what-it-leaves-alone). Applied from a
#: file they would be fought over (each write undoing the other's), and a firmware request
#: would start a flow no commit asked for.
RECONCILER_ANNOTATIONS: Final[Mapping[str, str]] = {
    SOURCE_COMMIT_ANNOTATION: "the commit the cluster runs, written by the sync",
    ROLLOUT_STATE_ANNOTATION: "the rollout's record, written by the rollout controller",
    FIRMWARE_STATUS_ANNOTATION: "the firmware flow's record, written by the firmware orchestrator",
    REQUEST_ANNOTATION: "a firmware request, written by the sync for a commit that asks for "
                        "PreferCloud",
    DONE_ANNOTATION: "the firmware flow that ended, written by the firmware orchestrator",
    NOTIFIED_ANNOTATION: "the notifications already sent, written by the notifier",
}


def is_reconciler_annotation(key: str) -> bool:
    """``key`` of ``metadata.annotations`` is one the reconciler writes itself."""
    return key in RECONCILER_ANNOTATIONS


def is_helm_ownership_key(section: str, key: str) -> bool:
    """``key`` of ``metadata.<section>`` belongs to Helm's release bookkeeping."""
    if section == "labels":
        return key == HELM_MANAGED_BY_LABEL
    return section == "annotations" and key.startswith(HELM_ANNOTATION_PREFIX)


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What a rule sees: the parsed file and, for transition rules, the live state."""

    doc: ParsedDocument
    #: the spec the cluster runs (including the rollout controller's own changes), if known
    previous_spec: Mapping[str, Any] | None
    #: ``status.upgradeStatus.phase`` of the cluster, if known
    phase: str | None
    #: the firmware upgrade phase of the cluster (status snapshot ``firmware.phase``), if known
    firmware_phase: str | None


def upgrade_policy_of(obj: Any) -> Mapping[str, Any] | None:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    driver = spec.get("driver") if isinstance(spec, dict) else None
    policy = driver.get("upgradePolicy") if isinstance(driver, dict) else None
    return policy if isinstance(policy, dict) else None


def _quantity(value: Any) -> Quantity | None:
    """The int-or-percent value if the schema accepted its form, else None (already reported)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    if rejected_number(value):
        return None  # the parse layer reported it
    if isinstance(value, str) and not PERCENT_RE.match(value):
        return None
    return parse_quantity(value)


def semantic_rules(ctx: RuleContext) -> Iterator[Finding]:
    yield from _metadata_rules(ctx.doc)
    yield from _not_acted_on(ctx.doc)
    policy = upgrade_policy_of(ctx.doc.obj)
    if policy is None:
        return
    yield from _percent_ranges(ctx.doc, policy)
    yield from _step_rules(ctx.doc, policy)


def _percent_ranges(doc: ParsedDocument, policy: Mapping[str, Any]) -> Iterator[Finding]:
    checks: list[tuple[str, Any, int, str]] = [
        (f"{POLICY_POINTER}/maxParallel", policy.get("maxParallel"), 1,
         "upgradePolicy.maxParallel"),
        (f"{POLICY_POINTER}/maxUnavailable", policy.get("maxUnavailable"), 0,
         "upgradePolicy.maxUnavailable"),
    ]
    steps = policy.get("upgradeSteps")
    if isinstance(steps, list):
        for index, step in enumerate(steps):
            if isinstance(step, dict):
                checks.append((f"{POLICY_POINTER}/upgradeSteps/{index}/replicas",
                               step.get("replicas"), 1, f"upgradeSteps[{index}].replicas"))
                checks.append((f"{POLICY_POINTER}/upgradeSteps/{index}/toleration",
                               step.get("toleration"), 0, f"upgradeSteps[{index}].toleration"))
    for pointer, value, low, label in checks:
        quantity = _quantity(value)
        if quantity is None or not quantity.percent:
            continue
        if not low <= quantity.value <= 100:
            yield doc.finding(
                pointer, "percent-range",
                f"{label}: expected a percentage from {low}% to 100%, got '{_shown(value)}'",
            )


def _shown(text: str) -> str:
    return text if len(text) <= 60 else f"{text[:40]}...{text[-10:]} ({len(text)} characters)"


def _step_rules(doc: ParsedDocument, policy: Mapping[str, Any]) -> Iterator[Finding]:
    steps = policy.get("upgradeSteps")
    if policy.get("enableRollout") is True and steps is None:
        yield doc.finding(
            f"{POLICY_POINTER}/upgradeSteps", "steps-required",
            "upgradePolicy: enableRollout is true but upgradeSteps is missing; add the batches, "
            "the last one with replicas: '100%'", key=True,
        )
    if not isinstance(steps, list) or not steps:
        return
    last_count: tuple[int, int] | None = None  # (value, step index)
    last_percent: tuple[int, int] | None = None
    full_at: int | None = None
    for index, step in enumerate(steps):
        replicas = step.get("replicas") if isinstance(step, dict) else None
        quantity = _quantity(replicas)
        pointer = f"{POLICY_POINTER}/upgradeSteps/{index}/replicas"
        if quantity is None or (quantity.percent and not 1 <= quantity.value <= 100):
            continue
        label = f"upgradeSteps[{index}].replicas"
        if full_at is not None:
            yield doc.finding(
                pointer, "steps-increasing",
                f"{label}: step targets must strictly increase, but step {full_at + 1} already "
                f"covers 100% of the nodes; this step would add none: remove it",
            )
            continue
        previous = last_percent if quantity.percent else last_count
        if previous is not None and quantity.value <= previous[0]:
            unit = "%" if quantity.percent else ""
            yield doc.finding(
                pointer, "steps-increasing",
                f"{label}: step targets must strictly increase (replicas is the cumulative number "
                f"of upgraded nodes), got {quantity.value}{unit} after {previous[0]}{unit} in "
                f"step {previous[1] + 1}",
            )
        if quantity.percent:
            last_percent = (quantity.value, index)
            if quantity.value == 100:
                full_at = index
        else:
            last_count = (quantity.value, index)
    last = steps[-1]
    replicas = last.get("replicas") if isinstance(last, dict) else None
    quantity = _quantity(replicas)
    if quantity is not None and not (quantity.percent and quantity.value == 100):
        shown = f"'{_shown(replicas)}'" if isinstance(replicas, str) else str(replicas)
        hint = ("; a node count cannot promise every node (N is known only when the rollout "
                "starts): end with replicas: '100%'" if not quantity.percent
                else "; add a last step with replicas: '100%'")
        yield doc.finding(
            f"{POLICY_POINTER}/upgradeSteps/{len(steps) - 1}/replicas", "last-step-100",
            f"upgradeSteps[{len(steps) - 1}].replicas: the last step must be '100%' so the "
            f"rollout upgrades every node, got {shown}{hint}",
        )


def _crd_properties(*path: str) -> Mapping[str, Any]:
    node = load_schema("clusteroperator")
    for name in path:
        node = node["properties"][name]
    properties: Mapping[str, Any] = node.get("properties", {})
    return properties


def _not_acted_on(doc: ParsedDocument) -> Iterator[Finding]:
    """One info finding naming every field of the vendor's CRD in the file that the reconciler
    does not act on (a ``spec`` section other than ``driver``; a ``spec.driver`` field other
    than the payload, the rollout policy and the firmware parameters): they are applied as
    written, for the vendor's operator. Located at the first of them."""
    spec = doc.obj.get("spec") if isinstance(doc.obj, dict) else None
    if not isinstance(spec, dict):
        return
    places: list[tuple[str, str]] = []
    for name, value in spec.items():
        if name == "driver" and isinstance(value, dict):
            known = _crd_properties("spec", "driver")
            places.extend((join_pointer("/spec/driver", key), f"spec.driver.{key}")
                          for key in value if key in known)
        elif name != "driver" and name in _crd_properties("spec"):
            places.append((join_pointer("/spec", name), f"spec.{name}"))
    places = [(pointer, label) for pointer, label in places if pointer not in ACTED_ON]
    if not places:
        return
    them = "it" if len(places) == 1 else "them"
    yield doc.finding(
        places[0][0], "not-acted-on",
        ", ".join(label for _, label in places) + ": applied, not acted on by the reconciler "
        f"(the vendor's operator reads {them}; validation checks {them} against the vendor's "
        "CRD)", key=True, info=True,
    )


def _metadata_rules(doc: ParsedDocument) -> Iterator[Finding]:
    obj = doc.obj
    if not isinstance(obj, dict):
        return
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        for name in SERVER_POPULATED_METADATA:
            if name in metadata:
                yield doc.finding(
                    f"/metadata/{name}", "server-populated-field",
                    f"metadata.{name} is set by the API server, not by a policy; it is never "
                    "applied: remove it (the file was probably copied from kubectl get)",
                    key=True, warning=True,
                )
        for section in ("labels", "annotations"):
            keys = metadata.get(section)
            for key in keys if isinstance(keys, dict) else ():
                if isinstance(key, str) and is_helm_ownership_key(section, key):
                    yield doc.finding(
                        join_pointer(f"/metadata/{section}", key), "helm-ownership-metadata",
                        f"metadata.{section}: '{key}' is Helm's ownership metadata, written by "
                        "the vendor chart's release, not by a policy: never applied (a helm "
                        "upgrade refuses an object whose managed-by is not Helm), the object "
                        "keeps the release's", key=True, info=True,
                    )
        annotations = metadata.get("annotations")
        for key in annotations if isinstance(annotations, dict) else ():
            if isinstance(key, str) and is_reconciler_annotation(key):
                yield doc.finding(
                    join_pointer("/metadata/annotations", key), "reconciler-annotation",
                    f"metadata.annotations: '{key}' is the reconciler's own "
                    f"({RECONCILER_ANNOTATIONS[key]}), not a policy's: never applied, the object "
                    "keeps the reconciler's; remove it (the file was probably copied from "
                    "kubectl get)", key=True, warning=True,
                )
        if "namespace" in metadata:
            yield doc.finding(
                "/metadata/namespace", "cluster-scoped-namespace",
                "metadata.namespace: ClusterOperator is cluster-scoped: the API server ignores "
                "a namespace (Helm's rendering writes one), and so does the reconciler",
                key=True, info=True,
            )
    if "status" in obj:
        yield doc.finding(
            "/status", "server-populated-field",
            "status is written by the rollout controller, not by a policy; it is never applied: "
            "remove it (status snapshots live under the repository's status path)",
            key=True, warning=True,
        )
