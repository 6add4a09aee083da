"""What the sync applies for one accepted commit: pure, no Kubernetes, no Git, no clock.

The body of the server-side apply holds only what the repository owns: ``metadata.name``,
labels and annotations from the file (server-populated metadata, ``status``, Helm's ownership
metadata and the reconciler's own annotations are never applied; finalizers are never sent, so
the vendor's stays), the spec without the fields the rollout controller keeps
(docs/gitops.md#git-stays-the-truth), and two annotations of our own: the commit the cluster
now runs, and a firmware request when a commit asks for ``fwUpgradePolicy: PreferCloud``
(docs/firmware.md: that value is never applied as is; the firmware orchestrator takes the request
over).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.fieldpath import MISSING, FieldPath, ensure, remove, resolve, section
from reconciler.firmware.request import firmware_request_annotation
from reconciler.names import API_VERSION, KIND, REQUEST_ANNOTATION
from reconciler.names import SOURCE_COMMIT_ANNOTATION as SOURCE_COMMIT_ANNOTATION
from reconciler.policy.rules import is_helm_ownership_key, is_reconciler_annotation
from reconciler.sync.fields import FW_POLICY, FW_VIRT

FIRMWARE_REQUEST_ANNOTATION = REQUEST_ANNOTATION
FW_POLICY_FIELD: FieldPath = FW_POLICY
FW_VIRT_FIELD: FieldPath = FW_VIRT
PREFER_CLOUD = "PreferCloud"

#: metadata a person may own in Git; everything else under metadata is the server's
OWNED_METADATA = ("name", "labels", "annotations")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def firmware_request_value(*, fw_enable_virt: bool, source_commit: str) -> str:
    """The annotation value the firmware orchestrator takes over (docs/firmware.md)."""
    _, value = firmware_request_annotation(enable_virt=fw_enable_virt,
                                           source_commit=source_commit)
    return value


def firmware_requested(
    proposed: Mapping[str, Any], live: Mapping[str, Any] | None,
    last_applied: Mapping[str, Any] | None,
) -> bool:
    """The new commit asks for a firmware upgrade: it says ``PreferCloud`` where the last
    applied commit did not, and the cluster is not already upgrading firmware."""
    if resolve(proposed, FW_POLICY_FIELD) != PREFER_CLOUD:
        return False
    if live is not None and resolve(live, FW_POLICY_FIELD) == PREFER_CLOUD:
        return False
    return last_applied is None or resolve(last_applied, FW_POLICY_FIELD) != PREFER_CLOUD


def without_nulls(value: Any) -> Any:
    """``value`` (a deep copy) without the null values of its mappings and lists."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value if item is not None]
    return copy.deepcopy(value)


