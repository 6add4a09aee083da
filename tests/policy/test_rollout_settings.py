"""``rollout:`` of reconciler.yaml (docs/live-clusters.md#the-drain and
docs/rollout.md#topology-aware-waves): drain, waitFor, unavailableNodes, topology; label selectors
and keys as the API server reads them; key-by-key cluster sections; located errors from
``validate``."""

from __future__ import annotations

import pytest

from reconciler.config.document import load
from reconciler.config.settings import resolve
from reconciler.config.validation import validate_repo_config
from reconciler.errors import RepoConfigError
from reconciler.policy.label_selector import (
    LabelSelector,
    LabelSelectorError,
    label_key_error,
    label_value_error,
)
from reconciler.policy.quantity import Quantity
from reconciler.policy.rollout_settings import RolloutSettings, TopologySettings


@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("", {}, True),
    ("app=web", {"app": "web"}, True),
    ("app==web", {"app": "db"}, False),
    ("app!=web", {}, True),
    ("app!=web", {"app": "web"}, False),
    ("zone in (a, b),tier", {"zone": "b", "tier": "x"}, True),
    ("zone in (a,b),tier", {"zone": "b"}, False),
    ("zone notin (a,b)", {"zone": "c"}, True),
    ("zone in(a,b),tier notin(db)", {"zone": "a", "tier": "web"}, True),  # as kubectl -l
    ("zone notin(a)", {"zone": "a"}, False),
    ("!legacy", {"legacy": "1"}, False),
    ("!legacy,gpu.metax-tech.com/wait-for-completion=true",
     {"gpu.metax-tech.com/wait-for-completion": "true"}, True),
])
def test_selectors_match_as_kubectl_reads_them(text: str, labels: dict[str, str],
                                               expected: bool) -> None:
    assert LabelSelector.parse(text).matches(labels) is expected


@pytest.mark.parametrize("text", ["=web", "app in a", "app in ()", "a b", "appin(a)",
                                  "app=(x)", "app=web\u00a0",  # a no-break space is text
                                  "app=web,", "UPPER/x=1", "app=" + "v" * 64])
def test_a_selector_that_does_not_parse_says_so(text: str) -> None:
    with pytest.raises(LabelSelectorError, match="selector"):
        LabelSelector.parse(text)


def test_label_keys() -> None:
    assert label_key_error("topology.kubernetes.io/zone") is None
    assert label_key_error("rack") is None
    # a final newline is no part of a key or value (Python's "$" would have let it through)
    assert label_key_error("rack\n") and label_key_error("a.b\n/rack")
    assert label_value_error("web\n")
    assert "prefix" in (label_key_error("Topology/zone") or "")
    assert "name" in (label_key_error("zone/") or "")
    assert "name" in (label_key_error("-rack") or "")


