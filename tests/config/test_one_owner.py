"""``reconciler.yaml`` has one owner (issue 42): ``load`` validates a file once and keeps the
located findings, ``resolve`` types every section for a cluster from them without validating
again, and ``PlannerSettings.for_pass`` is the one way the ``rollout`` section reaches a planner."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from reconciler.config import validation
from reconciler.config.document import load
from reconciler.config.settings import ClusterSettings, SettingsRefused, resolve
from reconciler.config.sync import SyncSettings
from reconciler.fleet.promotion import Promotion
from reconciler.policy.label_selector import LabelSelector
from reconciler.policy.quantity import Quantity
from reconciler.policy.rollout_settings import (
    DrainSettings,
    RolloutSettings,
    TopologySettings,
    WaitForSettings,
)
from reconciler.rollout.model import PlannerSettings
from reconciler.settings.live import LiveSettings

#: every section, the cluster's own in place of the repository's where it has one
EVERY_SECTION = """\
clustersDir: fleet
status: {path: state, branch: reconciler-status}
sync: {fetchInterval: 1m, statusMinInterval: 2s}
signatures: {mode: ssh}
forge: {type: gitea, url: 'https://gitea.example.com/api/v1', repository: fleet/policy}
firmware: {timeouts: {reboot: 5m}}
notify:
  - {name: team, type: slack, urlFile: /etc/reconciler/slack-url}
rollout:
  readyTimeout: 20m
  drain: {timeout: 5m}
health:
  prometheus: {url: 'http://prometheus:9090'}
  nodeChecks: [{name: gpus, query: 'up{node="$node"}', expect: '== 1', within: 5m}]
windows: {allow: [{schedule: '0 1 * * *', duration: 2h}]}
clusters:
  prod:
    promotion: {after: lab, soak: 24h}
    rollout:
      topology: {key: topology.kubernetes.io/zone, order: spread}
    windows: {timezone: Asia/Shanghai, allow: [{schedule: '0 22 * * *', duration: 8h}]}
    health: {prometheus: {url: 'http://other:9090'}}
"""


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The whole-file validations that run (the schema over the file, then every section's
    rules), by file name."""
    runs: list[str] = []
    checked = validation.schema_findings

    def counted(doc: object, kind: str, **options: object) -> object:
        runs.append(getattr(doc, "file", "?"))
        return checked(doc, kind, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(validation, "schema_findings", counted)
    yield runs


def test_a_file_is_validated_once_and_resolved_for_every_cluster_from_its_findings(
        validations: list[str]) -> None:
    doc = load(EVERY_SECTION)
    assert validations == ["reconciler.yaml"] and doc.errors == ()
    prod = resolve(doc, "prod", source="c1")
    lab = resolve(doc, "lab", source="c1")
    live = LiveSettings("prod")
    assert live.offer(doc, source="c1") is None
    assert validations == ["reconciler.yaml"]  # resolving and publishing validate nothing
    # a refused section is located from the findings the load kept
    broken = load("rollout:\n  readyTimeout: 10 minutes\nhealth: {interval: soon}\n")
    with pytest.raises(SettingsRefused, match=r"^reconciler\.yaml:2:17: "):
        resolve(broken, "prod", source="c2")
    assert validations == ["reconciler.yaml"] * 2
    # every section typed: the Git side's, the controllers', the sync role's
    assert prod.sync == SyncSettings("fleet", "state", "reconciler-status", 60.0, 2.0)
    assert prod.signature_mode == "ssh" and prod.forge is not None
    assert prod.forge.repository == "fleet/policy"
    assert prod.firmware.timeouts.reboot == 300.0
    assert [sink.name for sink in prod.notify] == ["team"]
    assert prod.promotion == Promotion("lab", 24 * 3600.0) and lab.promotion is None
    assert prod.rollout == RolloutSettings(
        ready_timeout=1200.0, drain=DrainSettings(timeout=300.0),
        topology=TopologySettings("topology.kubernetes.io/zone", "spread"))
    assert lab.rollout == RolloutSettings(ready_timeout=1200.0, drain=DrainSettings(timeout=300.0))
    assert prod.windows is not None and prod.windows.timezone == "Asia/Shanghai"
    assert lab.windows is not None and lab.windows.timezone == "UTC"
    assert prod.health.config is not None and prod.health.config.node_checks == ()
    assert lab.health.config is not None and len(lab.health.config.node_checks) == 1
    assert live.current() == prod


def test_no_file_is_every_default() -> None:
    assert resolve(load(None), None, source="c0") == ClusterSettings()
    assert resolve(load("# nothing\n"), "prod", source="c0") == ClusterSettings()


def test_the_file_as_a_cluster_sees_it_replaces_sections_whole_and_rollout_key_by_key() -> None:
    """What ``plan`` compares: the sections as the cluster reads them, as written."""
    seen = load(EVERY_SECTION).seen_by("prod")
    assert "clusters" not in seen
    assert seen["rollout"] == {"readyTimeout": "20m", "drain": {"timeout": "5m"},
                               "topology": {"key": "topology.kubernetes.io/zone",
                                            "order": "spread"}}
    assert seen["health"] == {"prometheus": {"url": "http://other:9090"}}
    assert seen["promotion"] == {"after": "lab", "soak": "24h"}
    assert load(EVERY_SECTION).seen_by("lab")["windows"] == {
        "allow": [{"schedule": "0 1 * * *", "duration": "2h"}]}


def test_every_rollout_key_reaches_the_planner_through_for_pass() -> None:
    """A key added to ``rollout`` is carried into every pass and every prediction, or this
    fails: each of ``RolloutSettings``' fields is ``PlannerSettings``' of the same name, set
    from the section; the process's own settings stay."""
    rollout = RolloutSettings(
        ready_timeout=42.0, drain=DrainSettings(LabelSelector.parse("app=web"), 60.0, "fail"),
        wait_for=WaitForSettings(timeout=30.0), unavailable_nodes="skip",
        topology=TopologySettings("rack", "spread", Quantity(2, False)))
    base = PlannerSettings(retry_backoff=1.0, message_node_limit=3, cordon_ahead=False)
    planner = base.for_pass(rollout)
    for field in dataclasses.fields(RolloutSettings):
        assert getattr(planner, field.name) == getattr(rollout, field.name), field.name
        assert getattr(planner, field.name) != getattr(PlannerSettings(), field.name), field.name
    assert (planner.retry_backoff, planner.message_node_limit, planner.cordon_ahead) == (
        1.0, 3, False)
