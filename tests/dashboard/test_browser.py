"""The dashboard and the simulate page in a real browser (Debian's chromium, headless, through
Playwright): hostile text renders as text, the simulate page's numbers are the JSON's, and the
live dashboard of a dev cluster during a real rollout (counts, gate, failed node, live update)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page

from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.dashboard.audit import GitAudit
from reconciler.dashboard.model import ClusterFacts, NodeFacts
from reconciler.dashboard.server import DashboardApp, serve
from reconciler.dashboard.source import ClusterSource
from reconciler.dashboard.synthetic import NEW_REV, synthetic_facts
from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.observe import is_driver_pod
from reconciler.names import (
    ANN_STATE,
    ANN_TARGET,
    CLUSTER_OPERATOR_NAME,
    GPU_NODE_LABEL,
    LABEL_UPGRADE_SKIP,
    OPERATOR_NAMESPACE,
    STATE_DRAINING,
)
from reconciler.ops.http_server import BackgroundHTTPServer
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.operator_install import install_crd
from reconciler.sim.waiting import wait_for
from tests.conftest import FleetFactory
from tests.controller.helpers import person_patch, start_rollout
from tests.dashboard.browser import chromium
from tests.dashboard.gitrepo import policy_repo

NEW = "2.33.0.9"
#: how long the page may take to show what it waits for: events, not a timed assertion, so as
#: long as a loaded 2-core machine (control plane, fleet, controller and chromium on it) needs
WAIT_MS = 120_000
HOSTILE_NODE = "<script>window.__pwned=1</script>\"'"
HOSTILE_IMG = "\"><img src=x onerror=window.__pwned=2>"
HOSTILE_SUBJECT = "policy: <script>window.__pwned=3</script> \"quoted\" & <b>bold</b>"


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with chromium() as context:
        yield context


def _serve(app: DashboardApp) -> BackgroundHTTPServer:
    app.build()
    app.start()
    return serve(app, "127.0.0.1", 0)


def _open(page: Page, url: str) -> None:
    page.set_default_timeout(WAIT_MS)
    page.goto(url + "/")
    page.wait_for_selector("body[data-version]", timeout=WAIT_MS)
    page.evaluate("window.__marker = 'loaded once'")


def _api_counts(kube: KubeApi) -> tuple[int, int]:
    """(GPU nodes, nodes whose driver pod is Ready on NEW), read from the API server."""
    nodes = kube.list(resource_path("v1", "nodes"),
                      query={"labelSelector": f"{GPU_NODE_LABEL}=true"})["items"]
    pods = kube.list(resource_path("v1", "pods", namespace=OPERATOR_NAMESPACE))["items"]
    ready = {
        p["spec"]["nodeName"] for p in pods
        if is_driver_pod(p) and not p["metadata"].get("deletionTimestamp")
        and p["spec"]["containers"][0]["image"].split(":")[-1].startswith(NEW)
        and any(c["type"] == "Ready" and c["status"] == "True"
                for c in (p.get("status") or {}).get("conditions") or ())
    }
    return len(nodes), len(ready)


def _agree(page: Page, kube: KubeApi, old: int | None = None) -> tuple[dict[str, int],
                                                                       int] | None:
    """The page's counts and the API's Ready-on-new count, once they agree (every GPU node a
    cell, the cells on the new version = the API's driver pods Ready on it)."""
    counts = _counts(page)
    total, on_new = _api_counts(kube)
    if sum(counts.values()) != total or counts["upgraded"] + counts["verifying"] != on_new:
        return None
    if old is not None and counts["old"] != old:
        return None
    return counts, on_new


def _counts(page: Page) -> dict[str, int]:
    result: dict[str, int] = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#legend li')].map("
        "li => [li.dataset.state, Number(li.querySelector('.n').textContent)]))")
    return result


