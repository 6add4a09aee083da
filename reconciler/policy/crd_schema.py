"""``schemas/clusteroperator.schema.json``, generated from the vendor's CRD (one source).

The vendor's ``ClusterOperator`` CRD (``reconciler/data/metax-operator-0.15.2/``) is the contract
(docs/dev-cluster.md#the-clusteroperator-crd): every field under ``spec`` and ``status`` keeps its
name, type, format, enum, default, pattern and requiredness. :func:`cluster_operator_json_schema`
turns its ``openAPIV3Schema`` into JSON Schema 2020-12 the way the API server reads it, then lays
the reconciler's stricter rules over it (:data:`DIFFERENCES`, each with why):

- ``x-kubernetes-int-or-string`` (an ``anyOf`` of integer and string) becomes a ``oneOf`` of the
  two (they never overlap);
- ``format: int32`` / ``int64`` on an integer becomes ``minimum`` / ``maximum`` of that range
  (the ``format`` is kept, as an annotation);
- ``pattern`` stays as written: the API server and JSON Schema both search the text, so the
  vendor's unanchored ``[a-zA-Z0-9\\-]+`` matches anywhere in it;
- ``required``, ``default``, ``enum``, ``format: date-time`` and the ``x-kubernetes-*`` keys are
  kept as written (the validator skips a required field the server would fill in from its
  ``default``, and reads ``required`` of a policy file as docs/validation.md says);
- the repeated sub-schemas (every component's ``image``, ``log`` and ``podTemplateSpec``) are
  written once under ``$defs`` and referenced.

``deploy/generate-crd`` writes the file (``--check`` fails when it is stale); tests compare it
with the vendor's CRD path by path. Pure: no I/O but reading the package's data.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.data import VENDOR_CHART, vendor_openapi_schema
from reconciler.names import API_VERSION, KIND

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
FORMAT_RANGES = {"int32": INT32, "int64": INT64}

#: our own patterns (docs/policy.md#the-fields)
PERCENT_PATTERN = "^[0-9]+%$"
IMAGE_TAG_PATTERN = "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
IMAGE_NAME_PATTERN = "^[a-z0-9]+([._/-][a-z0-9]+)*$"
DNS_NAME_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

#: repeated vendor sub-schemas written once under ``$defs`` (by property name)
SHARED_DEFS = {"podTemplateSpec": "PodTemplateSpec", "image": "Image", "log": "Log"}

SCHEMA_ID = "urn:gpu-gitops-reconciler:schema:clusteroperator"

#: The fields of ``spec`` the reconciler acts on (docs/policy.md#the-fields): the driver payload,
#: the rollout policy and the firmware parameters. Every other field the CRD has is applied as
#: written and left to the vendor's operator (validation says so once, as info).
ACTED_ON = ("/spec/driver/payload", "/spec/driver/upgradePolicy",
            "/spec/driver/fwUpgradePolicy", "/spec/driver/fwEnableVirt",
            "/spec/driver/fwEffectPolicy")


def openapi_to_json_schema(node: Mapping[str, Any]) -> dict[str, Any]:
    """One CRD schema node (and everything below it) as JSON Schema 2020-12."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: openapi_to_json_schema(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = openapi_to_json_schema(value)
        elif key == "anyOf":
            # int-or-string: the branches are disjoint, so oneOf says the same and the
            # validator's messages name the branch that matched the value's type
            out["oneOf"] = [openapi_to_json_schema(branch) for branch in value]
        else:
            out[key] = copy.deepcopy(value)
    if node.get("type") == "integer" and node.get("format") in FORMAT_RANGES:
        low, high = FORMAT_RANGES[str(node["format"])]
        out.setdefault("minimum", low)
        out.setdefault("maximum", high)
    return out


def _without_description(node: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != "description"}


