"""One read model (``reconciler.views``): what ``reconciler status --format json`` says the
rollout waits for and what the dashboard's ``/api/view`` says are the same entries, kind by kind,
for one table of status snapshots that covers every kind."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from reconciler import clock
from reconciler.cli.main import cli
from reconciler.dashboard.model import ClusterFacts, build_view
from reconciler.gitops.edits import render_status
from reconciler.names import ANN_FAILURE_REASON, ANN_STATE, ANN_TARGET, LABEL_UPGRADE_SKIP
from reconciler.policy.validation import validate_status_snapshot
from reconciler.sync.status_view import parse_time, report
from reconciler.views.nodes import NodeFacts, PodFacts, classify_all
from reconciler.views.waits import KINDS, GitContext
from tests.sync.test_status_view import snapshot as base_snapshot

NOW = parse_time("2026-11-30T10:00:00Z") or 0.0
OLD, NEW = "rev-old", "rev-new"


def snap(state: str = "StepUpgrade", *, phase: str = "Progressing", index: int = 2,
         **extra: Any) -> dict[str, Any]:
    data = base_snapshot(state, index=index, phase=phase)
    data["upgradeStatus"]["status"].update(
        {"lastPodSpecRevision": OLD, "upgradingPodSpecRevision": NEW})
    del data["upgradeStatus"]["status"]["recheckTime"]  # the helper's '' is no time
    data["cluster"] = "c-" + state.lower()
    for key, value in extra.items():
        if key in ("conditions", "holds", "health", "draining", "skipped", "topology"):
            data["upgradeStatus"]["condition" if key == "conditions" else key] = value
        elif key == "recheck":
            data["upgradeStatus"]["status"]["recheckTime"] = value
        elif key == "pause":
            data["spec"]["driver"]["upgradePolicy"]["pause"] = value
        else:
            data[key] = value
    return data


def node(name: str, *, pod: PodFacts | None = None, **kw: Any) -> NodeFacts:
    return NodeFacts(name, pod=pod if pod is not None else PodFacts(f"d-{name}", OLD, True), **kw)


GATE = [{"type": "ManualGate", "status": "True", "reason": "WaitingForConfirmation"}]
FAILED = [{"type": "BatchFailed", "status": "True", "reason": "FailureThresholdReached",
           "message": "step 2: 2 failures (failed: node-0004)"}]
HEALTH = {"checks": {
    "gpus-available": {"node": "gpu-7", "state": "Failed", "value": "0",
                       "since": "2026-11-30T09:53:00Z"},
    "no-throttling": {"state": "Waiting", "value": "no sample",
                      "since": "2026-11-30T09:57:00Z"},
    "temperature": {"state": "Passed", "value": "61", "since": "2026-11-30T09:50:00Z"}}}
REJECTION = {"commit": "b" * 40, "findings": [
    {"file": "clusters/prod-a/co.yaml", "line": 12, "column": 3, "pointer": "/spec",
     "rule": "transition", "severity": "error", "message": "maxParallel cannot change"}]}
PROMOTION = {
    "held": {"version": "2.34.0.1", "upstream": "lab-10", "commit": "c" * 40,
             "reason": "lab-10 completed 2.34.0.1 at 2026-11-30T08:00:00Z; soak 24h",
             "earliest": "2026-12-01T08:00:00Z"},
    "upstreamRolledBack": {"upstream": "lab-10", "version": "2.33.0.9",
                           "finishedAt": "2026-11-30T07:00:00Z",
                           "message": "upstream lab-10 rolled 2.33.0.9 back at "
                                      "2026-11-30T07:00:00Z"}}
DRAINING = [
    {"node": "node-0003", "since": "2026-11-30T09:50:00Z", "pods": ["serve/web-1"],
     "budgets": ["serve/web-pdb"], "waitingFor": []},
    {"node": "node-0005", "since": "2026-11-30T09:55:00Z", "pods": [], "budgets": [],
     "waitingFor": ["train/job-2 (waitFor)"]}]
TOPOLOGY = {"key": "rack", "order": "spread"}
FIRMWARE = {"phase": "AwaitingReboot", "nodes": {"node-0002": "awaiting-reboot",
                                                 "node-0003": "verified"}}

#: (case, status snapshot, GPU nodes (None: read from Git, no nodes), kinds expected)
CASES: list[tuple[str, dict[str, Any], list[NodeFacts] | None, list[str]]] = [
    ("gate", snap("StepPaused", conditions=GATE, pause=True), None, ["gate"]),
    ("pause", snap("StepPaused", recheck="2026-11-30T10:04:30Z"), None, ["pause"]),
    ("pause-ended", snap("StepPaused", recheck="2026-11-30T09:59:00Z"), None, ["pause"]),
    ("policy-pause", snap("StepPaused", pause=True), None, ["policy-pause"]),
    ("policy-pause-upgrading", snap(pause=True), None, ["policy-pause"]),
    ("rejection", snap("Completed", phase="Idling", index=3, rejection=REJECTION), None,
     ["rejection"]),
    ("health", snap(health=HEALTH, holds=[
        {"kind": "health", "detail": "gpu-9: no answer from Prometheus"}]), None,
     ["health", "health", "health"]),
    ("window", snap(holds=[{"kind": "window", "detail": "outside the maintenance windows",
                            "until": "2026-11-30T13:30:00Z"}]), None, ["window"]),
    ("window-never", snap(holds=[{"kind": "window", "detail": "windows.timezone: unknown "
                                  "time zone 'Mars/Olympus'"}]), None, ["window"]),
    # operator mode: the snapshot's own holds
    ("window-operator", snap(**{"holds": []}) | {"holds": [
        {"kind": "window", "detail": "deny window: holiday freeze",
         "until": "2026-12-01T00:00:00Z"}]}, None, ["window"]),
    ("promotion", snap("Completed", phase="Idling", index=3, promotion=PROMOTION), None,
     ["promotion", "promotion"]),
    ("draining", snap(holds=[{"kind": "draining", "detail": "node-0003: 2 pods to evict",
                              "until": "2026-11-30T10:10:00Z"}]), None, ["draining"]),
    ("draining-held-by-a-budget", snap(draining=DRAINING, skipped=["node-0009"]), None,
     ["draining"]),
    ("draining-nodes", snap(draining=DRAINING[:1], topology=TOPOLOGY), [
        node("node-0003", unschedulable=True, workloads=("serve/web-1",),
             annotations={ANN_STATE: "draining", ANN_TARGET: NEW}),
        node("node-0007", unschedulable=True, workloads=("train/job-1",),
             annotations={ANN_STATE: "draining", ANN_TARGET: NEW}),
        node("node-0009", labels={LABEL_UPGRADE_SKIP: "true"}, ready=False)], ["draining"]),
    ("firmware", snap("Completed", phase="Idling", index=3, firmware=FIRMWARE), None,
     ["firmware"]),
    ("fallback", snap("StepPaused", conditions=FAILED, pause=True), [
        node("node-0004", pod=PodFacts("d-4", NEW, waiting_reason="ErrImagePull"),
             annotations={ANN_STATE: "failed", ANN_TARGET: NEW,
                          ANN_FAILURE_REASON: "ErrImagePull"}),
        node("node-0005", pod=PodFacts("d-5", NEW, True))], ["fallback"]),
    ("busy-and-unavailable", snap(), [
        node("node-0001", workloads=("ml/train-1", "ml/train-2")),
        node("node-0002", ready=False),
        node("node-0003", unschedulable=True),
        node("node-0004", pod=None),  # no driver pod: not a rollout node
        node("node-0005")], ["busy", "unavailable"]),
]

CASES_BY_NAME = {name: data for name, data, _, _ in CASES}


def cluster_facts(data: dict[str, Any], nodes: Sequence[NodeFacts]) -> ClusterFacts:
    """The live objects the status snapshot ``data`` was built from."""
    status: dict[str, Any] = {"upgradeStatus": data["upgradeStatus"]}
    if data.get("firmware"):
        status["firmwareUpgrade"] = data["firmware"]
    co = {"metadata": {"name": "cluster-operator"}, "spec": data["spec"], "status": status}
    return ClusterFacts(data["cluster"], co, list(nodes), {OLD: "r/d:2.32.0.6",
                                                           NEW: "r/d:2.33.0.9"}, NEW)


def page_waiting(data: dict[str, Any], nodes: Sequence[NodeFacts],
                 git: GitContext | None) -> list[dict[str, Any]]:
    """The dashboard's ``/api/view`` entries (with ``--repo``: Git's snapshot is read too)."""
    view = build_view(cluster_facts(data, nodes), now=NOW, git=git, recorded=data)
    payload: list[dict[str, Any]] = json.loads(json.dumps(view.to_json()))["waiting"]
    return payload


def command_waits(data: dict[str, Any], nodes: Sequence[NodeFacts] | None,
                  git: GitContext | None) -> list[dict[str, Any]]:
    """What ``reconciler status --format json`` prints under ``waits`` (``--from cluster``
    classifies the nodes with ``classify_all``, as ``cluster_snapshot`` does)."""
    states = classify_all(nodes, upgrade=data["upgradeStatus"]) if nodes is not None else None
    printed = json.dumps(report(data, now=NOW, nodes=states, git=git).to_json(), sort_keys=True)
    waits: list[dict[str, Any]] = json.loads(printed)["waits"]
    return waits


def test_the_table_covers_every_kind() -> None:
    assert {kind for *_, kinds in CASES for kind in kinds} == set(KINDS)


@pytest.mark.parametrize("git", [None, GitContext("clusters/c/co.yaml", 9, "main")],
                         ids=["no-git", "git"])
@pytest.mark.parametrize(("data", "nodes", "kinds"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_the_command_and_the_page_list_the_same_entries(
        data: dict[str, Any], nodes: list[NodeFacts] | None, kinds: list[str],
        git: GitContext | None) -> None:
    command = command_waits(data, nodes, git)
    page = page_waiting(data, nodes or [], git)
    assert [w["kind"] for w in command] == kinds
    assert len(page) == len(command)
    for said, shown in zip(command, page, strict=True):
        for key in ("kind", "title", "detail", "action", "until", "change", "nodes", "items",
                    "text"):
            assert said[key] == shown[key], (key, said, shown)
        assert said["title"] and said["action"] and said["text"]
    # the sentences of ``waitingFor`` are the entries' own
    assert report(data, now=NOW, nodes=classify_all(nodes, upgrade=data["upgradeStatus"])
                  if nodes is not None else None, git=git).waiting_for == [
        w["text"] for w in command]


def test_each_kind_says_what_it_waits_for() -> None:
    by_case = {name: command_waits(data, nodes, None) for name, data, nodes, _ in CASES}
    (window,) = by_case["window"]
    assert window["until"] == "2026-11-30T13:30:00Z"
    assert window["detail"] == ("fresh node starts wait until 2026-11-30T13:30:00Z "
                                "(3h30m from now)")
    failed, waiting, held = by_case["health"]
    assert failed["title"] == "health check gpus-available on gpu-7: failed"
    assert failed["detail"] == "value 0 since 2026-11-30T09:53:00Z"
    assert waiting["title"] == "health check no-throttling: waiting"
    assert "gpu-9: no answer" in held["detail"]
    rolled, promoted = by_case["promotion"]
    assert promoted["until"] == "2026-12-01T08:00:00Z" and "lab-10" in promoted["title"]
    assert rolled["title"].startswith("a person: upstream lab-10 rolled 2.33.0.9 back")
    busy, unavailable = by_case["busy-and-unavailable"]
    assert busy["items"] == ["node-0001: ml/train-1, ml/train-2"]
    assert unavailable["items"] == ["node-0002: NotReady", "node-0003: cordoned by someone else"]
    (fallback,) = by_case["fallback"]
    assert fallback["items"] == ["node-0004: ErrImagePull"]
    (firmware,) = by_case["firmware"]
    assert firmware["action"] == "reboot node-0002"
    (draining,) = by_case["draining"]
    assert draining["detail"] == "node-0003: 2 pods to evict"


def test_every_snapshot_of_the_table_validates() -> None:
    for name, data, _, _ in CASES:
        result = validate_status_snapshot(render_status({**data, "cluster": name}),
                                          f"status/{name}.yaml")
        assert result.ok, (name, [f.message for f in result.findings])


def test_the_command_from_git_carries_the_page_s_entries(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The real command on a policy repository holding the table's Git-only snapshots: its
    ``waits`` are the page's (the dashboard with ``--repo`` reads the same snapshot)."""
    repo = tmp_path / "policy"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "status").mkdir()
    read_from_git = {name: {**data, "cluster": name} for name, data, nodes, _ in CASES
                     if nodes is None}
    for name, data in read_from_git.items():
        (repo / "status" / f"{name}.yaml").write_text(render_status(data))
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x",
                    "commit", "-q", "-m", "status"], check=True)
    monkeypatch.setattr(clock, "wall", lambda: NOW)  # the command's clock seam
    result = CliRunner().invoke(cli, ["status", "--repo", str(repo), "--format", "json"])
    assert result.exit_code == 0, result.output
    printed = {r["cluster"]: r for r in json.loads(result.output)}
    assert set(printed) == set(read_from_git)
    for name, data in read_from_git.items():
        page = page_waiting(data, [], GitContext(branch="main"))
        assert printed[name]["waits"] == page, name
        assert printed[name]["waitingFor"] == [w["text"] for w in page]
    text = CliRunner().invoke(cli, ["status", "--repo", str(repo), "--cluster", "window"])
    assert "a maintenance window (outside the maintenance windows)" in text.output
    assert "action: nothing: fresh node starts resume when the window opens" in text.output


def test_a_draining_node_names_its_pods_and_the_budgets_that_hold_it() -> None:
    (held,) = command_waits(CASES_BY_NAME["draining-held-by-a-budget"], None, None)
    assert held["nodes"] == ["node-0003", "node-0005"]
    assert held["items"] == [
        "node-0003: evicting serve/web-1; held by budget serve/web-pdb",
        "node-0005: waiting for train/job-2 (waitFor)"]
    assert held["detail"] == "PodDisruptionBudgets hold evictions: serve/web-pdb"
    assert "serve/web-pdb" in held["action"] and "onTimeout" in held["action"]
    # from the cluster: a draining node the status's list leaves out is named with its pods;
    # the skipped node is neither busy nor unavailable
    (live,) = command_waits(CASES_BY_NAME["draining-nodes"],
                            dict((c[0], c[2]) for c in CASES)["draining-nodes"], None)
    assert live["items"] == ["node-0003: evicting serve/web-1; held by budget serve/web-pdb",
                             "node-0007: train/job-1"]