def test_hostile_node_names_messages_and_commit_subjects_render_as_text(
        browser: BrowserContext, tmp_path: Path) -> None:
    now = time.time()
    base = synthetic_facts(40, now=now, in_flight=5)
    nodes = list(base.nodes)
    nodes[0] = NodeFacts(HOSTILE_NODE, pod=nodes[0].pod, annotations=nodes[0].annotations)
    nodes[-1] = NodeFacts(HOSTILE_IMG, pod=nodes[-1].pod, workloads=(HOSTILE_IMG + "/pod",))
    co: dict[str, Any] = json.loads(json.dumps(base.cluster_operator))
    co["status"]["upgradeStatus"]["status"]["message"] = HOSTILE_IMG + " waiting"
    facts = ClusterFacts(HOSTILE_NODE, co, nodes, base.revision_images, base.current_revision,
                         base.events)
    audit = GitAudit(str(policy_repo(tmp_path, HOSTILE_NODE.replace("/", "_"),
                                     subject=HOSTILE_SUBJECT)),
                     cluster=HOSTILE_NODE.replace("/", "_"))
    assert audit.refresh()
    app = DashboardApp(lambda: facts, object_name="cluster-operator", audit=audit)
    server = _serve(app)
    page = browser.new_page()
    try:
        _open(page, server.url)
        assert page.evaluate("window.__pwned") is None
        assert page.locator("img").count() == 0
        assert page.locator("script").count() == 1  # the page's own app.js
        cell = page.locator("#map [data-node]").first
        assert cell.get_attribute("data-node") == HOSTILE_NODE
        assert page.locator("#cluster").text_content() == HOSTILE_NODE
        assert HOSTILE_IMG + " waiting" in (page.locator("#message").text_content() or "")
        busy = page.locator("#waiting > li[data-kind=busy]").inner_text()
        assert f"{HOSTILE_IMG}: {HOSTILE_IMG}/pod" in busy
        subjects = page.locator("#audit tbody tr td:nth-child(4)").all_text_contents()
        assert HOSTILE_SUBJECT in subjects
        kinds = page.locator("#audit tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.kind)")
        assert {"gate-release", "write-back", "version"} <= set(kinds)
        released = page.locator("#audit tbody tr[data-kind=gate-release]").inner_text()
        assert "Bo Releaser <bo@example.org>" in released
        cell.hover()
        page.wait_for_function("document.querySelector('#details dd:nth-of-type(3)')")
        assert (page.locator("#details .name").text_content() or "") == HOSTILE_NODE
        assert page.evaluate("window.__pwned") is None
        assert page.locator("#audit b, #waiting b, #map img").count() == 0
    finally:
        page.close()
        server.stop()
        app.stop()


def test_a_live_cluster_shows_domains_draining_budgets_and_skipped_nodes(
        browser: BrowserContext) -> None:
    """Under a topology the map's groups are the domains with their progress; the draining
    node has its own colour and the budget that holds it; skipped nodes are listed."""
    now = time.time()
    base = synthetic_facts(12, now=now, upgraded=0.25, in_flight=1, failed=0, busy=0,
                           not_ready=0)
    rack = "example.com/rack"
    nodes = []
    for index, node in enumerate(base.nodes):
        labels = {rack: f"r{index // 4 + 1}"}
        if node.name == "node-0005":
            node = dataclasses.replace(node, unschedulable=True, annotations={
                ANN_STATE: STATE_DRAINING, ANN_TARGET: NEW_REV})
        if node.name == "node-0012":
            labels[LABEL_UPGRADE_SKIP] = "true"
        nodes.append(dataclasses.replace(node, labels=labels))
    co: dict[str, Any] = json.loads(json.dumps(base.cluster_operator))
    co["status"]["upgradeStatus"].update({
        "topology": {"key": rack, "order": "sequential"},
        "draining": [{"node": "node-0005", "since": "2027-01-15T08:00:00Z",
                      "pods": ["serve/web-1"], "budgets": ["serve/web-pdb"],
                      "waitingFor": []}],
        "skipped": ["node-0012"]})
    facts = dataclasses.replace(base, cluster_operator=co, nodes=nodes)
    app = DashboardApp(lambda: facts, object_name="cluster-operator")
    server = _serve(app)
    page = browser.new_page()
    try:
        _open(page, server.url)
        titles = page.locator("#map .group[data-domain] > h3").all_text_contents()
        assert titles == ["r1: 3/4 upgraded, 1 in flight",
                          "r2: 0/4 upgraded, 1 in flight, 1 draining",
                          "r3: 0/4 upgraded, 1 skipped"]
        draining = page.locator("#map [data-node=node-0005]")
        assert draining.get_attribute("data-state") == "draining"
        colour = draining.evaluate("c => getComputedStyle(c).backgroundColor")
        assert colour == "rgb(230, 126, 34)"  # --draining
        assert _counts(page)["draining"] == 1 and _counts(page)["skipped"] == 1
        row = page.locator("#draining tbody tr[data-node=node-0005]").inner_text()
        assert "serve/web-1" in row and "serve/web-pdb" in row
        assert page.locator("#skipped").text_content() == "1: node-0012"
        held = page.locator("#waiting > li[data-kind=draining]").inner_text()
        assert "held by budget serve/web-pdb" in held
    finally:
        page.close()
        server.stop()
        app.stop()


