"""``fleet: {nodes, installSeconds}`` in status snapshots (docs/plan.md): the rollout nodes and the
mean install time measured in the last rollout, kept by later snapshots and across a restart;
``reconciler plan`` predicts from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from reconciler.gitops.status_policy import build_snapshot, fleet_record
from reconciler.policy.validation import validate_status_snapshot
from reconciler.sync.fleet_measures import (
    completed_revision,
    count_domains,
    mean_install_seconds,
)
from tests.gitops.conftest import Remote
from tests.gitops.test_status_writer import Clock, writer_for


def upgrade(phase: str, state: str, total: int, *, revision: str = "abc123",
            rolled_back: bool = False) -> dict[str, Any]:
    conditions = [{"type": "RolledBack", "status": "True"}] if rolled_back else []
    return {"phase": phase, "condition": conditions,
            "status": {"currentStepIndex": 2, "currentStepState": state,
                       "totalUpgradeReplicas": total, "lastPodSpecRevision": revision}}


def test_the_record_takes_the_frozen_node_count_and_keeps_what_it_knew() -> None:
    assert fleet_record(upgrade("Idling", "Completed", 0), None, None) is None
    first = fleet_record(upgrade("Progressing", "StepUpgrade", 40), None, None)
    assert first == {"nodes": 40, "installSeconds": None}
    measured = fleet_record(upgrade("Idling", "Completed", 40), first, {"installSeconds": 73.5})
    assert measured == {"nodes": 40, "installSeconds": 73.5}
    # an idle status that reports no rollout nodes, and no new measurement: both kept
    assert fleet_record(upgrade("Idling", "Completed", 0), measured, None) == measured
    # a new rollout on more nodes: the count follows, the last measurement stays
    assert fleet_record(upgrade("Progressing", "StepUpgrade", 44), measured, None) == {
        "nodes": 44, "installSeconds": 73.5}


def test_build_snapshot_hands_the_measurement_to_the_writer() -> None:
    live = {"status": {"upgradeStatus": upgrade("Idling", "Completed", 3)}, "spec": {}}
    assert "fleet" not in build_snapshot(live, source_commit=None)
    assert build_snapshot(live, source_commit=None, install_seconds=12.5)["fleet"] == {
        "installSeconds": 12.5}


def test_the_domains_counted_are_kept_until_counted_again() -> None:
    """``fleet.domains`` (rollout.topology): the newest count, else the one the snapshot had;
    a snapshot carrying them passes the snapshot schema."""
    zones = {"key": "topology.kubernetes.io/zone", "nodes": {"zone-a": 3, "(no label)": 1}}
    first = fleet_record(upgrade("Idling", "Completed", 4), None,
                         {"installSeconds": 20.0, "domains": zones})
    assert first == {"nodes": 4, "installSeconds": 20.0, "domains": zones}
    assert fleet_record(upgrade("Idling", "Completed", 4), first, None) == first
    racks = {"key": "gpu.metax-tech.com/rack", "nodes": {"rack-0": 2, "rack-1": 2}}
    assert fleet_record(upgrade("Idling", "Completed", 4), first, {"domains": racks}) == {
        **first, "domains": racks}
    # a hand-edited record read back from Git is not carried on
    for garbage in ({"key": "", "nodes": {"a": 1}}, {"key": "k", "nodes": {"a": "3"}},
                    {"key": "k", "nodes": {}}, ["zone-a"], {"key": "k", "nodes": {"a": True}}):
        assert "domains" not in (fleet_record(upgrade("Idling", "Completed", 4),
                                              {"nodes": 4, "domains": garbage}, None) or {})
    live = {"status": {"upgradeStatus": upgrade("Idling", "Completed", 4)}, "spec": {}}
    snapshot = build_snapshot(live, source_commit=None, domains=zones)
    assert snapshot["fleet"] == {"domains": zones}
    text = ("cluster: prod-a\nobservedAt: '2026-12-01T00:00:00Z'\n"
            "upgradeStatus: {phase: Idling}\n"
            "fleet: {nodes: 4, installSeconds: 20.0, domains: {key: topology.kubernetes.io/zone, "
            "nodes: {zone-a: 3, (no label): 1}}}\n")
    assert validate_status_snapshot(text, "status/prod-a.yaml").ok
    bad = text.replace("zone-a: 3", "zone-a: 0")
    assert not validate_status_snapshot(bad, "status/prod-a.yaml").ok


def test_domains_count_the_rollout_nodes_by_the_key() -> None:
    """The controller's N: GPU nodes, those labelled upgrade.skip=true left out."""
    key, gpu = "topology.kubernetes.io/zone", {"metax-tech.com/gpu.installed": "true"}

    def node(name: str, **labels: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": labels}}

    nodes = [node("n1", **gpu, **{key: "zone-b"}), node("n2", **gpu, **{key: "zone-a"}),
             node("n3", **gpu, **{key: "zone-b"}), node("n4", **gpu, other="x"),
             node("n5", **gpu, **{key: "zone-a", "gpu.metax-tech.com/upgrade.skip": "true"}),
             node("cpu-1", **{key: "zone-c"}), {"metadata": None}, "not a node"]
    assert count_domains(nodes, key) == {"(no label)": 1, "zone-a": 1, "zone-b": 2}
    assert list(count_domains(nodes, key)) == ["(no label)", "zone-a", "zone-b"]


def pod(name: str, revision: str, created: str, ready: str | None,
        deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created,
                            "labels": {"controller-revision-hash": revision}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T03:00:00Z"
    conditions = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}] if ready \
        else [{"type": "Ready", "status": "False"}]
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_the_mean_install_time_counts_ready_pods_of_the_completed_revision_only() -> None:
    pods = [
        pod("a", "new1", "2026-11-30T02:00:00Z", "2026-11-30T02:01:00Z"),   # 60 s
        pod("b", "new1", "2026-11-30T02:00:10Z", "2026-11-30T02:01:40Z"),   # 90 s
        pod("c", "new1", "2026-11-30T02:00:10Z", None),                     # not Ready
        pod("d", "old0", "2026-11-01T00:00:00Z", "2026-11-01T00:10:00Z"),   # other revision
        pod("e", "new1", "2026-11-30T02:00:00Z", "2026-11-30T02:30:00Z", deleting=True),
    ]
    assert mean_install_seconds(pods, "new1") == 75.0
    # the vendor's status names the ControllerRevision, the pods carry its hash
    assert mean_install_seconds(pods, "metax-driver-new1") == 75.0
    assert mean_install_seconds(pods, "other") is None


