"""Our CRD and our JSON Schema against the vendor's CRD (the data copy in
reconciler/data/metax-operator-0.15.2/), path by path: every difference is one of the additions
or stricter rules the code lists (and docs/validation.md states), nothing else."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

from reconciler.data import (
    RENDERED_OBJECT_FILE,
    VENDOR_CRD_FILE,
    VENDOR_DIR,
    rendered_cluster_operator,
    vendor_crd,
)
from reconciler.policy.crd_schema import (
    DIFFERENCES,
    FORMAT_RANGES,
    cluster_operator_json_schema,
    openapi_to_json_schema,
)
from reconciler.policy.schema import inline_refs, load_schema
from reconciler.sim.crd import CEL_RULES, PRINTER_COLUMNS, SHORT_NAMES, cluster_operator_crd
from tests.deploy.audit import DEPLOY, ROOT, load_documents

DOCS = ROOT / "docs"
#: keywords compared at each place of the vendor's schema
COMPARED = ("type", "format", "enum", "default", "required", "pattern",
            "x-kubernetes-int-or-string", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
            "x-kubernetes-map-type")


def test_the_data_copy_is_the_vendors_file_with_its_provenance() -> None:
    digest = hashlib.sha256(VENDOR_CRD_FILE.read_bytes()).hexdigest()
    source = (VENDOR_DIR / "SOURCE.md").read_text()
    assert digest in source
    for fact in ("DaoCloud/dce-charts-repackage", "f6785be9",
                 "charts/metax-operator/metax-operator/charts/metax-operator/", "0.15.2"):
        assert fact in source, fact
    assert RENDERED_OBJECT_FILE.name in source
    obj = rendered_cluster_operator()
    assert (obj["apiVersion"], obj["kind"], obj["metadata"]["name"]) == (
        "gpu.metax-tech.com/v1alpha1", "ClusterOperator", "cluster-operator")


def test_the_data_ships_with_the_package() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"reconciler.data" = ["metax-operator-0.15.2/*"]' in pyproject
    assert VENDOR_DIR.parent.name == "data" and VENDOR_DIR.parent.parent.name == "reconciler"


def test_deploy_crd_and_the_charts_copy_are_the_generated_crd() -> None:
    """deploy/crd.yaml is the generated CRD; the chart's copy is that file itself (its
    files/crd.yaml link, read by templates/clusteroperator-crd.yaml; no crds/, deploy/README.md
    "The CRD")."""
    chart = DEPLOY / "helm" / "gpu-gitops-reconciler"
    assert (chart / "files" / "crd.yaml").resolve() == (DEPLOY / "crd.yaml").resolve()
    assert not (chart / "crds").exists()
    assert load_documents(DEPLOY / "crd.yaml") == [cluster_operator_crd()]


def test_the_json_schema_file_is_the_generated_one() -> None:
    assert load_schema("clusteroperator") == cluster_operator_json_schema()


def _without_additions(crd: dict[str, Any]) -> dict[str, Any]:
    """Our CRD with our additions taken out: what must be the vendor's, byte for byte."""
    crd = copy.deepcopy(crd)
    names = crd["spec"]["names"]
    assert names.pop("shortNames") == SHORT_NAMES
    (version,) = crd["spec"]["versions"]
    assert version.pop("additionalPrinterColumns") == PRINTER_COLUMNS
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for place, rules in CEL_RULES.items():
        node = spec
        for part in place:
            node = node["properties"][part]
        assert node.pop("x-kubernetes-validations") == rules, place
    return crd


def test_our_crd_is_the_vendors_plus_the_listed_additions() -> None:
    assert _without_additions(cluster_operator_crd()) == vendor_crd()
    bare = cluster_operator_crd(cel_rules=False, empty_defaults=True)
    assert "x-kubernetes-validations" not in str(bare)
    bare["spec"]["names"].pop("shortNames")
    bare["spec"]["versions"][0].pop("additionalPrinterColumns")
    assert bare == vendor_crd()


