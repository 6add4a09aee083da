"""``reconciler status`` on a live cluster (docs/live-clusters.md#the-drain and
docs/rollout.md#topology-aware-waves): the draining nodes with the pods and budgets that hold them,
the skipped nodes and the progress per topology domain, in the JSON and in the text."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from reconciler import clock
from reconciler.cli.main import cli
from reconciler.gitops.edits import render_status
from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import (
    ANN_SKIPPED,
    ANN_STATE,
    ANN_TARGET,
    CLUSTER_OPERATOR_NAME,
    LABEL_UPGRADE_SKIP,
)
from reconciler.policy.validation import validate_status_snapshot
from reconciler.sim.control_plane import ControlPlane
from reconciler.stored_status import (
    ROLLOUT_STATE_ANNOTATION,
    annotation_text,
    split_upgrade_status,
    status_with_upgrade,
)
from reconciler.sync.status_view import report
from reconciler.views.nodes import NodeFacts, PodFacts, classify_all
from tests.conftest import FleetFactory, wait_for
from tests.sync.test_status_view import NOW, snapshot

OLD, NEW = "rev-old", "rev-new"
RACK = "example.com/rack"
DRAINING = [{"node": "node-0002", "since": "2026-11-30T09:50:00Z", "pods": ["serve/web-1"],
             "budgets": ["serve/web-pdb"], "waitingFor": ["ml/notebook (no controller)"]}]


def live_snapshot() -> dict[str, Any]:
    data = snapshot("StepUpgrade", index=2)
    upgrade = data["upgradeStatus"]
    upgrade["status"].update({"lastPodSpecRevision": OLD, "upgradingPodSpecRevision": NEW})
    del upgrade["status"]["recheckTime"]
    upgrade["draining"] = DRAINING
    upgrade["skipped"] = ["node-0004"]
    upgrade["topology"] = {"key": RACK, "order": "sequential", "maxUnavailablePerDomain": 1}
    return data


def nodes() -> list[NodeFacts]:
    def one(name: str, rack: str | None, pod: PodFacts, **kw: Any) -> NodeFacts:
        labels = {RACK: rack} if rack else {}
        return NodeFacts(name, pod=pod, labels={**labels, **kw.pop("labels", {})}, **kw)

    old = PodFacts("d-old", OLD, ready=True)
    return [
        one("node-0001", "r1", PodFacts("d-new", NEW, ready=True),
            annotations={ANN_STATE: "done", ANN_TARGET: NEW}),
        one("node-0002", "r1", old, unschedulable=True, workloads=("serve/web-1",),
            annotations={ANN_STATE: "draining", ANN_TARGET: NEW}),
        one("node-0003", "r2", old),
        one("node-0004", "r2", old, ready=False, annotations={ANN_SKIPPED: NEW}),
        one("node-0005", "r2", old, labels={LABEL_UPGRADE_SKIP: "true"}),
        one("node-0006", None, old),
    ]


def test_the_report_from_the_cluster_has_domains_draining_and_skipped_nodes() -> None:
    data = live_snapshot()
    result = report(data, now=NOW, nodes=classify_all(nodes(), upgrade=data["upgradeStatus"]))
    printed = json.loads(json.dumps(result.to_json()))
    assert printed["topology"] == {"key": RACK, "order": "sequential",
                                   "maxUnavailablePerDomain": 1}
    assert [(d["domain"], d["nodes"], d["upgraded"], d["inFlight"], d["draining"], d["failed"],
             d["skipped"], d["pending"], d["done"]) for d in printed["domains"]] == [
        ("r1", 2, 1, 1, 1, 0, 0, 0, False),
        ("r2", 3, 0, 0, 0, 0, 2, 1, False),
        (None, 1, 0, 0, 0, 0, 0, 1, False)]
    assert printed["draining"] == DRAINING
    # the status's list and the nodes labelled to be skipped (no rollout record yet)
    assert printed["skipped"] == ["node-0004", "node-0005"]
    assert printed["unavailableNodes"] == {}  # a skipped NotReady node is not unavailable
    (draining,) = [w for w in printed["waits"] if w["kind"] == "draining"]
    assert draining["items"] == [
        "node-0002: evicting serve/web-1; held by budget serve/web-pdb; waiting for "
        "ml/notebook (no controller)"]


def test_the_report_from_git_has_no_domains_but_the_rest() -> None:
    printed = report(live_snapshot(), now=NOW).to_json()
    assert printed["domains"] == []
    assert printed["draining"] == DRAINING and printed["skipped"] == ["node-0004"]
    quiet = report(snapshot("Completed", index=3, phase="Idling"), now=NOW).to_json()
    assert (quiet["domains"], quiet["draining"], quiet["skipped"], quiet["topology"]) == (
        [], [], [], None)


def test_the_snapshot_validates() -> None:
    result = validate_status_snapshot(render_status(live_snapshot()), "status/prod-a.yaml")
    assert result.ok, [f.message for f in result.findings]


def test_the_command_prints_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "policy"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "status").mkdir()
    (repo / "status" / "prod-a.yaml").write_text(render_status(live_snapshot()))
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x",
                    "commit", "-q", "-m", "status"], check=True)
    monkeypatch.setattr(clock, "wall", lambda: NOW)
    runner = CliRunner()
    data = runner.invoke(cli, ["status", "--repo", str(repo), "--cluster", "prod-a",
                               "--format", "json"])
    assert data.exit_code == 0, data.output
    parsed = json.loads(data.output)
    assert parsed["draining"] == DRAINING and parsed["skipped"] == ["node-0004"]
    assert parsed["domains"] == [] and parsed["topology"]["key"] == RACK
    text = runner.invoke(cli, ["status", "--repo", str(repo), "--cluster", "prod-a"],
                         terminal_width=200)
    assert text.exit_code == 0, text.output
    out = text.output
    assert f"topology: {RACK} (sequential); progress per domain with --from cluster" in out
    assert "draining nodes" in out and "serve/web-pdb" in out and "serve/web-1" in out
    assert "skipped nodes (1): node-0004" in out


def test_the_text_shows_the_domains_in_order(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from reconciler.cli.status import _render

    monkeypatch.setenv("COLUMNS", "160")
    data = live_snapshot()
    _render(report(data, now=NOW, nodes=classify_all(nodes(), upgrade=data["upgradeStatus"])))
    out = capsys.readouterr().out
    assert f"domains of {RACK} (sequential)" in out
    cells = [[c for c in line.split() if c != "│"] for line in out.splitlines()]
    rows = [row for row in cells if row[:1] and row[0] in ("r1", "r2", "(no")]
    # domain, nodes, upgraded, in flight, draining, failed, skipped, pending, unavailable
    assert rows == [["r1", "2", "1", "1", "1", "0", "0", "0", "0"],
                    ["r2", "3", "0", "0", "0", "0", "2", "1", "0"],
                    ["(no", "label)", "1", "0", "0", "0", "0", "0", "1", "0"]]
    assert "skipped nodes (2): node-0004, node-0005" in out


@pytest.mark.cluster
def test_the_command_reads_domains_from_the_live_nodes(fleet_factory: FleetFactory,
                                                       kube: KubeApi,
                                                       control_plane: ControlPlane) -> None:
    """``--from cluster`` on a real API server: the node labels make the domains, a node
    annotated draining and one labelled to be skipped are classified so, and the status's
    draining list is printed as it is. The status is stored the way the controller stores it
    (docs/rollout.md#where-the-state-lives): the CRD's fields in ``status.upgradeStatus``, ours
    (the draining list, the topology) in the rollout-state annotation."""
    labels = {"node-0001": {RACK: "r1"}, "node-0002": {RACK: "r1"},
              "node-0003": {RACK: "r2"}, "node-0004": {RACK: "r2", LABEL_UPGRADE_SKIP: "true"}}
    fleet = fleet_factory(nodes=4, node_labels=labels)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60,
             what="4 Ready driver pods", observe=fleet.driver_pods)
    kube.patch(resource_path("v1", "nodes", "node-0002"), {
        "spec": {"unschedulable": True},
        "metadata": {"annotations": {ANN_STATE: "draining", ANN_TARGET: NEW}}})
    upgrade = live_snapshot()["upgradeStatus"]
    del upgrade["skipped"]  # node-0004 is skipped by its label alone
    crd, own = split_upgrade_status(upgrade)
    path = cluster_operator_path(CLUSTER_OPERATOR_NAME)
    co = kube.patch(path, {"metadata": {"annotations": {
        ROLLOUT_STATE_ANNOTATION: annotation_text(own)}}})
    kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME, subresource="status"),
               {"status": status_with_upgrade(co, crd)})
    kubeconfig = str(control_plane.kubeconfig)
    result = CliRunner().invoke(cli, ["status", "--from", "cluster", "--kubeconfig", kubeconfig,
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert [(d["domain"], d["states"]) for d in printed["domains"]] == [
        ("r1", {"draining": 1, "old": 1}), ("r2", {"old": 1, "skipped": 1})]
    assert printed["draining"] == DRAINING
    assert printed["skipped"] == ["node-0004"]
    assert printed["unavailableNodes"] == {}
