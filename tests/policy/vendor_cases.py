"""Values the real API server refuses under the vendor's CRD, each tried alone on the object the
vendor's chart renders (reconciler/data/metax-operator-0.15.2/cluster-operator.yaml) as a create
stores it (:func:`as_stored`): validation
must refuse each with one located error naming the field (tests/policy/test_vendor_crd.py), and
a real API server refuses each too (tests/sim/test_crd.py)."""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML

from reconciler.data import stored_cluster_operator
from reconciler.policy.findings import split_pointer

D = "/spec/driver"
P = f"{D}/upgradePolicy"
S0 = f"{P}/upgradeSteps/0"


@dataclass(frozen=True)
class Refused:
    name: str
    pointer: str
    value: Any
    rule: str
    #: the field as the message names it
    label: str
    #: a fragment of the message (the hint)
    message: str = ""
    #: what the API server's message says (None: refused by our rules only, not by the server)
    server: str | None = ""
    #: where the finding points, when not at ``pointer`` (an item of the list set there)
    at: str | None = None


CASES = [
    Refused("log-level-verbose", f"{D}/log/level", "verbose", "schema-enum", "log.level",
            "expected one of 'debug', 'info', 'warn', 'error'", 'Unsupported value: "verbose"'),
    Refused("log-format-xml", f"{D}/log/format", "xml", "schema-enum", "log.format",
            "expected one of 'text', 'json'", 'Unsupported value: "xml"'),
    Refused("fw-effect-policy-reboot", f"{D}/fwEffectPolicy", "Reboot", "schema-enum",
            "driver.fwEffectPolicy", "did you mean 'WaitReboot'?", 'Unsupported value: "Reboot"'),
    Refused("deploy-policy-sometimes", f"{D}/deployPolicy", "Sometimes", "schema-enum",
            "driver.deployPolicy", "'PreferCloud'", 'Unsupported value: "Sometimes"'),
    Refused("log-max-age-number", f"{D}/log/maxAge", 26, "schema-type", "log.maxAge",
            "'26d' (days)", "must be of type string"),
    Refused("log-rotation-time-no-unit", f"{D}/log/rotationTime", "1m", "schema-pattern",
            "log.rotationTime", "a duration like '26w', '7d' or '24h'", "should match"),
    Refused("threshold-beyond-int32", f"{P}/maxFailureThreshold", 2**31, "schema-maximum",
            "upgradePolicy.maxFailureThreshold",
            "expected an integer from 1 to 2147483647 (int32)", "format int32"),
    Refused("pause-duration-beyond-int64", f"{S0}/pauseDuration", 2**63, "integer-range",
            "", "outside the range of Kubernetes integers", "pauseDuration"),
    Refused("pause-duration-empty-mapping", f"{S0}/pauseDuration", {}, "schema-type",
            "upgradeSteps[0].pauseDuration",
            "the CRD takes an integer; leave pauseDuration out for a manual gate",
            "must be of type int64"),
    Refused("pull-policy-lowercase", f"{D}/payload/pullPolicy", "always", "schema-enum",
            "payload.pullPolicy", "values are case-sensitive: write 'Always'",
            'Unsupported value: "always"'),
    Refused("fw-upgrade-policy-unknown", f"{D}/fwUpgradePolicy", "Always", "schema-enum",
            "driver.fwUpgradePolicy", "'PreferCloud', 'Never'", 'Unsupported value: "Always"'),
    Refused("fw-enable-virt-string", f"{D}/fwEnableVirt", "false", "schema-type",
            "driver.fwEnableVirt", "remove the quotes", "must be of type boolean"),
    Refused("image-version-dots-only", f"{D}/image/version", "...", "schema-pattern",
            "image.version", "an image tag like '2.33.0.9'", "should match '[a-zA-Z0-9\\-]+'"),
    Refused("cluster-type-openshift", "/spec/cluster/type", "openshift", "schema-enum",
            "cluster.type", "'auto', 'k8s', 'k3s'", 'Unsupported value: "openshift"'),
    Refused("topo-discovery-mode-auto", "/spec/topoDiscovery/mode", "auto", "schema-enum",
            "topoDiscovery.mode", "'config', 'dragonfly', 'switchbox'",
            'Unsupported value: "auto"'),
    Refused("topo-node-number-beyond-int32", "/spec/topoDiscovery/dragonfly/nodeNumber", 2**31,
            "schema-maximum", "dragonfly.nodeNumber", "(int32)", "format int32"),
    Refused("service-type-headless", "/spec/dataExporter/service/type", "Headless",
            "schema-enum", "service.type", "'ClusterIP', 'NodePort', 'LoadBalancer'",
            'Unsupported value: "Headless"'),
    Refused("service-port-beyond-int32", "/spec/dataExporter/service/port", 2**31,
            "schema-maximum", "service.port", "(int32)", "format int32"),
    Refused("maca-memory-not-a-quantity", "/spec/maca/resources/limits/memory", "ten",
            "schema-pattern", "limits.memory", "a quantity like '1Gi'", "should match"),
    Refused("maca-claims-repeated", "/spec/maca/resources/claims",
            [{"name": "a"}, {"name": "a"}], "list-duplicate", "claims[1]",
            "keyed by name, so the API server refuses a repeat", "Duplicate value",
            at="/spec/maca/resources/claims/1"),
    Refused("device-as-root-group-string", f"{D}/deviceAsRootGroup", "no", "schema-type",
            "driver.deviceAsRootGroup", "policy files are YAML 1.2", "must be of type boolean"),
    # our stricter rules (docs/validation.md#our-schema-and-the-vendors-crd): the server takes
    # them, the admission webhook refuses them
    Refused("toleration-over-100-percent", f"{S0}/toleration", "101%", "percent-range",
            "upgradeSteps[0].toleration", "expected a percentage from 0% to 100%", None),
    Refused("toleration-negative", f"{S0}/toleration", -1, "schema-minimum",
            "upgradeSteps[0].toleration", "an integer >= 0", None),
    Refused("replicas-zero", f"{S0}/replicas", 0, "schema-minimum",
            "upgradeSteps[0].replicas", "an integer >= 1", None),
]


def set_at(obj: Any, pointer: str, value: Any) -> Any:
    """``obj`` (a copy) with ``value`` at ``pointer`` (created when missing)."""
    obj = copy.deepcopy(obj)
    *parents, last = split_pointer(pointer)
    node = obj
    for token in parents:
        node = node[int(token)] if isinstance(node, list) else node[token]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return obj


def as_stored() -> dict[str, Any]:
    """The rendered object as a create stores it (``reconciler.data.stored_cluster_operator``):
    every field the CRD has, valid."""
    return stored_cluster_operator()


def as_yaml(obj: Any) -> str:
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096
    out = io.StringIO()
    yaml.dump(obj, out)
    return out.getvalue()
