"""The ``ClusterOperator`` CustomResourceDefinition we install where the vendor's operator is not
(the dev cluster, deploy/crd.yaml, the Helm chart's ``crds/``): the vendor's own CRD
(``reconciler/data/metax-operator-0.15.2/``), field for field, with our additions and nothing
else (docs/dev-cluster.md#the-clusteroperator-crd):

- ``shortNames: [co]`` and printer columns (version, phase, step, step state) for ``kubectl get``;
- CEL rules (``x-kubernetes-validations``, :data:`CEL_RULES`) for the rules of
  docs/policy.md#the-fields that a CRD can say: ``upgradeSteps`` required by
  ``enableRollout: true``, at least one step, the last step ``100%``, the ranges of
  ``maxParallel`` and ``maxUnavailable``, ``maxFailureThreshold >= 1``. Rules on each step
  (``replicas``, ``toleration``, ``pauseDuration``) cannot be added: the vendor's list has no
  ``maxItems``, so the API server estimates their cost beyond its budget (``Forbidden: estimated
  rule cost exceeds budget by factor of more than 100x``, 1.37.2) and refuses the CRD. Servers
  before 1.25 (:data:`CEL_MINOR`) do not know the field (their server-side apply refuses it),
  so ``cel_rules=False`` leaves the rules out there; the admission webhook, which runs the
  reconciler's whole validation, answers all of them on every version.

Everything under ``spec`` and ``status`` (names, types, formats, enums, defaults, patterns,
required) is the vendor's; tests compare the two path by path.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from reconciler.data import vendor_crd
from reconciler.names import GROUP, PLURAL

SINGULAR = "clusteroperator"
CRD_NAME = f"{PLURAL}.{GROUP}"
#: our additions to the vendor's ``names``
SHORT_NAMES = ["co"]
#: our additions: the columns of ``kubectl get clusteroperators``
PRINTER_COLUMNS: list[dict[str, str]] = [
    {"name": "Version", "type": "string", "jsonPath": ".spec.driver.payload.version"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.upgradeStatus.phase"},
    {"name": "Step", "type": "integer",
     "jsonPath": ".status.upgradeStatus.status.currentStepIndex"},
    {"name": "State", "type": "string",
     "jsonPath": ".status.upgradeStatus.status.currentStepState"},
]


def _percent_rule(low: int) -> dict[str, str]:
    # Leading zeros are allowed, as the reconciler's validation reads "0100%" as 100%.
    digits = "[1-9][0-9]?" if low == 1 else "[0-9]{1,2}"
    return {"rule": f"type(self) != string || self.matches('^0*({digits}|100)%$')",
            "message": f"expected a percentage from {low}% to 100%"}


def _count_rule(low: int) -> dict[str, str]:
    return {"rule": f"type(self) != int || self >= {low}",
            "message": f"expected an integer >= {low}"}


#: the first release whose CRDs take ``x-kubernetes-validations``
CEL_MINOR = 25
_LAST = "self[size(self) - 1]"
#: CEL rules by their place under ``spec`` (``[]``: the list's items;
#: docs/policy.md#the-fields), each in the words of the reconciler's own finding.
CEL_RULES: dict[tuple[str, ...], list[dict[str, str]]] = {
    ("driver", "upgradePolicy"): [{
        "rule": "!has(self.enableRollout) || !self.enableRollout || has(self.upgradeSteps)",
        "message": "enableRollout is true but upgradeSteps is missing; add the batches, the "
                   "last one with replicas: '100%'",
        "fieldPath": ".upgradeSteps", "reason": "FieldValueRequired"}],
    ("driver", "upgradePolicy", "maxParallel"): [_count_rule(1), _percent_rule(1)],
    ("driver", "upgradePolicy", "maxUnavailable"): [_count_rule(0), _percent_rule(0)],
    ("driver", "upgradePolicy", "maxFailureThreshold"): [{
        "rule": "self >= 1", "message": "expected an integer >= 1"}],
    ("driver", "upgradePolicy", "upgradeSteps"): [
        {"rule": "size(self) >= 1",
         "message": "expected at least 1 step; add the batches, the last one with "
                    "replicas: 100%"},
        {"rule": f"size(self) == 0 || !has({_LAST}.replicas) || "
                 f"(type({_LAST}.replicas) == string && {_LAST}.replicas.matches('^0*100%$'))",
         "message": "the last step must be '100%' so the rollout upgrades every node"}],
}


def _add_cel_rules(spec: dict[str, Any]) -> None:
    for place, rules in CEL_RULES.items():
        node: dict[str, Any] | None = spec
        for part in place:
            if node is None:
                break
            node = (node.get("properties") or {}).get(part.removesuffix("[]"))
            if node is not None and part.endswith("[]"):
                node = node.get("items")
        if node is not None:
            node["x-kubernetes-validations"] = copy.deepcopy(rules)


def _drop_empty_defaults(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("default") == "":
            del node["default"]
        for child in node.values():
            _drop_empty_defaults(child)
    elif isinstance(node, list):
        for child in node:
            _drop_empty_defaults(child)


def cluster_operator_crd(vendor_schema: Mapping[str, Any] | None = None, *,
                         cel_rules: bool = True,
                         empty_defaults: bool | None = None) -> dict[str, Any]:
    """The ``ClusterOperator`` CRD: the vendor's, with our additions. ``vendor_schema``
    replaces the vendor's ``openAPIV3Schema`` (tests); ``cel_rules=False`` for a server older
    than 1.25, whose server-side apply refuses the unknown ``x-kubernetes-validations``.
    ``empty_defaults=False`` (by default: with ``cel_rules=False``) leaves out the vendor's six
    ``default: ""``, which the 1.20.2 API server reads as null and refuses the whole CRD for
    (docs/dev-cluster.md#what-differs-where-our-code-depends-on-the-server)."""
    crd = vendor_crd()
    crd.setdefault("metadata", {})["name"] = CRD_NAME
    crd["spec"]["names"]["shortNames"] = list(SHORT_NAMES)
    (version,) = crd["spec"]["versions"]
    if vendor_schema is not None:
        version["schema"]["openAPIV3Schema"] = copy.deepcopy(dict(vendor_schema))
    version["additionalPrinterColumns"] = copy.deepcopy(PRINTER_COLUMNS)
    if cel_rules:
        _add_cel_rules(version["schema"]["openAPIV3Schema"]["properties"]["spec"])
    if not (cel_rules if empty_defaults is None else empty_defaults):
        _drop_empty_defaults(version["schema"]["openAPIV3Schema"])
        # the same server reads every "" in a custom resource as null: a string field takes
        # null there, so an object (and a status) with empty strings is stored as elsewhere
        _strings_nullable(version["schema"]["openAPIV3Schema"])
    return crd


def _strings_nullable(node: Any, keys: frozenset[str] = frozenset()) -> None:
    """Every string field (reached through properties, items, additionalProperties; never a
    list-map key nor an anyOf branch, which a structural schema forbids) takes null."""
    if not isinstance(node, dict):
        return
    for name, child in (node.get("properties") or {}).items():
        if isinstance(child, dict) and child.get("type") == "string" and name not in keys:
            child["nullable"] = True
        _strings_nullable(child)
    items = node.get("items")
    if isinstance(items, dict):
        list_keys = frozenset(node.get("x-kubernetes-list-map-keys") or ())
        if items.get("type") == "string":
            items["nullable"] = True
        _strings_nullable(items, list_keys)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        if extra.get("type") == "string":
            extra["nullable"] = True
        _strings_nullable(extra)