def test_simulate_page_renders_and_its_numbers_equal_the_json(
        browser: BrowserContext, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "driver:\n  payload: {registry: r.local, name: driver-image, version: 2.33.0.9}\n"
        "  upgradePolicy:\n    enableRollout: true\n    maxParallel: 50%\n"
        "    maxUnavailable: 10%\n    upgradeSteps:\n"
        "      - {replicas: 5%}\n"
        "      - {replicas: 40%, pauseDuration: 120000}\n"
        "      - {replicas: 100%, pauseDuration: 0}\n")
    page_file = tmp_path / "rollout.html"
    run = subprocess.run(
        [sys.executable, "-m", "reconciler.cli.main", "simulate", str(policy), "--nodes", "500",
         "--from-version", "2.32.0.5", "--install-seconds", "90", "--auto-confirm", "30",
         "--format", "json", "--html", str(page_file)],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)  # stdout is still exactly the JSON
    size = page_file.stat().st_size
    assert f"wrote {page_file} ({size} bytes)" in run.stderr
    assert size < 20_000
    page = browser.new_page()
    try:
        page.goto(page_file.as_uri())
        assert float(page.locator("#duration").get_attribute("data-seconds") or "nan") == \
            data["duration_seconds"]
        assert int(page.locator("#upgraded").get_attribute("data-nodes") or "-1") == \
            data["final"]["status"]["totalUpgradeReadyReplicas"]
        assert page.locator("#max-in-flight").text_content() == str(data["max_in_flight"])
        assert page.locator("#stop-reason").text_content() == data["stop_reason"]
        starts = {e["step"]: e["t"] for e in data["events"]
                  if e["type"] in ("RolloutStarted", "StepStarted")}
        shown = page.locator("#steps tbody tr").evaluate_all(
            "rows => rows.map(r => [Number(r.dataset.step), Number(r.dataset.started)])")
        assert {step: t for step, t in shown} == starts
        box = page.locator("svg").bounding_box()
        assert box is not None and box["width"] > 300
        assert page.locator("svg polyline.curve").count() == 1
        assert page.locator("svg rect.gate").count() == 1
        assert page.locator("svg rect.pause").count() == 1
    finally:
        page.close()


@pytest.fixture
def controller(kube: KubeApi) -> Iterator[RolloutController]:
    install_crd(kube)
    ctl = RolloutController(
        kube, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
        # a node slow to become Ready on a loaded machine is no failure here: the failure
        # is node-0004's image pull, seen by its reason at once
        settings=PlannerSettings(ready_timeout=120, retry_backoff=0.5, retry_backoff_max=2),
    ).start()
    assert ctl.wait_synced(30)
    yield ctl
    ctl.stop()


