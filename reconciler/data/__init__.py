"""Project data shipped with the package: the vendor's ClusterOperator CRD and the object its
chart renders (``metax-operator-0.15.2/``, provenance in its ``SOURCE.md``).

The CRD is the contract the project's own CRD and JSON Schema are generated from
(docs/dev-cluster.md#the-clusteroperator-crd); the rendered object is what a real install of the
vendor chart carries. Pure: reading files of this package is all it does.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

#: the vendor chart this data comes from
VENDOR_CHART = "metax-operator-0.15.2"
VENDOR_DIR = Path(__file__).resolve().parent / VENDOR_CHART
#: the chart's ``crds/gpu.metax-tech.com_clusteroperators.yaml``, unchanged
VENDOR_CRD_FILE = VENDOR_DIR / "gpu.metax-tech.com_clusteroperators.yaml"
#: the ClusterOperator ``helm template`` renders from the chart's default values
RENDERED_OBJECT_FILE = VENDOR_DIR / "cluster-operator.yaml"


@cache
def _load(path: Path) -> Any:
    documents = [doc for doc in YAML(typ="safe").load_all(path.read_text(encoding="utf-8"))
                 if doc is not None]
    if len(documents) != 1:
        raise ValueError(f"{path}: expected one YAML document, found {len(documents)}")
    return documents[0]


def vendor_crd() -> dict[str, Any]:
    """The vendor's CRD as plain data (a fresh copy: callers may change it)."""
    crd: dict[str, Any] = copy.deepcopy(_load(VENDOR_CRD_FILE))
    return crd


def vendor_openapi_schema() -> dict[str, Any]:
    """The ``openAPIV3Schema`` of the vendor CRD's one version (``v1alpha1``), a fresh copy."""
    versions = vendor_crd()["spec"]["versions"]
    if len(versions) != 1:
        raise ValueError(f"{VENDOR_CRD_FILE}: expected one version, found {len(versions)}")
    schema: dict[str, Any] = versions[0]["schema"]["openAPIV3Schema"]
    return schema


def rendered_cluster_operator() -> dict[str, Any]:
    """The ClusterOperator the vendor chart renders with its default values (a fresh copy)."""
    obj: dict[str, Any] = copy.deepcopy(_load(RENDERED_OBJECT_FILE))
    return obj


def _without(value: Any, dropped: tuple[Any, ...]) -> Any:
    if isinstance(value, dict):
        return {k: _without(v, dropped) for k, v in value.items()
                if not any(v is d or (isinstance(v, str) and v == d) for d in dropped)}
    if isinstance(value, list):
        return [_without(item, dropped) for item in value
                if not any(item is d or (isinstance(item, str) and item == d) for d in dropped)]
    return value


def without_empty_strings(obj: Any) -> Any:
    """``obj`` without its ``""`` values (keys and list items): the 1.20 API server reads an
    empty string in a custom resource as null and refuses it where the CRD wants a string."""
    return _without(obj, ("",))


def stored_cluster_operator(*, empty_strings: bool = True) -> dict[str, Any]:
    """The rendered object as a create (POST) stores it with the vendor's CRD: nulls pruned, no
    namespace (the object is cluster-scoped), ``spec.openshift: {}`` (Helm 3 renders
    ``{deploy: null}`` there; Helm 4's null section would be refused as missing, SOURCE.md).
    Every section the CRD requires, every value valid: an object a real API server takes.
    ``empty_strings=False`` also leaves out every ``""`` (a key with one, a list item that is
    one), for the 1.20.2 API server, which reads ``""`` in a custom resource as null."""
    obj = rendered_cluster_operator()
    obj["metadata"].pop("namespace", None)
    obj["spec"]["openshift"] = {}
    stored: dict[str, Any] = _without(obj, (None,) if empty_strings else (None, ""))
    return stored
