"""The ``ClusterOperator`` CustomResourceDefinition, with a structural schema generated from the
project's JSON Schema (``schemas/clusteroperator.schema.json``).

A CRD schema is OpenAPI v3 restricted to "structural" form: every node has a type, no ``$ref``,
no type inside ``oneOf``/``anyOf``. The conversion:

- ``$ref`` to ``$defs`` is inlined (siblings such as ``description`` are kept);
- an integer-or-string ``oneOf`` (e.g. int-or-percent) becomes ``x-kubernetes-int-or-string``
  with the branches' value checks side by side (``minimum`` only checks integers, ``pattern``
  only strings);
- any other mix of types (e.g. ``pauseDuration``: integer or ``{}``) becomes
  ``x-kubernetes-preserve-unknown-fields``: the API server stores it as written and the
  reconciler's validation checks it;
- ``additionalProperties: false`` is dropped (the API server prunes unknown fields instead; the
  reconciler's validation reports them as errors before anything is applied);
- ``default`` is kept: the defaults of docs/policy.md#the-fields are the values a real install
carries (docs/policy.md#the-fields),
  so the API server fills in what a policy leaves out with what the controller assumes anyway;
- the rules of docs/policy.md#the-fields that a CRD can express in CEL
(``x-kubernetes-validations``, enforced by
  1.25 and newer; left out for 1.20, whose server-side apply refuses the field) are added
  where they belong (``CEL_RULES``): percent ranges, ``upgradeSteps`` required by
  ``enableRollout: true``, the last step ``100%``. The rest (steps strictly increasing,
  transitions against the old object, ...) stays with the admission webhook, which runs the
  reconciler's whole validation;
- keywords OpenAPI v3 lacks (``const``, ``$schema``, ``examples``, 2020-12's numeric
  ``exclusiveMinimum``...) are translated or dropped.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reconciler.names import GROUP, KIND, PLURAL, VERSION

SINGULAR = "clusteroperator"
CRD_NAME = f"{PLURAL}.{GROUP}"

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "clusteroperator.schema.json"

# Keywords that carry over unchanged.
_KEPT = {
    "description", "title", "enum", "minimum", "maximum", "minLength", "maxLength",
    "pattern", "minItems", "maxItems", "minProperties", "maxProperties", "multipleOf",
    "required", "nullable", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
    "x-kubernetes-embedded-resource", "default",
}
# Value checks that may sit inside the int-or-string anyOf branches.
_BRANCH_CHECKS = {"minimum", "maximum", "pattern", "enum", "minLength", "maxLength", "multipleOf"}


def _percent_rule(low: int) -> dict[str, str]:
    # Leading zeros are allowed, as the reconciler's validation reads "0100%" as 100%.
    digits = "[1-9][0-9]?" if low == 1 else "[0-9]{1,2}"
    return {"rule": f"type(self) != string || self.matches('^0*({digits}|100)%$')",
            "message": f"expected a percentage from {low}% to 100%"}


#: the first release whose CRDs take ``x-kubernetes-validations``
CEL_MINOR = 25
_LAST = "self[size(self) - 1]"
#: CEL rules by their place under ``spec`` (docs/policy.md#the-fields), each in the words of the
#: reconciler's own finding; a place the schema does not have is skipped.
CEL_RULES: dict[tuple[str, ...], list[dict[str, str]]] = {
    ("driver", "upgradePolicy"): [{
        "rule": "!has(self.enableRollout) || !self.enableRollout || has(self.upgradeSteps)",
        "message": "enableRollout is true but upgradeSteps is missing; add the batches, the "
                   "last one with replicas: '100%'",
        "fieldPath": ".upgradeSteps", "reason": "FieldValueRequired"}],
    ("driver", "upgradePolicy", "maxParallel"): [_percent_rule(1)],
    ("driver", "upgradePolicy", "maxUnavailable"): [_percent_rule(0)],
    ("driver", "upgradePolicy", "upgradeSteps"): [{
        "rule": f"size(self) == 0 || !has({_LAST}.replicas) || "
                f"(type({_LAST}.replicas) == string && {_LAST}.replicas.matches('^0*100%$'))",
        "message": "the last step must be '100%' so the rollout upgrades every node"}],
}


def _add_cel_rules(spec: dict[str, Any]) -> None:
    for place, rules in CEL_RULES.items():
        node: dict[str, Any] | None = spec
        for part in place:
            if node is None:
                break
            node = (node.get("properties") or {}).get(part)
        if node is not None:
            node["x-kubernetes-validations"] = copy.deepcopy(rules)


class SchemaConversionError(ValueError):
    pass


def load_schema(path: Path = SCHEMA_PATH) -> dict[str, Any]:
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise SchemaConversionError(f"{path}: not found") from exc
    except ValueError as exc:
        raise SchemaConversionError(f"{path}: not JSON: {exc}") from exc
    return loaded


class _Converter:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.defs: Mapping[str, Any] = root.get("$defs") or root.get("definitions") or {}

    def resolve(self, node: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
        return self._resolve(node, seen)[0]

    def _resolve(
        self, node: Mapping[str, Any], seen: tuple[str, ...]
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """``node`` with a ``$ref`` replaced by its target merged under the node's siblings, and
        the definitions followed to get there (to detect recursion)."""
        ref = node.get("$ref")
        if ref is None:
            return dict(node), seen
        prefix = next((p for p in ("#/$defs/", "#/definitions/") if str(ref).startswith(p)), None)
        if prefix is None:
            raise SchemaConversionError(f"unsupported $ref {ref!r} (only local $defs)")
        name = str(ref)[len(prefix):]
        if name in seen:
            raise SchemaConversionError(f"recursive $ref {ref!r} cannot be inlined")
        if name not in self.defs:
            raise SchemaConversionError(f"$ref {ref!r} names no definition")
        target, followed = self._resolve(self.defs[name], (*seen, name))
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return merged, followed

    def convert(self, node: Mapping[str, Any], seen: tuple[str, ...] = ()) -> dict[str, Any]:
        node, seen = self._resolve(node, seen)
        if "allOf" in node:
            node = self._merge_all_of(node, seen)
        out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in node.items() if k in _KEPT}
        if "const" in node:
            out["enum"] = [node["const"]]
        if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(
            node.get("exclusiveMinimum"), bool
        ):
            out["minimum"] = node["exclusiveMinimum"]
            out["exclusiveMinimum"] = True
        if isinstance(node.get("exclusiveMaximum"), int | float) and not isinstance(
            node.get("exclusiveMaximum"), bool
        ):
            out["maximum"] = node["exclusiveMaximum"]
            out["exclusiveMaximum"] = True

        types = node.get("type")
        if isinstance(types, list):
            non_null = [t for t in types if t != "null"]
            if "null" in types:
                out["nullable"] = True
            types = non_null[0] if len(non_null) == 1 else (non_null or None)
        branches = node.get("oneOf") or node.get("anyOf")
        if types is None and branches:
            return self._junction(out, [self.resolve(b, seen) for b in branches], seen)
        if isinstance(types, list):  # several types without branches
            return self._untyped(out)
        if types is None:
            if out.get("x-kubernetes-int-or-string"):
                return out
            if "properties" not in node:
                return self._untyped(out)
            types = "object"
        out["type"] = types
        if types == "object":
            self._object(node, out, seen)
        elif types == "array":
            items = node.get("items")
            out["items"] = (self.convert(items, seen) if isinstance(items, Mapping)
                            else {"x-kubernetes-preserve-unknown-fields": True})
        return out

    def _object(self, node: Mapping[str, Any], out: dict[str, Any], seen: tuple[str, ...]) -> None:
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        if properties:
            out["properties"] = {k: self.convert(v, seen) for k, v in properties.items()}
            if extra is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
        elif isinstance(extra, Mapping):
            out["additionalProperties"] = self.convert(extra, seen)
        elif extra is not False:
            # An object whose keys the schema leaves open is kept as written.
            out["x-kubernetes-preserve-unknown-fields"] = True
        if "patternProperties" in node and "additionalProperties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True

    def _junction(
        self, out: dict[str, Any], branches: list[dict[str, Any]], seen: tuple[str, ...]
    ) -> dict[str, Any]:
        kinds = {str(b.get("type")) for b in branches}
        if kinds == {"integer", "string"} or kinds == {"number", "string"}:
            out["x-kubernetes-int-or-string"] = True
            # Numeric checks only apply to numbers and string checks only to strings, so both
            # branches' checks can sit side by side (a structural schema allows no typed anyOf).
            numeric = {"minimum", "maximum", "multipleOf"}
            for branch in branches:
                allowed = numeric if branch.get("type") != "string" else _BRANCH_CHECKS - numeric
                out.update({k: v for k, v in branch.items() if k in allowed and k != "enum"})
            return out
        if len(kinds) == 1 and kinds != {"None"}:
            # Same type in every branch: one schema with the union of their properties.
            merged: dict[str, Any] = {"type": next(iter(kinds)), "properties": {}}
            for branch in branches:
                merged["properties"].update(branch.get("properties") or {})
            converted = self.convert(merged, seen)
            converted.update({k: v for k, v in out.items() if k not in converted})
            return converted
        return self._untyped(out)

    @staticmethod
    def _untyped(out: dict[str, Any]) -> dict[str, Any]:
        """No single type: stored as written (validated by the reconciler, not the server)."""
        kept = {k: v for k, v in out.items() if k in ("description", "title", "nullable")}
        kept["x-kubernetes-preserve-unknown-fields"] = True
        return kept

    def _merge_all_of(self, node: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
        merged: dict[str, Any] = {k: v for k, v in node.items() if k != "allOf"}
        for part in node["allOf"]:
            resolved = self.resolve(part, seen)
            props = {**(merged.get("properties") or {}), **(resolved.get("properties") or {})}
            required = sorted({*merged.get("required", []), *resolved.get("required", [])})
            merged = {**resolved, **merged}
            if props:
                merged["properties"] = props
            if required:
                merged["required"] = required
        return merged


def structural_schema(json_schema: Mapping[str, Any], *,
                      cel_rules: bool = True) -> dict[str, Any]:
    """The CRD ``openAPIV3Schema`` for a JSON Schema describing the whole object (with ``spec``)
    or only its ``spec``; with ``CEL_RULES`` unless told not to (for servers before 1.25)."""
    converter = _Converter(json_schema)
    root = converter.resolve(json_schema, ())
    spec_schema = (root.get("properties") or {}).get("spec")
    spec = converter.convert(spec_schema if spec_schema is not None else root)
    if cel_rules:
        _add_cel_rules(spec)
    return {
        "type": "object",
        "description": str(root.get("description") or f"{KIND} of the GPU operator."),
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }


def cluster_operator_crd(json_schema: Mapping[str, Any] | None = None, *,
                         cel_rules: bool = True) -> dict[str, Any]:
    """The ``ClusterOperator`` CRD (cluster-scoped, status subresource). ``cel_rules=False``
    for a server older than 1.25, whose server-side apply refuses the unknown
    ``x-kubernetes-validations`` field."""
    schema = structural_schema(json_schema if json_schema is not None else load_schema(),
                               cel_rules=cel_rules)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": ["co"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Version", "type": "string",
                         "jsonPath": ".spec.driver.payload.version"},
                        {"name": "Phase", "type": "string",
                         "jsonPath": ".status.upgradeStatus.phase"},
                        {"name": "Step", "type": "integer",
                         "jsonPath": ".status.upgradeStatus.status.currentStepIndex"},
                        {"name": "State", "type": "string",
                         "jsonPath": ".status.upgradeStatus.status.currentStepState"},
                    ],
                }
            ],
        },
    }