def _share(node: dict[str, Any], defs: dict[str, Any]) -> None:
    """Replace each repeated sub-schema of :data:`SHARED_DEFS` by a ``$ref`` (its own
    description kept beside it); one that differs from the first seen stays inline."""
    for name, child in list((node.get("properties") or {}).items()):
        def_name = SHARED_DEFS.get(name)
        if def_name is not None:
            body = _without_description(child)
            if def_name not in defs:
                defs[def_name] = body
            if defs[def_name] == body:
                shared: dict[str, Any] = {"$ref": f"#/$defs/{def_name}"}
                if "description" in child:
                    shared["description"] = child["description"]
                node["properties"][name] = shared
                continue
        _share(child, defs)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            _share(node[key], defs)


# -- our stricter rules -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Difference:
    """One place where our JSON Schema is stricter than (or adds to) the vendor's CRD."""

    #: the field, dotted, ``[]`` for a list's items (``spec.driver.upgradePolicy.maxParallel``)
    path: str
    #: the JSON Schema keywords that differ there
    keywords: tuple[str, ...]
    what: str
    why: str


def _node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema node of the dotted ``path`` (``[]`` steps into items, ``$defs.X`` a def)."""
    if path.startswith("$defs."):
        head, _, rest = path[len("$defs."):].partition(".")
        node: dict[str, Any] = schema["$defs"][head]
        parts = rest.split(".") if rest else []
    else:
        node = schema
        parts = path.split(".") if path else []
    for part in parts:
        items = part.endswith("[]")
        node = node["properties"][part.removesuffix("[]")]
        if items:
            node = node["items"]
    return node


def _int_or_percent(low: int) -> list[dict[str, Any]]:
    return [{"type": "integer", "minimum": low, "maximum": INT64[1]},
            {"type": "string", "pattern": PERCENT_PATTERN}]


def _stricter(pattern: str) -> Callable[[dict[str, Any]], None]:
    def patch(node: dict[str, Any]) -> None:
        node["allOf"] = [{"pattern": pattern}]
    return patch


def _set(**values: Any) -> Callable[[dict[str, Any]], None]:
    def patch(node: dict[str, Any]) -> None:
        node.update(copy.deepcopy(values))
    return patch


_POLICY = "spec.driver.upgradePolicy"
_STEP = f"{_POLICY}.upgradeSteps[]"

#: Every difference between schemas/clusteroperator.schema.json and the vendor's CRD under
#: ``spec`` and ``status`` (docs/validation.md#our-schema-and-the-vendors-crd lists them too).
DIFFERENCES: tuple[tuple[Difference, Callable[[dict[str, Any]], None]], ...] = (
    (Difference(_POLICY, ("additionalProperties",),
                "unknown keys are errors",
                "the API server would drop a misspelt key (maxParalel) and the rollout would run "
                "with the default; a policy must say what it means"),
     _set(additionalProperties=False)),
    (Difference(f"{_POLICY}.maxParallel", ("oneOf",),
                "an integer >= 1 or a percentage 'N%' (1% to 100%, checked by a rule)",
                "0 or 0% would never start a node; any other string has no meaning"),
     _set(oneOf=_int_or_percent(1))),
    (Difference(f"{_POLICY}.maxUnavailable", ("oneOf",),
                "an integer >= 0 or a percentage 'N%' (0% to 100%, checked by a rule)",
                "a negative count or any other string has no meaning"),
     _set(oneOf=_int_or_percent(0))),
    (Difference(f"{_POLICY}.maxFailureThreshold", ("minimum",),
                "at least 1 (the int32 maximum stays)",
                "a threshold of 0 or less would fall back before the first failure"),
     _set(minimum=1)),
    (Difference(f"{_POLICY}.upgradeSteps", ("minItems",),
                "at least one step",
                "an empty list cannot upgrade a node; leave the key out instead"),
     _set(minItems=1)),
    (Difference(_STEP, ("additionalProperties", "required"),
                "unknown keys are errors; replicas is required",
                "a step without replicas has no target; a misspelt key would be dropped"),
     _set(additionalProperties=False, required=["replicas"])),
    (Difference(f"{_STEP}.replicas", ("oneOf",),
                "an integer >= 1 or a percentage 'N%' (1% to 100%, checked by a rule)",
                "replicas is the cumulative number of upgraded nodes; 0 upgrades none"),
     _set(oneOf=_int_or_percent(1))),
    (Difference(f"{_STEP}.toleration", ("oneOf",),
                "an integer >= 0 or a percentage 'N%' (0% to 100%, checked by a rule)",
                "the failed nodes a step tolerates; a negative count has no meaning"),
     _set(oneOf=_int_or_percent(0))),
    (Difference(f"{_STEP}.pauseDuration", ("minimum",),
                "at least 0 milliseconds",
                "a negative wait has no meaning (leave pauseDuration out for a manual gate)"),
     _set(minimum=0)),
    (Difference("spec.driver.payload.name", ("allOf",),
                f"also matches {IMAGE_NAME_PATTERN}",
                "the driver image's name is part of an image reference: lowercase path "
                "components"),
     _stricter(IMAGE_NAME_PATTERN)),
    (Difference("spec.driver.payload.version", ("allOf",),
                f"also matches {IMAGE_TAG_PATTERN}",
                "the version is an image tag: a container runtime refuses anything else "
                "(the vendor's pattern only asks for one letter, digit or '-' anywhere)"),
     _stricter(IMAGE_TAG_PATTERN)),
    (Difference("$defs.Image.version", ("allOf",),
                f"every component's image.version also matches {IMAGE_TAG_PATTERN}",
                "an image tag, as for the driver payload"),
     _stricter(IMAGE_TAG_PATTERN)),
)


def _object_meta() -> dict[str, Any]:
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    loose_list = {"type": "array", "items": {"type": "object",
                                             "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "description": "Kubernetes object metadata. The object is cluster-scoped, usually named "
                       "cluster-operator. Server-populated fields are warned about and never "
                       "applied.",
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 253,
                     "pattern": DNS_NAME_PATTERN},
            "generateName": {"type": "string"},
            "namespace": {"type": "string"},
            "labels": copy.deepcopy(string_map),
            "annotations": copy.deepcopy(string_map),
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "ownerReferences": copy.deepcopy(loose_list),
            "selfLink": {"type": "string"},
            "uid": {"type": "string"},
            "resourceVersion": {"type": "string"},
            "generation": {"type": "integer"},
            "creationTimestamp": {"type": ["string", "null"]},
            "deletionTimestamp": {"type": ["string", "null"]},
            "deletionGracePeriodSeconds": {"type": "integer"},
            "managedFields": copy.deepcopy(loose_list),
        },
    }


def cluster_operator_json_schema() -> dict[str, Any]:
    """The JSON Schema of a ``ClusterOperator`` policy file
    (schemas/clusteroperator.schema.json)."""
    vendor = openapi_to_json_schema(vendor_openapi_schema())
    defs: dict[str, Any] = {}
    spec, status = vendor["properties"]["spec"], vendor["properties"]["status"]
    _share(spec, defs)
    _share(status, defs)
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": KIND,
        "description": (
            f"The {API_VERSION} {KIND} as kept in a policy repository "
            "(clusters/<cluster>/cluster-operator.yaml). GENERATED by deploy/generate-crd from "
            f"the vendor's CRD ({VENDOR_CHART}, reconciler/data/) with the reconciler's "
            "stricter rules (reconciler/policy/crd_schema.py, docs/validation.md); do not edit."),
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"description": f"Always {API_VERSION}.", "type": "string",
                           "enum": [API_VERSION]},
            "kind": {"description": f"Always {KIND}.", "type": "string", "enum": [KIND]},
            "metadata": {"$ref": "#/$defs/ObjectMeta"},
            "spec": spec,
            "status": status,
        },
        "$defs": {"ObjectMeta": _object_meta(), **defs,
                  "ImageTag": {"description": "An image tag such as 2.33.0.9 or 2.33.0.9-amd64 "
                                              "(quote it when it looks like a number).",
                               "type": "string", "pattern": IMAGE_TAG_PATTERN}},
    }
    for difference, patch in DIFFERENCES:
        patch(_node(schema, difference.path))
    return schema


def render_json_schema() -> str:
    """The text of schemas/clusteroperator.schema.json."""
    return json.dumps(cluster_operator_json_schema(), indent=2, ensure_ascii=False) + "\n"