def apply_body(
    proposed: Mapping[str, Any],
    *,
    name: str,
    source_commit: str,
    kept: Iterable[FieldPath] = (),
    live: Mapping[str, Any] | None = None,
    firmware_request: str | None = None,
) -> dict[str, Any]:
    """The object the sync applies (field manager ``gpu-gitops-reconciler``).

    ``kept``: fields the controller owns and keeps (left out, so its ownership stays);
    ``firmware_request``: a new request to put on the object. Whenever Git says ``PreferCloud``
    and the cluster does not, the live ``fwUpgradePolicy``/``fwEnableVirt`` are applied instead,
    and a request already on the object is kept until the orchestrator has taken it over.
    """
    meta = _mapping(proposed.get("metadata"))
    metadata: dict[str, Any] = {"name": name}
    labels = {str(k): str(v) for k, v in _mapping(meta.get("labels")).items()
              if not is_helm_ownership_key("labels", str(k))}
    if labels:
        metadata["labels"] = labels
    annotations = {str(k): str(v) for k, v in _mapping(meta.get("annotations")).items()
                   if not is_helm_ownership_key("annotations", str(k))
                   and not is_reconciler_annotation(str(k))}
    annotations[SOURCE_COMMIT_ANNOTATION] = source_commit
    # an empty value is a key left out, as a create stores it (server-side apply refuses a
    # null; Helm renders unset values so): docs/validation.md, null-left-out
    spec = without_nulls(dict(_mapping(proposed.get("spec"))))
    body: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata,
                            "spec": spec}
    kept_set = {tuple(f) for f in kept}
    for field in kept_set:
        remove(body, field)
    if FW_POLICY_FIELD not in kept_set and resolve(body, FW_POLICY_FIELD) == PREFER_CLOUD:
        live_policy = resolve(live, FW_POLICY_FIELD) if live is not None else MISSING
        if live_policy != PREFER_CLOUD:
            ensure(body, FW_POLICY_FIELD, "Never" if live_policy is MISSING else live_policy)
            # fwEnableVirt goes with the request too; the cluster keeps its value meanwhile
            live_virt = resolve(live, FW_VIRT_FIELD) if live is not None else MISSING
            if resolve(body, FW_VIRT_FIELD) is not MISSING:
                ensure(body, FW_VIRT_FIELD, live_virt)  # MISSING: left out
            pending = section(live, ("metadata", "annotations")).get(FIRMWARE_REQUEST_ANNOTATION)
            request = firmware_request or pending
            if request:
                annotations[FIRMWARE_REQUEST_ANNOTATION] = str(request)
    metadata["annotations"] = annotations
    return body


def drifted(body: Mapping[str, Any], live: Mapping[str, Any], *,
            ignore: Iterable[FieldPath] = ()) -> list[str]:
    """Leaves of ``body``'s spec and owned metadata that the live object does not hold (a
    change made directly in the cluster: Git wins). ``ignore``: fields the controller owns."""
    skip = {tuple(f) for f in ignore}
    found: list[str] = []

    def walk(want: Any, have: Any, path: tuple[str, ...]) -> None:
        if path in skip:
            return
        if isinstance(want, Mapping):
            have_map = have if isinstance(have, Mapping) else {}
            for key, value in want.items():
                walk(value, have_map.get(key, MISSING), (*path, str(key)))
            return
        if want != have:
            found.append(".".join(path))

    walk(_mapping(body.get("spec")), _mapping(live.get("spec")), ("spec",))
    meta = _mapping(body.get("metadata"))
    live_meta = _mapping(live.get("metadata"))
    for part in ("labels", "annotations"):
        walk(_mapping(meta.get(part)), _mapping(live_meta.get(part)), ("metadata", part))
    return found


def sync_owned_tree(managed_fields: Iterable[Mapping[str, Any]], manager: str) -> Mapping[str, Any]:
    """The FieldsV1 tree of what ``manager`` applied (``{"f:spec": {"f:driver": ...}}``)."""
    for entry in managed_fields:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            tree = entry.get("fieldsV1")
            return tree if isinstance(tree, Mapping) else {}
    return {}


def what_stays(live: Mapping[str, Any], proposed: Mapping[str, Any],
               owned: Mapping[str, Any]) -> dict[str, Any]:
    """The live object without the spec fields that Git does not name and the sync does not
    own: an apply leaves those in place (another manager owns them), so the transition rules
    must not read their absence from Git as a removal."""
    result = copy.deepcopy(dict(live))

    def prune(have: dict[str, Any], want: Mapping[str, Any], tree: Mapping[str, Any]) -> None:
        for key in list(have):
            sub = tree.get(f"f:{key}") if isinstance(tree, Mapping) else None
            if key not in want:
                if sub is None:
                    del have[key]
            elif isinstance(have[key], dict) and isinstance(want[key], Mapping):
                prune(have[key], want[key], sub if isinstance(sub, Mapping) else {})

    spec = result.get("spec")
    if isinstance(spec, dict):
        prune(spec, _mapping(proposed.get("spec")), _mapping(owned.get("f:spec")))
    return result