@pytest.mark.cluster
@pytest.mark.slow
def test_dashboard_of_a_real_rollout_counts_gate_failure_and_live_updates(
        browser: BrowserContext, kube: KubeApi, fleet_factory: FleetFactory,
        controller: RolloutController, tmp_path: Path) -> None:
    fleet = fleet_factory(nodes=10, faults=[Fault("node-0004", FaultKind.IMAGE_PULL, NEW)])
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 10, timeout=60, what="10 driver pods")
    audit = GitAudit(str(policy_repo(tmp_path, "dev")), cluster="dev")
    app: DashboardApp
    source = ClusterSource(kube, cluster="dev", object_name=CLUSTER_OPERATOR_NAME,
                           on_change=lambda: app.changed())
    app = DashboardApp(source.facts, object_name=CLUSTER_OPERATOR_NAME, audit=audit,
                       ready_timeout=20)
    source.start()
    assert source.wait_synced(30)
    server = _serve(app)
    page = browser.new_page()
    try:
        _open(page, server.url)
        start_rollout(kube, NEW, {
            "enableRollout": True, "pause": False, "maxParallel": "100%",
            "maxUnavailable": 3, "maxFailureThreshold": 2, "fallback": "pause",
            "upgradeSteps": [{"replicas": 2},
                             {"replicas": 6, "pauseDuration": 1000},
                             {"replicas": "100%", "pauseDuration": 1000}]})
        # the gate after step 1: the page shows the Git change to merge
        gate = page.locator("#waiting > li[data-kind=gate]")
        gate.wait_for(timeout=WAIT_MS)
        change = gate.locator("pre.change").inner_text()
        assert change == "clusters/dev/cluster-operator.yaml:10\n- pause: true\n+ pause: false"
        assert "merge a change of clusters/dev/cluster-operator.yaml:10" in gate.inner_text()
        # the map's counts are the API's
        counts, on_new = wait_for(lambda: _agree(page, kube, old=8), timeout=WAIT_MS / 1000,
                                  what="the page's counts to match the API at the gate",
                                  observe=lambda: (_counts(page), _api_counts(kube)))
        assert on_new == 2 and counts["upgraded"] == 2
        assert page.locator("#on-new").inner_text() == "2/10"
        assert page.locator("#map [data-node]").count() == 10
        assert page.locator("#step").inner_text().startswith("1/3")
        # released: the page follows without a reload
        version = page.evaluate("document.body.dataset.version")
        released = time.monotonic()
        person_patch(kube, {"upgradePolicy": {"pause": False}})
        page.wait_for_function("document.querySelector('#step').textContent.startsWith('2/3')",
                               timeout=WAIT_MS)
        print(f"\npage showed step 2 {time.monotonic() - released:.2f} s after the release")
        assert page.evaluate("document.body.dataset.version") != version
        # node-0004 fails (image pull): its cell and details say so, then the fallback
        failed = page.locator("#map [data-node=node-0004][data-state=failed]")
        failed.wait_for(timeout=WAIT_MS)
        failed.hover()
        page.wait_for_function(
            "(document.querySelector('#details').textContent || '').includes('ErrImagePull')",
            timeout=WAIT_MS)
        details = page.locator("#details").inner_text()
        assert "node-0004" in details and "failed" in details
        fallback = page.locator("#waiting > li[data-kind=fallback]")
        fallback.wait_for(timeout=WAIT_MS)
        assert "node-0004: ErrImagePull" in fallback.inner_text()
        assert "2 of 2 failures" in fallback.inner_text()
        # nodes in flight when the fallback fired finish: the page follows the API
        counts, on_new = wait_for(lambda: _agree(page, kube), timeout=WAIT_MS / 1000,
                                  what="the page's counts to match the API",
                                  observe=lambda: (_counts(page), _api_counts(kube)))
        assert counts["failed"] == 1 and on_new >= 2
        assert page.evaluate("window.__marker") == "loaded once"
        shot = tmp_path / "dashboard-real-rollout.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        assert shot.stat().st_size > 10_000
    finally:
        page.close()
        server.stop()
        app.stop()
        source.stop()