def test_only_a_completed_rollout_is_measured() -> None:
    assert completed_revision(upgrade("Idling", "Completed", 3, revision="r1")) == "r1"
    assert completed_revision(upgrade("Progressing", "StepUpgrade", 3)) is None
    assert completed_revision(upgrade("Idling", "Completed", 3, rolled_back=True)) is None


def test_the_writer_carries_fleet_into_git_and_across_a_restart(remote: Remote,
                                                                 tmp_path: Path) -> None:
    clock = Clock()
    writer = writer_for(remote.url, tmp_path / "state", clock)
    writer.offer({"upgradeStatus": upgrade("Progressing", "StepUpgrade", 12)})
    writer.poll(force=True)
    clock.now += 60
    writer.offer({"upgradeStatus": upgrade("Idling", "Completed", 12),
                  "fleet": {"installSeconds": 81.2}})
    writer.poll(force=True)
    assert writer.publisher.flush().ok
    text = remote.show("main:status/prod-a.yaml")
    assert YAML(typ="safe").load(text)["fleet"] == {"nodes": 12, "installSeconds": 81.2}
    assert validate_status_snapshot(text, "status/prod-a.yaml").ok
    # a restarted writer offered a snapshot without a measurement keeps the record
    again = writer_for(remote.url, tmp_path / "state2", clock)
    clock.now += 3600
    later = upgrade("Idling", "Completed", 0)
    later["status"]["currentStepIndex"] = 4
    again.offer({"upgradeStatus": later})
    again.poll(force=True)
    assert again.publisher.flush().ok
    data = YAML(typ="safe").load(remote.show("main:status/prod-a.yaml"))
    assert data["upgradeStatus"]["status"]["currentStepIndex"] == 4
    assert data["fleet"] == {"nodes": 12, "installSeconds": 81.2}


def test_the_schema_refuses_a_wrong_fleet() -> None:
    base = ("cluster: a\nobservedAt: '2026-11-30T00:00:00Z'\nupgradeStatus: {phase: Idling}\n")
    assert validate_status_snapshot(base + "fleet: {nodes: 3, installSeconds: null}\n",
                                    "s.yaml").ok
    assert not validate_status_snapshot(base + "fleet: {nodes: 0}\n", "s.yaml").ok
    assert not validate_status_snapshot(base + "fleet: {nodes: 3, install: 4}\n", "s.yaml").ok
