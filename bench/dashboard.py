#!/usr/bin/env python3
"""Dashboard benchmark (issue 20, performance): the page in a real browser (Debian's chromium,
headless, through Playwright) at 2,000 and 10,000 nodes of a synthetic cluster in mid-rollout
(``reconciler.dashboard.synthetic``; no real 10,000-node cluster needed).

Figures per fleet size:
1. first render: from navigation start to the first frame after the map and every section were
   built (the page's own ``performance.now()``);
2. live update: a wave of nodes turns Ready and as many start (what a rollout does every few
   seconds); from the change being reported to the server to the page having applied it
   (long poll), median of ``--updates`` updates, and the page's own time to apply one;
3. the server's CPU per update (building the view and its JSON, thread CPU time; the max is
   an update that also re-ran the planner's model because the measured install time moved by
   more than 5 %), and the bytes
   sent per update (the names go again when nodes moved between steps; a repaint alone sends
   the state string); and, apart, the CPU of turning the watched API objects (nodes, driver
   pods) into the read model's facts, which every rebuild of a live dashboard adds.

Usage: bench/dashboard.py [--nodes 2000,10000] [--updates 5] [--wave 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reconciler.dashboard.model import ClusterFacts
from reconciler.dashboard.server import DashboardApp, serve
from reconciler.dashboard.source import FactsMemo, facts_from_objects
from reconciler.dashboard.synthetic import advance, synthetic_facts
from reconciler.kube.api import JSON
from tests.dashboard.browser import chromium

FIRST_FRAME = ("() => new Promise(ok => requestAnimationFrame(() => setTimeout(() => "
               "ok(performance.now()))))")


class Holder:
    def __init__(self, facts: ClusterFacts) -> None:
        self.facts = facts
        self.lock = threading.Lock()

    def get(self) -> ClusterFacts:
        with self.lock:
            return self.facts


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def as_objects(facts: ClusterFacts) -> tuple[list[JSON], list[JSON]]:
    """The API objects (nodes, driver pods) the synthetic facts stand for."""
    nodes: list[JSON] = []
    pods: list[JSON] = []
    for node in facts.nodes:
        nodes.append({
            "metadata": {"name": node.name, "annotations": dict(node.annotations),
                         "resourceVersion": "1",
                         "labels": {"metax-tech.com/gpu.installed": "true"}},
            "spec": {"unschedulable": node.unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": str(node.ready),
                                       "lastTransitionTime": _stamp(0)}]}})
        pod = node.pod
        if pod is None:
            continue
        waiting = {"waiting": {"reason": pod.waiting_reason}} if pod.waiting_reason else {}
        pods.append({
            "metadata": {"name": pod.name, "namespace": "metax-operator",
                         "resourceVersion": "1",
                         "creationTimestamp": _stamp(pod.created_at),
                         "labels": {"controller-revision-hash": pod.revision},
                         "ownerReferences": [{"kind": "DaemonSet", "name": "metax-driver"}]},
            "spec": {"nodeName": node.name, "containers": [{"name": "driver"}]},
            "status": {"conditions": [{"type": "Ready", "status": str(pod.ready),
                                       "lastTransitionTime": _stamp(pod.ready_since or 0)}],
                       "containerStatuses": [{"restartCount": 0, "state": waiting}]}})
    return nodes, pods


def objects_to_facts_seconds(nodes: int, wave: int) -> tuple[float, float]:
    """Thread CPU of turning the watched objects into facts (each rebuild does it once): the
    first time, and after ``wave`` nodes and their pods changed (the others are remembered by
    resourceVersion)."""
    now = time.time()
    facts = synthetic_facts(nodes, now=now, in_flight=wave)
    node_objects, pod_objects = as_objects(facts)
    memo = FactsMemo()
    start = time.thread_time()
    built = facts_from_objects("bench", facts.cluster_operator, node_objects, pod_objects,
                               None, [], [], memo=memo)
    cold = time.thread_time() - start
    assert len(built.nodes) == nodes
    later_nodes, later_pods = as_objects(advance(facts, now=now + 10, wave=wave))
    for before, after in ((node_objects, later_nodes), (pod_objects, later_pods)):
        for old, new in zip(before, after, strict=True):
            if old != new:
                new["metadata"]["resourceVersion"] = "2"
    start = time.thread_time()
    again = facts_from_objects("bench", facts.cluster_operator, later_nodes, later_pods,
                               None, [], [], memo=memo)
    warm = time.thread_time() - start
    assert len(again.nodes) == nodes
    return cold, warm


def measure(nodes: int, updates: int, wave: int) -> dict[str, float]:
    now = time.time()
    holder = Holder(synthetic_facts(nodes, now=now, in_flight=wave))
    app = DashboardApp(holder.get, object_name="cluster-operator")
    cpu: list[float] = []
    build = app.build

    def timed_build() -> object:
        start = time.thread_time()
        result = build()
        cpu.append(time.thread_time() - start)
        return result

    app.build = timed_build  # type: ignore[method-assign]
    first = app.build()
    app.start()
    server = serve(app, "127.0.0.1", 0)
    out: dict[str, float] = {}
    try:
        with chromium() as browser:
            page = browser.new_page()
            page.goto(server.url + "/")
            page.wait_for_selector("body[data-version]", timeout=60_000)
            out["first_render_s"] = page.evaluate(FIRST_FRAME) / 1000
            assert page.locator("#map [data-node]").count() == nodes
            latencies, apply_ms, sizes = [], [], []
            for number in range(updates):
                version = page.evaluate("document.body.dataset.version")
                with holder.lock:
                    holder.facts = advance(holder.facts, now=now + 10 * (number + 1), wave=wave)
                changed = time.time()
                app.changed()
                page.wait_for_function(
                    f"document.body.dataset.version !== '{version}'", timeout=30_000)
                page.evaluate(FIRST_FRAME)
                applied = float(page.evaluate("document.body.dataset.appliedAt")) / 1000
                latencies.append(applied - changed)
                apply_ms.append(float(page.evaluate("document.body.dataset.applyMs")))
                built = app.wait_view(None, 1)
                assert built is not None
                sizes.append(len(built.body_full))
            out["update_s"] = statistics.median(latencies)
            out["update_max_s"] = max(latencies)
            out["apply_ms"] = statistics.median(apply_ms)
            out["bytes_full"] = statistics.median(sizes)
            out["bytes_states"] = len(first.body_states)
            page.close()
    finally:
        server.stop()
        app.stop()
    rebuilds = cpu[1:] or cpu
    out["cpu_per_update_s"] = statistics.median(rebuilds)
    out["cpu_max_s"] = max(rebuilds)
    out["objects_s"], out["objects_warm_s"] = objects_to_facts_seconds(nodes, wave)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", default="2000,10000")
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--wave", type=int, default=200)
    args = parser.parse_args()
    rows = []
    for nodes in (int(n) for n in args.nodes.split(",")):
        m = measure(nodes, args.updates, args.wave)
        rows += [
            (f"first render, {nodes} nodes", "< 2.0 s", f"{m['first_render_s']:.2f} s",
             f"{m['first_render_s'] / 2.0:.2f}"),
            (f"live update, change to page, {nodes} nodes (median)", "< 2.0 s",
             f"{m['update_s']:.2f} s (max {m['update_max_s']:.2f} s)",
             f"{m['update_s'] / 2.0:.2f}"),
            (f"page applies one update, {nodes} nodes", "-", f"{m['apply_ms']:.0f} ms", "-"),
            (f"server CPU per update, {nodes} nodes", "< 0.5 s",
             f"{m['cpu_per_update_s']:.3f} s (max {m['cpu_max_s']:.3f} s)",
             f"{m['cpu_per_update_s'] / 0.5:.2f}"),
            (f"server CPU per update, watched objects -> facts, {nodes} nodes", "< 0.5 s",
             f"{m['objects_warm_s']:.3f} s (first {m['objects_s']:.3f} s)",
             f"{m['objects_warm_s'] / 0.5:.2f}"),
            (f"bytes per update with names / states only, {nodes} nodes", "-",
             f"{m['bytes_full'] / 1024:.0f} KiB / {m['bytes_states'] / 1024:.0f} KiB", "-"),
        ]
    print(f"dashboard benchmark: synthetic mid-rollout fleets, {args.updates} updates of "
          f"{args.wave} nodes each, Debian chromium headless\n")
    header = ("figure", "goal", "measured", "ratio")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
