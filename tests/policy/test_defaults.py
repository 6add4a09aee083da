"""Policy defaults are what a real install of the vendor operator carries
(docs/policy.md#how-the-numbers-resolve and docs/policy.md#the-fields), in the code and in the
schema alike."""

from __future__ import annotations

from reconciler.policy.quantity import Quantity
from reconciler.policy.schema import load_schema
from reconciler.policy.upgrade_policy import UpgradePolicy

#: ``spec.driver.upgradePolicy`` of the vendor operator 0.9.2 as its Helm chart installs it.
INSTALLED = {
    "enableRollout": False, "fallback": "pause", "maxFailureThreshold": 5,
    "maxParallel": "100%", "maxUnavailable": "0%", "pause": False,
    "upgradeSteps": [{"replicas": 1, "pauseDuration": 30000},
                     {"replicas": "100%", "pauseDuration": 0}],
}


def test_omitted_fields_take_the_values_a_real_install_carries() -> None:
    omitted = UpgradePolicy.from_spec({})
    assert (omitted.enable_rollout, omitted.pause, omitted.max_parallel, omitted.max_unavailable,
            omitted.max_failure_threshold, omitted.fallback, omitted.steps) == (
        False, False, Quantity(100, percent=True), Quantity(0, percent=True), 5, "pause", ())
    installed = UpgradePolicy.from_spec(INSTALLED)
    assert [(s.replicas, s.pause_ms) for s in installed.steps] == [
        (Quantity(1, percent=False), 30000), (Quantity(100, percent=True), 0)]
    # the installed object only writes the defaults out: leaving them out changes nothing
    assert UpgradePolicy.from_spec({"upgradeSteps": INSTALLED["upgradeSteps"]}) == installed
    assert UpgradePolicy() == omitted


def test_default_max_parallel_upgrades_the_whole_batch_and_tolerates_no_unavailable_node() -> None:
    policy = UpgradePolicy.from_spec({})
    assert [policy.batch_max_parallel(size) for size in (1, 7, 90)] == [1, 7, 90]
    assert policy.resolved_max_unavailable(100) == 0


def test_schema_defaults_are_the_policy_defaults() -> None:
    spec = load_schema("clusteroperator")["properties"]["spec"]
    properties = spec["properties"]["driver"]["properties"]["upgradePolicy"]["properties"]
    defaults = {name: spec["default"] for name, spec in properties.items() if "default" in spec}
    assert defaults == {key: value for key, value in INSTALLED.items() if key != "upgradeSteps"}
    assert "default" not in properties["upgradeSteps"]  # required with enableRollout: true
    assert UpgradePolicy.from_spec(defaults) == UpgradePolicy()