def test_for_an_old_server_only_the_empty_string_defaults_go_too() -> None:
    """1.20.2 reads the vendor's ``default: ""`` as null and refuses the CRD
    (docs/dev-cluster.md): before 1.25 they are left out with the CEL rules, nothing else."""
    old = cluster_operator_crd(cel_rules=False)
    new = cluster_operator_crd(cel_rules=False, empty_defaults=True)
    old_schema = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    new_schema = new["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    dropped = [path for path, node in _places(new_schema) if node.get("default") == ""]
    assert len(dropped) == 6 and "spec.topoDiscovery.switchbox.clusterManagerUser" in dropped
    for path in dropped:
        assert "default" not in _ours_at(old_schema, path), path
    assert [p for p, n in _places(old_schema) if "default" in n] == [
        p for p, n in _places(new_schema) if "default" in n and p not in dropped]


def _places(node: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every schema node under a CRD schema node, by dotted path (``[]`` for items, ``{}`` for
    a map's values)."""
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _places(child, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), Mapping):
        yield from _places(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from _places(node["additionalProperties"], f"{path}{{}}")


def _ours_at(schema: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """Our schema node at ``path``; ``{}`` where we have none (every keyword then differs)."""
    node: Mapping[str, Any] = schema
    for part in re.findall(r"[^.\[\]{}]+|\[\]|\{\}", path):
        if part == "[]":
            child = node.get("items")
        elif part == "{}":
            child = node.get("additionalProperties")
        else:
            child = (node.get("properties") or {}).get(part)
        node = child if isinstance(child, Mapping) else {}
    return node


def _differences(vendor: Mapping[str, Any], ours: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(path, keyword) wherever our JSON Schema says something else than the vendor's CRD."""
    found: set[tuple[str, str]] = set()
    for path, theirs in _places(vendor):
        if not path.startswith(("spec", "status")):
            continue
        mine = _ours_at(ours, path)
        for keyword in COMPARED:
            if theirs.get(keyword) != mine.get(keyword):
                found.add((path, keyword))
        if set(theirs.get("properties") or {}) != set(mine.get("properties") or {}):
            found.add((path, "properties"))
        if theirs.get("type") == "integer" and theirs.get("format") in FORMAT_RANGES:
            low, high = FORMAT_RANGES[theirs["format"]]
            if mine.get("minimum") != low:
                found.add((path, "minimum"))
            if mine.get("maximum") != high:
                found.add((path, "maximum"))
        elif "minimum" in mine or "maximum" in mine:
            found.add((path, "minimum"))
        if "anyOf" in theirs:
            types = sorted(str(branch.get("type")) for branch in mine.get("oneOf", []))
            same = (types == ["integer", "string"] and "anyOf" not in mine
                    and mine["oneOf"] == openapi_to_json_schema(theirs)["oneOf"])
            if not same:
                found.add((path, "oneOf"))
        elif "oneOf" in mine:
            found.add((path, "oneOf"))
        for keyword in ("additionalProperties", "allOf", "minItems", "x-kubernetes-"
                        "preserve-unknown-fields"):
            if keyword in mine and not isinstance(mine[keyword], Mapping) and (
                    theirs.get(keyword) != mine[keyword]):
                found.add((path, keyword))
    return found


def _listed() -> set[tuple[str, str]]:
    """The (path, keyword) pairs DIFFERENCES declares, a $defs entry at every place using it."""
    vendor = vendor_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    paths = [path for path, _ in _places(vendor)]
    listed: set[tuple[str, str]] = set()
    for difference, _ in DIFFERENCES:
        if difference.path.startswith("$defs.Image."):
            field = difference.path.removeprefix("$defs.Image.")
            places = [p for p in paths if p.endswith(f".image.{field}")]
            assert len(places) > 5
        else:
            places = [difference.path]
        listed |= {(p, k) for p in places for k in difference.keywords}
    return listed


def test_our_json_schema_follows_the_vendors_crd_path_by_path() -> None:
    vendor = vendor_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    ours = inline_refs(load_schema("clusteroperator"), load_schema("clusteroperator")["$defs"])
    found = _differences(vendor, ours)
    listed = _listed()
    assert found - listed == set(), "differences not listed in crd_schema.DIFFERENCES"
    assert listed - found == set(), "listed differences that are not there (any more)"


def test_the_comparison_sees_a_difference() -> None:
    """The comparison is not blind: a changed enum, a lost field, a lost range all show."""
    vendor = vendor_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    ours = inline_refs(load_schema("clusteroperator"), load_schema("clusteroperator")["$defs"])
    driver = ours["properties"]["spec"]["properties"]["driver"]["properties"]
    driver["deployPolicy"]["enum"] = ["PreferCloud"]
    del driver["deviceAsRootGroup"]
    del driver["upgradePolicy"]["properties"]["maxFailureThreshold"]["maximum"]
    assert {("spec.driver.deployPolicy", "enum"), ("spec.driver", "properties"),
            ("spec.driver.upgradePolicy.maxFailureThreshold", "maximum")} <= (
        _differences(vendor, ours) - _listed())


def test_the_docs_state_every_difference_and_addition() -> None:
    text = (DOCS / "validation.md").read_text()
    section = text.split("## Our schema and the vendor's CRD", 1)[1].split("\n## ", 1)[0]
    for difference, _ in DIFFERENCES:
        assert f"`{difference.path}`" in section, difference.path
    for addition in ("shortNames", "additionalPrinterColumns", "x-kubernetes-validations"):
        assert addition in section, addition
    dev_cluster = (DOCS / "dev-cluster.md").read_text()
    assert "## The ClusterOperator CRD" in dev_cluster