def test_budget_selectors_from_the_api_object() -> None:
    selector = LabelSelector.from_object(
        {"matchLabels": {"app": "web"},
         "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]})
    assert selector is not None
    assert selector.matches({"app": "web"}) and not selector.matches({"app": "web", "tier": "db"})
    assert LabelSelector.from_object(None) is None
    everything = LabelSelector.from_object({})
    assert everything is not None and everything.matches({"any": "pod"})


def test_every_key_read_with_its_default() -> None:
    assert RolloutSettings.from_section(None) == RolloutSettings()
    settings = RolloutSettings.from_section({
        "readyTimeout": "5m",
        "drain": {"podSelector": "app=web", "timeout": "2m", "onTimeout": "delete",
                  "deleteEmptyDir": True},
        "waitFor": {"timeout": "1h"},
        "unavailableNodes": "skip",
        "topology": {"key": "gpu.metax-tech.com/rack", "order": "spread",
                     "maxUnavailablePerDomain": "25%"},
    })
    assert settings.ready_timeout == 300.0
    assert settings.drain is not None and settings.drain.timeout == 120.0
    assert settings.drain.on_timeout == "delete" and settings.drain.delete_empty_dir
    assert settings.drain.pod_selector.matches({"app": "web"})
    assert settings.wait_for is not None and settings.wait_for.timeout == 3600.0
    assert settings.wait_for.pod_selector.matches(
        {"gpu.metax-tech.com/wait-for-completion": "true"})
    assert settings.unavailable_nodes == "skip"
    assert settings.topology == TopologySettings("gpu.metax-tech.com/rack", "spread",
                                                 Quantity(25, True))
    drain = RolloutSettings.from_section({"drain": {}}).drain
    assert drain is not None and drain.timeout == 900.0 and drain.on_timeout == "wait"
    assert drain.pod_selector.empty


def test_per_domain_limits_round_up_to_at_least_one() -> None:
    assert TopologySettings("k", max_unavailable_per_domain=Quantity(25, True)
                            ).per_domain_limit(5) == 2
    assert TopologySettings("k", max_unavailable_per_domain=Quantity(1, True)
                            ).per_domain_limit(3) == 1
    assert TopologySettings("k", max_unavailable_per_domain=Quantity(2, False)
                            ).per_domain_limit(9) == 2
    assert TopologySettings("k").per_domain_limit(9) is None


@pytest.mark.parametrize(("section", "message"), [
    ({"drain": {"podSelector": "app in web"}}, "rollout.drain.podSelector: in needs a list"),
    ({"drain": {"timeout": "soon"}}, "rollout.drain.timeout: expected a duration"),
    ({"drain": {"onTimeout": "panic"}}, "rollout.drain.onTimeout: expected 'wait'"),
    ({"waitFor": {"timeout": "10m"}}, "rollout.waitFor.timeout: a timeout drains the node"),
    ({"topology": {"key": "Not A Key"}}, "rollout.topology.key: 'Not A Key' is not a label key"),
    ({"topology": {"key": "rack", "maxUnavailablePerDomain": 0}},
     "rollout.topology.maxUnavailablePerDomain: expected an integer >= 1"),
    ({"unavailableNodes": "ignore"}, "rollout.unavailableNodes: expected 'count' or 'skip'"),
    ({"drainn": {}}, "rollout.drainn: unknown key"),
])
def test_errors_name_the_key(section: dict[str, object], message: str) -> None:
    with pytest.raises(RepoConfigError, match=message.replace("(", r"\(")):
        RolloutSettings.from_section(section)


def test_a_cluster_section_replaces_the_repository_wide_one_key_by_key() -> None:
    config = load("""\
rollout:
  readyTimeout: 20m
  drain: {timeout: 5m, onTimeout: fail}
  topology: {key: gpu.metax-tech.com/rack}
clusters:
  prod:
    rollout:
      drain: {podSelector: app=web}
      unavailableNodes: skip
""")
    prod = resolve(config, "prod", source="test").rollout
    assert prod.ready_timeout == 1200.0  # inherited
    assert prod.drain is not None and prod.drain.timeout == 900.0  # drain replaced whole
    assert prod.drain.on_timeout == "wait"
    assert prod.topology is not None and prod.topology.key == "gpu.metax-tech.com/rack"
    assert prod.unavailable_nodes == "skip"
    lab = resolve(config, "lab", source="test").rollout
    assert lab.drain is not None and lab.drain.on_timeout == "fail"
    assert lab.unavailable_nodes == "count"


def test_validate_locates_what_the_schema_cannot_say() -> None:
    text = """\
rollout:
  waitFor: {timeout: 10m}
clusters:
  prod:
    rollout:
      drain: {podSelector: 'app in (web'}
      topology: {key: 'zone/'}
"""
    found = {(f.line, f.column, f.rule) for f in validate_repo_config(text, "reconciler.yaml")
             .findings if f.is_error}
    assert (2, 22, "rollout-wait-without-drain") in found
    assert (6, 28, "rollout-selector") in found
    assert (7, 23, "rollout-label-key") in found
    schema = validate_repo_config("rollout:\n  drain: {onTimeout: later}\n", "reconciler.yaml")
    assert [f.line for f in schema.findings if f.is_error] == [2]
    assert validate_repo_config("""\
rollout:
  drain: {podSelector: 'app=web', timeout: 15m, onTimeout: delete, deleteEmptyDir: true}
  waitFor: {podSelector: 'job', timeout: 1h}
  unavailableNodes: skip
  topology: {key: topology.kubernetes.io/zone, order: spread, maxUnavailablePerDomain: 10%}
""", "reconciler.yaml").findings == []
