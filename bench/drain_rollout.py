#!/usr/bin/env python3
"""Drain rollouts on the live dev cluster (issue 32's performance figures,
docs/live-clusters.md#the-drain and docs/rollout.md#topology-aware-waves).

One ``reconciler dev-cluster up --workloads 0 [--domains K]`` (the workload controllers:
deployment, replicaset, job, disruption; zone labels ``topology.kubernetes.io/zone`` over K
even blocks of nodes) with N nodes and a fixed install time, and on it, one after the other,
the 2,000-node benchmark's rollout (bench/controller_rollout.py: steps 5%, 30%, 60%, 100%,
maxParallel 50%, maxUnavailable 10%) in each mode asked for, with the controller in this
process (``run_rollout``) and a new driver version each time:

- ``off``: drain off, no serving pods yet (a node with a GPU pod would wait for it forever):
  the fleet as ``controller_rollout.py`` measures it, beside the others;
- ``drain``: ``rollout.drain`` on (every pod requesting a GPU, the controller's
  ``PlannerSettings.drain``) and one serving pod on every other node: N/2 pods in Deployments
  of 100 (``--pods-per-budget``), each behind a PodDisruptionBudget of ``maxUnavailable: 10%``,
  spread at most one per node (a hard topology spread over all of them), each taking
  ``--grace-seconds`` to stop;
- ``sequential``: the same with ``rollout.topology`` ``{key: topology.kubernetes.io/zone,
  order: sequential}`` over the K zones.

Per mode, beside the goals:

- wall time over the minimum (goal at most 1.10 x): waves x install, where each wave of a drain
  mode adds the grace (a wave's serving pods must stop before its driver pods go); under
  ``sequential`` a domain's nodes go in waves of their own (the next domain waits for it);
- eviction requests over pods evicted (goal at most 1.5 x): requests from the controller's
  executor counts and the ``gpu_reconciler_drain_evictions_total`` metric (evicted, refused by a
  budget, gone, error), pods evicted as the API server showed them (serving pods that got a
  deletion timestamp during the rollout, seen by a watch in a process of its own);
- whether the budgets held (the fewest Ready serving pods of a Deployment at any time, against
  its replicas minus 10%) and, under ``sequential``, starts of a later zone before an earlier
  zone's last node was Ready (goal 0);
- the 1-minute load average before and after (the machine's 2 cores are shared).

Usage: bench/drain_rollout.py [--nodes 2000] [--install-seconds 60] [--grace-seconds 5]
                              [--modes off,drain,sequential] [--domains 20]
                              [--pods-per-budget 100] [--cluster-timeout S] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from controller_rollout import POLICY, DevCluster, command_line, run_rollout, theoretical_minimum

from reconciler.kube.api import JSON, KubeApi, KubeError, resource_path
from reconciler.kube.watch import ListWatch
from reconciler.ops.metrics import Metrics
from reconciler.policy.label_selector import LabelSelector
from reconciler.policy.rollout_settings import DrainSettings, TopologySettings
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.fleet import WORKLOAD_NAMESPACE
from reconciler.sim.waiting import wait_for
from reconciler.sim.workloads import ZONE_LABEL, serving_objects, serving_status

MODES = ("off", "drain", "sequential")
#: a new driver version per mode, in this order (the fleet starts on the simulator's default)
VERSIONS = ("2.33.0.9", "2.34.0.1", "2.35.0.1")
WALL_GOAL = 1.10
EVICTION_GOAL = 1.5
METRIC = "gpu_reconciler_drain_evictions_total"
#: results that are one eviction request each ("deleted" is onTimeout delete's DELETE)
REQUEST_RESULTS = ("evicted", "refused", "gone", "error")
POLICY_VERSION = "policy/v1"  # drain needs the Eviction API of policy/v1 (Kubernetes 1.21+)
#: a label on every serving pod of the benchmark: their spread counts them all
TIER_LABEL, TIER = "bench.gpu.metax-tech.com/tier", "serving"
BUDGET_MAX_UNAVAILABLE = "10%"


def say(message: str) -> None:
    print(f"[drain-bench] {message}", file=sys.stderr, flush=True)


# -- the serving fleet --------------------------------------------------------------------------


def budget_sizes(pods: int, per_budget: int) -> list[int]:
    """Replicas per Deployment: ``per_budget`` each, the last one the rest."""
    return [min(per_budget, pods - start) for start in range(0, pods, per_budget)]


def allowed_down(replicas: int) -> int:
    """What ``maxUnavailable: 10%`` lets down of ``replicas`` (rounded up, as the API server)."""
    return math.ceil(replicas * 0.10)


def serving_fleet(sizes: list[int], grace: int) -> list[tuple[str, JSON]]:
    """sim/workloads.py's serving Deployment and budget, one pair per size: named
    ``serve-NN``, ``maxUnavailable: 10%``, the given grace, and at most one serving pod per node
    (a hard spread over every serving pod of the benchmark, not over one Deployment's)."""
    found: list[tuple[str, JSON]] = []
    for index, replicas in enumerate(sizes, start=1):
        name = f"serve-{index:02d}"
        for collection, body in serving_objects(replicas, namespace=WORKLOAD_NAMESPACE,
                                                policy_version=POLICY_VERSION, name=name):
            if body["kind"] == "Deployment":
                template = body["spec"]["template"]
                # a copy: serving_objects shares one labels dict with the selectors
                template["metadata"]["labels"] = {**template["metadata"]["labels"],
                                                  TIER_LABEL: TIER}
                template["spec"]["terminationGracePeriodSeconds"] = grace
                template["spec"]["topologySpreadConstraints"] = [{
                    "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {TIER_LABEL: TIER}}}]
            else:
                body["spec"] = {"maxUnavailable": BUDGET_MAX_UNAVAILABLE,
                                "selector": body["spec"]["selector"]}
            found.append((collection, body))
    return found


def deploy_fleet(api: KubeApi, sizes: list[int], grace: int, timeout: float) -> None:
    """Creates the serving Deployments and budgets, and waits until every pod is Ready and every
    budget allows its 10% (the disruption controller has seen them)."""
    for collection, body in serving_fleet(sizes, grace):
        api.create(collection, body)
    wait_serving(api, sizes, timeout)


def wait_serving(api: KubeApi, sizes: list[int], timeout: float) -> None:
    def ready() -> bool:
        for index, replicas in enumerate(sizes, start=1):
            status = serving_status(api, namespace=WORKLOAD_NAMESPACE, policy=POLICY_VERSION,
                                    name=f"serve-{index:02d}")
            if (status["available"] < replicas or status["currentHealthy"] < replicas
                    or status["disruptionsAllowed"] < allowed_down(replicas)):
                return False
        return True

    wait_for(ready, timeout=timeout, what=f"{sum(sizes)} serving pods Ready behind budgets",
             interval=2.0)


# -- what the API server shows of the serving pods ----------------------------------------------


class ServingWatch:
    """Serving pods by name: their Deployment (label ``app``), node and health (Ready, not
    deleting); per Deployment the fewest healthy at any time; pods that got a deletion
    timestamp after the watch synced (evicted: nothing else deletes them)."""

    def __init__(self, api: KubeApi) -> None:
        self._lock = threading.Lock()
        self.pods: dict[str, tuple[str, str, bool]] = {}  # name -> (app, node, healthy)
        self.healthy: collections.Counter[str] = collections.Counter()
        self.fewest: dict[str, int] = {}
        self.deleting: set[str] = set()
        self.evicted: list[tuple[float, str, str]] = []  # (when, pod, node)
        self.measuring = False
        self.watch = ListWatch(api, resource_path("v1", "pods", namespace=WORKLOAD_NAMESPACE),
                               on_event=self._on_pod, name="bench serving pods")

    def _on_pod(self, event: str, obj: JSON) -> None:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        labels = meta.get("labels") or {}
        if labels.get(TIER_LABEL) != TIER:
            return
        name, app, node = meta.get("name", ""), labels.get("app", ""), spec.get("nodeName", "")
        deleting = bool(meta.get("deletionTimestamp"))
        healthy = event != "DELETED" and not deleting and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (obj.get("status") or {}).get("conditions") or [])
        with self._lock:
            before = self.pods.pop(name, None)
            if before is not None and before[2]:
                self.healthy[before[0]] -= 1
            if event != "DELETED":
                self.pods[name] = (app, node, healthy)
            if healthy:
                self.healthy[app] += 1
            if self.measuring:
                self.fewest[app] = min(self.fewest.get(app, self.healthy[app]),
                                       self.healthy[app])
            if deleting and name not in self.deleting:
                self.deleting.add(name)
                if self.measuring:
                    self.evicted.append((time.time(), name, node))

    def start_measuring(self) -> None:
        with self._lock:
            self.measuring = True
            self.fewest = dict(self.healthy)

    def placement(self) -> dict[str, int]:
        with self._lock:
            nodes = collections.Counter(node for _, node, _ in self.pods.values() if node)
        return {"serving_pods": sum(nodes.values()), "nodes_with_serving_pods": len(nodes),
                "most_on_one_node": max(nodes.values(), default=0)}


def observe_serving(kubeconfig: str, conn: multiprocessing.connection.Connection) -> None:
    """The serving watch's process: synced -> sends the placement; on "stop" sends what it
    saw."""
    seen = ServingWatch(KubeApi.from_kubeconfig(kubeconfig, pool_size=2))
    seen.watch.start()
    seen.watch.wait_synced(120)
    seen.start_measuring()
    conn.send(seen.placement())
    conn.recv()
    seen.watch.stop()
    conn.send({"evicted": seen.evicted, "fewest_healthy": seen.fewest})


class ServingProcess:
    def __init__(self, kubeconfig: str) -> None:
        self.conn, child = multiprocessing.Pipe()
        self.process = multiprocessing.get_context("spawn").Process(
            target=observe_serving, args=(kubeconfig, child), daemon=True)
        self.placement: dict[str, int] = {}

    def start(self) -> ServingProcess:
        self.process.start()
        self.placement = self.conn.recv()
        return self

    def finish(self) -> dict[str, Any]:
        self.conn.send("stop")
        seen: dict[str, Any] = self.conn.recv()
        self.process.join(30)
        return seen


# -- minimums and checks ------------------------------------------------------------------------


def sequential_minimum(nodes: int, domains: int, seconds: float,
                       spec: dict[str, Any] = POLICY) -> float:
    """The minimum under ``order: sequential`` over ``domains`` even, contiguous blocks of
    nodes taken in order (as ``--domains`` labels them): within a step a domain's nodes go in
    waves of the step's maxParallel, and the next domain starts when its last one is done;
    ``seconds`` per wave (install plus grace)."""
    policy = UpgradePolicy.from_spec(spec)
    total, previous = 0.0, 0
    for step, target in zip(policy.steps, policy.step_targets(nodes), strict=True):
        batch = max(target - previous, 0)
        if batch:
            parallel = policy.batch_max_parallel(batch)
            per_domain = collections.Counter(position * domains // nodes
                                             for position in range(previous, previous + batch))
            total += sum(math.ceil(n / parallel) for n in per_domain.values()) * seconds
        total += (step.pause_ms or 0) / 1000
        previous = max(previous, target)
    return total


def sequential_violations(zone_of: dict[str, str], starts: list[tuple[float, str]],
                          readies: list[tuple[float, str]]) -> int:
    """Nodes that started (first eviction or driver pod deletion) before an earlier zone's last
    new driver pod was Ready."""
    last_ready: dict[str, float] = {}
    for when, node in readies:
        zone = zone_of.get(node, "")
        last_ready[zone] = max(last_ready.get(zone, 0.0), when)
    first_start: dict[str, float] = {}
    for when, node in starts:
        first_start[node] = min(first_start.get(node, math.inf), when)
    return sum(1 for node, when in first_start.items()
               if any(zone < zone_of.get(node, "") and when < done
                      for zone, done in last_ready.items()))


def metric_counts(metrics: Metrics) -> dict[str, int]:
    return {result: int(metrics.registry.get_sample_value(f"{METRIC}", {"result": result}) or 0)
            for result in (*REQUEST_RESULTS, "deleted")}


# -- one mode -----------------------------------------------------------------------------------


def settings_for(mode: str) -> PlannerSettings:
    drain = DrainSettings(pod_selector=LabelSelector()) if mode != "off" else None
    topology = (TopologySettings(key=ZONE_LABEL, order="sequential")
                if mode == "sequential" else None)
    return PlannerSettings(ready_timeout=600, drain=drain, topology=topology)


def one_mode(cluster: DevCluster, api: KubeApi, mode: str, version: str, *, grace: float,
             domains: int) -> dict[str, Any]:
    nodes, install = cluster.nodes, cluster.install
    serving = ServingProcess(cluster.kubeconfig).start() if mode != "off" else None
    metrics = Metrics()
    load_before = os.getloadavg()[0]
    result = run_rollout(cluster, version=version, settings=settings_for(mode),
                         on_eviction=metrics.count_drain_eviction, with_times=True)
    load_after = os.getloadavg()[0]
    seen = serving.finish() if serving is not None else {"evicted": [], "fewest_healthy": {}}
    deleted_at = [tuple(d) for d in result.pop("deleted_at")]
    ready_at = [tuple(r) for r in result.pop("ready_at")]
    per_wave = install + (grace if mode != "off" else 0.0)
    if mode == "sequential":
        minimum = sequential_minimum(nodes, domains, per_wave)
    else:
        minimum = theoretical_minimum(nodes, per_wave)
    waves = round(minimum / per_wave)
    wall = result["rollout_wall_seconds"]
    executor = result["evictions"]
    counted = metric_counts(metrics)
    requests = sum(counted[r] for r in REQUEST_RESULTS)
    evicted = len(seen["evicted"])
    found: dict[str, Any] = {
        "mode": mode,
        "version": version,
        "minimum_seconds": minimum,
        "waves": waves,
        "wall_seconds": wall,
        "wall_over_minimum": round(wall / minimum, 3),
        "seconds_over_minimum_per_wave": round((wall - minimum) / max(waves, 1), 2),
        "eviction_requests": requests,
        "evictions_metric": counted,
        "evictions_executor": executor,
        "metric_matches_executor": all(counted[r] == executor.get(r, 0) for r in counted),
        "pods_evicted": evicted,
        "requests_over_evicted": round(requests / evicted, 3) if evicted else None,
        "load_average_1m_before_after": [round(load_before, 2), round(load_after, 2)],
        "serving_placement": serving.placement if serving is not None else {},
        "fewest_healthy_per_deployment": seen["fewest_healthy"],
        "controller": result,
    }
    if mode == "sequential":
        zone_of = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(ZONE_LABEL, "")
                   for n in api.get(resource_path("v1", "nodes")).get("items", [])}
        starts = [(when, node) for when, node in deleted_at] + [
            (when, node) for when, _, node in seen["evicted"]]
        found["sequential_violations"] = sequential_violations(zone_of, starts, ready_at)
        found["zones"] = len({zone for zone in zone_of.values() if zone})
    return found


def measure(args: argparse.Namespace, modes: list[str]) -> dict[str, Any]:
    sizes = budget_sizes(args.nodes // 2, args.pods_per_budget)
    extra = ["--workloads", "0"]
    if "sequential" in modes:
        extra += ["--domains", str(args.domains)]
    results: list[dict[str, Any]] = []
    started = time.time()
    with DevCluster(args.nodes, args.install_seconds, timeout=args.cluster_timeout,
                    extra_args=extra) as cluster:
        say(f"dev cluster of {args.nodes} nodes up in {time.time() - started:.0f} s "
            f"(load {os.getloadavg()[0]:.1f})")
        api = KubeApi.from_kubeconfig(cluster.kubeconfig, pool_size=4)
        deployed = False
        for mode in modes:
            if mode != "off":
                if not deployed:
                    begun = time.time()
                    deploy_fleet(api, sizes, args.grace_seconds, args.cluster_timeout)
                    deployed = True
                    say(f"{sum(sizes)} serving pods Ready in {len(sizes)} Deployments behind "
                        f"budgets in {time.time() - begun:.0f} s")
                else:
                    wait_serving(api, sizes, args.cluster_timeout)
            say(f"{mode}: rolling out {VERSIONS[MODES.index(mode)]} "
                f"(load {os.getloadavg()[0]:.1f}) ...")
            row = one_mode(cluster, api, mode, VERSIONS[MODES.index(mode)],
                           grace=args.grace_seconds, domains=args.domains)
            say(f"{mode}: {row['wall_seconds']:.1f} s = {row['wall_over_minimum']:.3f} x "
                f"{row['minimum_seconds']:.0f} s; {row['eviction_requests']} eviction requests, "
                f"{row['pods_evicted']} pods evicted")
            results.append(row)
        api.close()
    return {"nodes": args.nodes, "install_seconds": args.install_seconds,
            "grace_seconds": args.grace_seconds, "domains": args.domains,
            "serving_deployments": sizes, "budget_max_unavailable": BUDGET_MAX_UNAVAILABLE,
            "cpus": os.cpu_count(), "modes": results}


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def table(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, goal, measured, goal met) rows."""
    rows: list[tuple[str, str, str, str]] = []
    for row in result["modes"]:
        mode = row["mode"]
        load = row["load_average_1m_before_after"]
        rows.append((f"{mode}: wall time / minimum", f"<= {WALL_GOAL:.2f}",
                     f"{row['wall_over_minimum']:.3f} ({row['wall_seconds']:.1f} s / "
                     f"{row['minimum_seconds']:.0f} s, {row['waves']} waves, "
                     f"+{row['seconds_over_minimum_per_wave']:.1f} s per wave; load "
                     f"{load[0]:.1f} -> {load[1]:.1f})",
                     verdict(row["wall_over_minimum"] <= WALL_GOAL)))
        if mode == "off":
            continue
        ratio = row["requests_over_evicted"]
        rows.append((f"{mode}: eviction requests / pods evicted", f"<= {EVICTION_GOAL}",
                     f"{ratio if ratio is not None else '-'} ({row['eviction_requests']} "
                     f"requests: {row['evictions_metric']}; {row['pods_evicted']} evicted; "
                     f"metric = executor: {row['metric_matches_executor']})",
                     verdict(ratio is not None and ratio <= EVICTION_GOAL)))
        fewest = row["fewest_healthy_per_deployment"]
        sizes = result["serving_deployments"]
        held = all(fewest.get(f"serve-{i:02d}", 0) >= n - allowed_down(n)
                   for i, n in enumerate(sizes, start=1))
        rows.append((f"{mode}: budgets held (fewest Ready per Deployment)",
                     "replicas - 10%",
                     ", ".join(f"{fewest.get(f'serve-{i:02d}', 0)}/{n}"
                               for i, n in enumerate(sizes, start=1))
                     + f" (placement {row['serving_placement']})", verdict(held)))
        if mode == "sequential":
            rows.append((f"{mode}: starts before an earlier zone was done", "0",
                         f"{row['sequential_violations']} ({row['zones']} zones)",
                         verdict(row["sequential_violations"] == 0)))
    return rows


def main() -> int:
    parser = command_line(__doc__, install_seconds=60.0)
    parser.add_argument("--grace-seconds", type=int, default=5,
                        help="the serving pods' termination grace period, whole seconds "
                             "(default 5)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated, run in the order off, drain, sequential "
                             "(default all three)")
    parser.add_argument("--domains", type=int, default=20,
                        help="zones for the sequential mode (default 20)")
    parser.add_argument("--pods-per-budget", type=int, default=100,
                        help="serving pods per Deployment and budget (default 100)")
    parser.add_argument("--cluster-timeout", type=float, default=None,
                        help="seconds for the fleet, and for the serving pods, to be Ready "
                             "(default 900 + 0.2 per node)")
    args = parser.parse_args()
    asked = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(asked) - set(MODES))
    if unknown or not asked:
        parser.error(f"--modes: expected some of {', '.join(MODES)}, got {args.modes!r}")
    if (args.nodes < 2 or not math.isfinite(args.install_seconds) or args.install_seconds <= 0
            or args.grace_seconds < 0 or args.pods_per_budget < 1
            or not 1 <= args.domains <= args.nodes):
        parser.error("--nodes at least 2, --install-seconds above 0, --grace-seconds not "
                     "negative, --pods-per-budget at least 1, --domains from 1 to --nodes")
    if args.cluster_timeout is None:
        args.cluster_timeout = 900 + 0.2 * args.nodes
    modes = [m for m in MODES if m in asked]
    try:
        result = measure(args, modes)
    except (RuntimeError, TimeoutError, KubeError) as exc:
        print(f"[drain-bench] {exc}", file=sys.stderr)
        return 1
    rows = table(result)
    if args.json:
        print(json.dumps({**result, "goals": [{"figure": f, "goal": g, "measured": m,
                                               "verdict": v} for f, g, m, v in rows]}))
    else:
        widths = [max(len(r[i]) for r in [("figure", "goal", "measured", "goal met"), *rows])
                  for i in range(4)]
        for row in [("figure", "goal", "measured", "goal met"), *rows]:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 1 if any(v == "MISSED" for *_, v in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
