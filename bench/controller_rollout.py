#!/usr/bin/env python3
"""Rollout controller on the real control plane (issue 5's performance figures).

Starts `reconciler dev-cluster up` (control plane + fleet, in its own process) with N nodes and a
fixed install time, then runs the rollout controller in this process against it, with an
observer that watches driver pods in a process of its own (so it takes no CPU from the
controller and its memory is not counted as the controller's). Reports:

- total rollout wall time vs the theoretical minimum (sum over batches of waves x install time,
  plus pauses; goal: at most 1.10 x);
- latency from a driver pod turning Ready to the pod deletion it made room for (p50/p99; goal
  p99 < 500 ms). Within a step, the first maxParallel deletions start the step; every later one
  refills the slot of the earliest Ready not yet refilled (first in, first out, as the controller
  refills freed slots); the Ready that completes a step is paired with the next step's first
  deletion. Steps are told apart by the deletion order (a step starts only after the previous
  one completed) and their known batch sizes;
- the controller's peak RSS, CPU time and garbage collection pauses (this process) and its API
  requests per node; the CPU time of the simulator and of each control plane process during
  the rollout, and their peak RSS;
- where the time goes: per refill (Ready seen by the observer -> by the controller -> handed
  out -> node written -> pod deletion answered -> deletion seen), per new pod (old pod deleted
  -> removed by the kubelet stand-in -> new pod created by the DaemonSet controller -> bound ->
  Running -> Ready minus the install time), and the API server's own request latencies (its
  histogram buckets' upper bounds, between a scrape before and after the rollout).

Usage: bench/controller_rollout.py [--nodes 2000] [--install-seconds 20]
                                   [--cluster-timeout 900] [--lease-seconds 0] [--json]

bench/scale.py runs it at several sizes; bench/native_peer.py uses its pieces.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.controller.act import Target
from reconciler.controller.hooks import RolloutObserver
from reconciler.controller.loop import RolloutController, prefer_responsiveness
from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.observe import driver_pod_view, is_driver_pod
from reconciler.kube.watch import ListWatch
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.children import die_with_parent
from reconciler.sim.control_plane import cpu_seconds, peak_rss_mib, rss_mib

POLICY = {  # the 100-node scenario's shape, without manual gates (nobody to release them)
    "enableRollout": True,
    "upgradeSteps": [
        {"replicas": "5%", "pauseDuration": 0},
        {"replicas": "30%", "pauseDuration": 0},
        {"replicas": "60%", "pauseDuration": 0},
        {"replicas": "100%", "pauseDuration": 0},
    ],
    "pause": False,
    "maxParallel": "50%",
    "maxUnavailable": "10%",
    "maxFailureThreshold": 5,
    "fallback": "pause",
}
NEW = "2.33.0.9"


def theoretical_minimum(nodes: int, install: float, spec: dict[str, Any] = POLICY) -> float:
    policy = UpgradePolicy.from_spec(spec)
    targets = policy.step_targets(nodes)
    total, previous = 0.0, 0
    for step, target in zip(policy.steps, targets, strict=True):
        batch = max(target - previous, 0)
        if batch:
            total += math.ceil(batch / policy.batch_max_parallel(batch)) * install
        total += (step.pause_ms or 0) / 1000
        previous = max(previous, target)
    return total


class Observer:
    """Ready times of new driver pods and deletion times of old ones."""

    def __init__(self, api: KubeApi) -> None:
        #: per new pod: first seen, bound to a node, Running, Ready (for where a wave's time goes)
        self.stages: dict[str, dict[str, float]] = {}
        self.deleted_on: dict[str, float] = {}  # node -> when its old pod was deleted
        self.removed_on: dict[str, float] = {}  # node -> when that pod left the API (kubelet)
        self.ready_at: list[tuple[float, str]] = []  # (when, node) per new pod turning Ready
        self.deleted_at: list[tuple[float, str]] = []  # (when, node) per old pod deleted
        self._seen_ready: set[str] = set()
        self._seen_deleted: set[str] = set()
        self.watch = ListWatch(api, resource_path("v1", "pods"), on_event=self._on_pod,
                               name="bench pods")

    def _on_pod(self, event: str, obj: dict[str, Any]) -> None:
        if not is_driver_pod(obj):
            return
        view = driver_pod_view(obj)
        now = time.time()
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        stages = self.stages.setdefault(view.name, {"seen": now})
        if node:
            stages.setdefault("bound", now)
            stages.setdefault("node", node)  # type: ignore[arg-type]
        if (obj.get("status") or {}).get("phase") == "Running":
            stages.setdefault("running", now)
        if view.ready:
            stages.setdefault("ready", now)
        if event == "DELETED" and node:
            self.removed_on[node] = now
        if (view.deleting or event == "DELETED") and view.name not in self._seen_deleted:
            self._seen_deleted.add(view.name)
            self.deleted_at.append((now, node))
            if node:
                self.deleted_on[node] = now
        elif view.ready and not view.deleting and view.name not in self._seen_ready:
            self._seen_ready.add(view.name)
            self.ready_at.append((now, node))


def observe(kubeconfig: str, conn: multiprocessing.connection.Connection) -> None:
    """The observer's process: synced -> sends the count of Ready pods seen at the start; on
    "stop" sends what it saw."""
    observer = Observer(KubeApi.from_kubeconfig(kubeconfig, pool_size=4))
    observer.watch.start()
    observer.watch.wait_synced(120)
    conn.send(len(observer.ready_at))
    conn.recv()
    observer.watch.stop()
    conn.send({"stages": observer.stages, "deleted_on": observer.deleted_on,
               "removed_on": observer.removed_on,
               "ready_at": observer.ready_at, "deleted_at": observer.deleted_at})


class Timings(RolloutObserver):
    """The controller's own timings, through its observer hooks (on its threads): per pass
    (planning, handing out actions, handing out status) seconds, per node's requests seconds
    from handing them out to their landing, and the wall-clock times of each start and of each
    driver pod Ready the controller saw (for where a refill's time goes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pass: list[float] = []
        #: the last 1,000 passes: (planning, handing out actions, handing out status) seconds
        self.pass_seconds: list[tuple[float, float, float]] = []
        #: the last 5,000 nodes' requests: seconds from handing them out to their landing
        self.request_seconds: list[float] = []
        #: node -> wall-clock times of its last start: handed out, node written before the
        #: deletion (0: cordoned ahead, nothing written first), pod deleted
        self.start_times: dict[str, tuple[float, float, float]] = {}
        #: node -> wall-clock time its driver pod was last seen turning Ready
        self.ready_seen: dict[str, float] = {}
        self._node_written: dict[str, float] = {}  # node -> when our last write to it landed
        self._pod_deleted: dict[str, float] = {}  # node -> when our last pod deletion landed

    def pass_started(self) -> None:
        self._pass = [time.perf_counter()]

    def pass_planned(self) -> None:
        self._pass.append(time.perf_counter())

    def pass_acted(self) -> None:
        self._pass.append(time.perf_counter())

    def pass_ended(self) -> None:
        started, planned, acted = self._pass
        self.pass_seconds.append((planned - started, acted - planned,
                                  time.perf_counter() - acted))
        del self.pass_seconds[:-1000]

    def requests_handed_out(self, node: str, *, starts: bool) -> object:
        handed_out = time.perf_counter()
        if not starts:
            return (handed_out, 0.0)
        with self._lock:
            self._node_written.pop(node, None)
            self._pod_deleted.pop(node, None)
        return (handed_out, time.time())

    def requests_landed(self, node: str, handed_out: object, *, starts: bool) -> None:
        assert isinstance(handed_out, tuple)
        started, wall = handed_out
        with self._lock:
            self.request_seconds.append(time.perf_counter() - started)
            del self.request_seconds[:-5000]
            if starts:
                deleted = self._pod_deleted.get(node, 0.0)
                written = self._node_written.get(node, 0.0)
                # a node cordoned ahead is written after its deletion (the record), not before
                self.start_times[node] = (wall, written if written <= deleted else 0.0, deleted)

    def node_written(self, node: str) -> None:
        self._node_written[node] = time.time()

    def pod_deleted(self, node: str) -> None:
        self._pod_deleted[node] = time.time()

    def driver_ready_seen(self, node: str) -> None:
        self.ready_seen[node] = time.time()


class GcPauses:
    """Python's garbage collections in this process (the controller's): a collection holds the
    GIL until it is done, so a full one over a big cache stalls every thread."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._started))

    def summary(self) -> dict[str, list[float]]:
        """Per generation: collections, longest pause in ms."""
        return {f"gen{g}": [len(p), round(max(p, default=0.0) * 1000, 1)]
                for g in (0, 1, 2) for p in [[s for gen, s in self.pauses if gen == g]]}


def cluster_processes(root: int) -> dict[str, int]:
    """pid per process of the dev cluster: the simulator (the ``dev-cluster up`` process
    itself) and the control plane processes it started."""
    found = {"simulator": root}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == root:
                found[Path((entry / "cmdline").read_bytes().split(b"\0")[0].decode()).name] = \
                    int(entry.name)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return found


def step_batches(deletions: list[tuple[float, str]], nodes: int,
                 spec: dict[str, Any] = POLICY) -> list[tuple[list[tuple[float, str]], int]]:
    """Per step that adds nodes: its deletions (when, node) in order, and its maxParallel.
    Steps are told apart by the deletion order (a step starts only after the previous one
    completed) and their known batch sizes."""
    policy = UpgradePolicy.from_spec(spec)
    ordered = sorted(deletions)
    found = []
    previous_target = 0
    for target in policy.step_targets(nodes):
        batch = ordered[previous_target:target]
        previous_target = max(previous_target, target)
        if batch:
            found.append((batch, policy.batch_max_parallel(len(batch))))
    return found


def refill_latencies(deletions: list[tuple[float, str]], readies: list[tuple[float, str]],
                     nodes: int, spec: dict[str, Any] = POLICY,
                     ) -> tuple[list[float], list[float], list[tuple[float, str]]]:
    """(Ready -> the deletion it made room for, per refill; seconds each step took to send its
    first wave's deletions; per refill the Ready's time and the node whose pod was deleted),
    pairing as the module docstring says."""
    ready_of = {node: when for when, node in readies}
    latencies: list[float] = []
    bursts: list[float] = []
    refills: list[tuple[float, str]] = []
    last_ready = None
    for batch, parallel in step_batches(deletions, nodes, spec):
        if last_ready is not None:
            latencies.append(batch[0][0] - last_ready)
            refills.append((last_ready, batch[0][1]))
        bursts.append(batch[min(parallel, len(batch)) - 1][0] - batch[0][0])
        step_readies = sorted(ready_of[node] for _, node in batch if node in ready_of)
        for (deleted, node), ready in zip(batch[parallel:], step_readies, strict=False):
            latencies.append(deleted - ready)
            refills.append((ready, node))
        last_ready = step_readies[-1] if step_readies else None
    return latencies, bursts, refills


def time_over_minimum(deletions: list[tuple[float, str]], readies: list[tuple[float, str]],
                      nodes: int, install: float, started: float, ended: float,
                      spec: dict[str, Any] = POLICY) -> list[dict[str, float]]:
    """Per step, where its time over waves x install goes: from the step's start (the rollout's
    start, or the previous step's last Ready) to its first deletion, sending its first wave,
    and the rest (pod life cycles between waves and refills), in seconds; a last entry for the
    last Ready -> the status saying Completed."""
    ready_of = {node: when for when, node in readies}
    found: list[dict[str, float]] = []
    begin = started
    for batch, parallel in step_batches(deletions, nodes, spec):
        waves = math.ceil(len(batch) / parallel)
        end = max((ready_of[node] for _, node in batch if node in ready_of), default=begin)
        first_wave = batch[min(parallel, len(batch)) - 1][0] - batch[0][0]
        to_first = batch[0][0] - begin
        found.append({"to_first_deletion": round(to_first, 2),
                      "first_wave_sent": round(first_wave, 2),
                      "rest": round(end - begin - waves * install - to_first - first_wave, 2)})
        begin = end
    found.append({"last_ready_to_completed": round(ended - begin, 2)})
    return found


def refill_breakdown(refills: list[tuple[float, str]], ready_nodes: dict[float, str],
                     deleted_on: dict[str, float], ready_seen: dict[str, float],
                     start_times: dict[str, tuple[float, float, float]]) -> dict[str, list[float]]:
    """Where a refill's time goes: Ready seen by the observer -> by the controller -> handed out
    (planned) -> pod deletion answered -> deletion seen (observer). A refill of a node not
    cordoned ahead also writes the node first: "handed out->node written" and "node
    written->pod deleted" cover those refills only.
    """
    parts: dict[str, list[float]] = {"ready->controller saw it": [],
                                     "controller saw it->handed out": [],
                                     "handed out->pod deleted": [],
                                     "handed out->node written": [],
                                     "node written->pod deleted": [],
                                     "pod deleted->deletion seen": []}
    for ready, node in refills:
        times = start_times.get(node)
        seen = deleted_on.get(node)
        if times is None or seen is None or not times[2]:
            continue
        handed_out, written, deleted = times
        saw = ready_seen.get(ready_nodes.get(ready, ""))
        if saw is None:
            continue
        parts["ready->controller saw it"].append(saw - ready)
        parts["controller saw it->handed out"].append(handed_out - saw)
        parts["handed out->pod deleted"].append(deleted - handed_out)
        if written:
            parts["handed out->node written"].append(written - handed_out)
            parts["node written->pod deleted"].append(deleted - written)
        parts["pod deleted->deletion seen"].append(seen - deleted)
    return parts


#: apiserver request latency histograms reported (verb, resource, subresource)
SERVER_REQUESTS = (("PATCH", "nodes", ""), ("DELETE", "pods", ""), ("POST", "pods", ""),
                   ("PATCH", "pods", "status"), ("POST", "pods", "binding"))


def server_histograms(api: KubeApi) -> dict[tuple[str, str, str], dict[float, float]]:
    """The API server's own request-duration histograms (cumulative counts per upper bound)."""
    text = str(api.request("GET", "/metrics").get("message", ""))  # not JSON: kept as text
    found: dict[tuple[str, str, str], dict[float, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request_duration_seconds":
            continue
        for sample in family.samples:
            labels = sample.labels
            key = (labels.get("verb", ""), labels.get("resource", ""),
                   labels.get("subresource", ""))
            if sample.name.endswith("_bucket") and key in SERVER_REQUESTS:
                buckets = found.setdefault(key, {})
                bound = float(labels["le"])  # "+Inf" parses as inf
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return found


def histogram_quantiles(before: dict[float, float], after: dict[float, float],
                        qs: tuple[float, ...] = (0.5, 0.99)) -> list[int | str]:
    """Upper bucket bounds (ms) holding the quantiles of what happened between two scrapes
    (">N" past the last finite bound, "-" when nothing happened)."""
    counts = sorted((bound, after[bound] - before.get(bound, 0.0)) for bound in after)
    total = counts[-1][1] if counts else 0.0
    finite = [bound for bound, _ in counts if math.isfinite(bound)]
    found: list[int | str] = []
    for q in qs:
        bound = next((b for b, c in counts if c >= q * total), math.inf) if total else None
        if bound is None:
            found.append("-")
        elif math.isfinite(bound):
            found.append(round(bound * 1000))
        else:
            found.append(f">{round(max(finite, default=0) * 1000)}")
    return found


def p50_p99_ms(values: list[float]) -> list[int]:
    return [round(percentile(values, 0.5) * 1000), round(percentile(values, 0.99) * 1000)]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class DevCluster:
    """``reconciler dev-cluster up`` with N nodes and a fixed install time, in a process group
    of its own that goes down with the benchmark, even one killed outright:
    ``with DevCluster(nodes, install) as cluster: cluster.kubeconfig``."""

    def __init__(self, nodes: int, install: float, *, timeout: float = 900.0,
                 lease_seconds: float = 0.0, extra_args: Sequence[str] = ()) -> None:
        self.nodes, self.install, self.timeout = nodes, install, timeout
        self.lease_seconds = lease_seconds
        #: more ``dev-cluster up`` options (bench/drain_rollout.py: ``--workloads``, ``--domains``)
        self.extra_args = tuple(extra_args)
        self.state = Path(tempfile.mkdtemp(prefix="bench-controller-"))
        self.kubeconfig = ""
        self.process: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> DevCluster:
        self._stderr = (self.state / "dev-cluster.err").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "reconciler.cli.main", "dev-cluster", "up", "--nodes",
             str(self.nodes), "--install-seconds", str(self.install), "--dir", str(self.state),
             "--timeout", str(self.timeout), "--lease-seconds", str(self.lease_seconds),
             *self.extra_args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True, text=True, preexec_fn=die_with_parent,
        )
        assert self.process.stdout is not None
        self.kubeconfig = self.process.stdout.readline().strip()
        if not self.kubeconfig:
            self.__exit__()
            raise RuntimeError(f"dev-cluster failed; see {self.state / 'dev-cluster.err'}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process = None
        self._stderr.close()


class ObserverProcess:
    """The observer (``observe``) in a process of its own: ``start()`` returns once its watch
    is synced, ``finish()`` stops it and returns what it saw (attributes as on ``Observer``)."""

    def __init__(self, kubeconfig: str) -> None:
        self.conn, child_conn = multiprocessing.Pipe()
        self.process = multiprocessing.get_context("spawn").Process(
            target=observe, args=(kubeconfig, child_conn), daemon=True)
        #: Ready pods seen when the watch synced (those before the measured change)
        self.ready_before = 0

    def start(self) -> ObserverProcess:
        self.process.start()
        self.ready_before = self.conn.recv()
        return self

    def finish(self) -> argparse.Namespace:
        self.conn.send("stop")
        seen = self.conn.recv()
        self.process.join(30)
        return argparse.Namespace(
            stages=seen["stages"], deleted_on=seen["deleted_on"], removed_on=seen["removed_on"],
            ready_at=[tuple(r) for r in seen["ready_at"]],
            deleted_at=[tuple(d) for d in seen["deleted_at"]])


def wait_completed(api: KubeApi, started: float, *, limit: float = 3600.0) -> float:
    """Wall seconds from ``started`` until the status says the rollout completed."""
    while True:
        status = (api.get(cluster_operator_path(CLUSTER_OPERATOR_NAME)).get("status")
                  or {}).get("upgradeStatus") or {}
        inner = status.get("status") or {}
        if status.get("phase") == "Idling" and inner.get("currentStepState") == "Completed" \
                and time.time() - started > 1:
            return time.time() - started
        if time.time() - started > limit:
            raise RuntimeError(f"rollout did not complete within {limit:.0f} s")
        time.sleep(0.2)


def run_rollout(cluster: DevCluster, *, spec: dict[str, Any] = POLICY,
                version: str = NEW, settings: PlannerSettings | None = None,
                on_eviction: Callable[[str], None] | None = None,
                with_times: bool = False) -> dict[str, Any]:
    """Our rollout of ``version`` with the policy ``spec`` on the running dev cluster, the
    controller in this process; returns the figures (the keys of ``--json``). ``settings``:
    the controller's (default: a 600 s ready timeout); ``on_eviction``: each drain eviction's
    result, as the metric counts it; ``with_times``: also ``deleted_at`` and ``ready_at``,
    (when, node) per old driver pod deleted and per new one Ready, as the observer saw them."""
    nodes, install = cluster.nodes, cluster.install
    watcher = ObserverProcess(cluster.kubeconfig).start()
    prefer_responsiveness()  # as `reconciler run` does for the controller role
    api = KubeApi.from_kubeconfig(cluster.kubeconfig, pool_size=64)
    timings = Timings()
    controller = RolloutController(api, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
                                   settings=settings or PlannerSettings(ready_timeout=600),
                                   observer=timings, on_eviction=on_eviction).start()
    controller.wait_synced(120)
    while not (api.get(cluster_operator_path(CLUSTER_OPERATOR_NAME)).get("status") or {}):
        time.sleep(0.1)
    requests_before = sum(api.request_counts.values())
    server_before = server_histograms(api)
    gc_pauses = GcPauses()
    gc.callbacks.append(gc_pauses)
    cpu_before = os.times()
    cluster_pids = cluster_processes(cluster.pid)
    cluster_cpu_before = {name: cpu_seconds(pid) for name, pid in cluster_pids.items()}
    started = time.time()
    api.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
              {"spec": {"driver": {"payload": {"version": version}, "upgradePolicy": spec}}})
    try:
        wall = wait_completed(api, started)
    finally:
        gc.callbacks.remove(gc_pauses)
    cpu_after = os.times()
    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    cluster_cpu = {name: round(cpu_seconds(pid) - cluster_cpu_before[name], 1)
                   for name, pid in cluster_pids.items()}
    cluster_rss = {name: round(peak_rss_mib(pid), 1) for name, pid in cluster_pids.items()}
    cluster_rss_now = {name: round(rss_mib(pid), 1) for name, pid in cluster_pids.items()}
    requests = sum(api.request_counts.values()) - requests_before
    server_after = server_histograms(api)
    controller.stop()
    observer = watcher.finish()
    readies = observer.ready_at[watcher.ready_before:]
    latencies, bursts, refills = refill_latencies(observer.deleted_at, readies, nodes, spec)
    breakdown = refill_breakdown(refills, dict(observer.ready_at), observer.deleted_on,
                                 timings.ready_seen, timings.start_times)
    minimum = theoretical_minimum(nodes, install, spec)
    over = time_over_minimum(observer.deleted_at, readies, nodes, install, started,
                             started + wall, spec)
    segments: dict[str, list[float]] = {"deleted->removed": [], "removed->created": [],
                                        "created->bound": [],
                                        "bound->running": [],
                                        "running->ready minus install": []}
    for stages in observer.stages.values():
        node = stages.get("node")
        deleted = observer.deleted_on.get(str(node)) if node else None
        if deleted is None or stages["seen"] < deleted or "ready" not in stages:
            continue
        removed = observer.removed_on.get(str(node), deleted)
        segments["deleted->removed"].append(removed - deleted)
        segments["removed->created"].append(stages["seen"] - removed)
        segments["created->bound"].append(stages.get("bound", stages["seen"]) - stages["seen"])
        if "running" in stages:
            segments["bound->running"].append(stages["running"] - stages.get("bound", 0))
            segments["running->ready minus install"].append(
                stages["ready"] - stages["running"] - install)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    waves = round(minimum / install) if install else 0
    times = {"deleted_at": observer.deleted_at, "ready_at": readies} if with_times else {}
    return {
        **times,
        # the drain's eviction requests by result, as the executor counted them
        "evictions": dict(controller.executor.evictions),
        "nodes": nodes,
        "install_seconds": install,
        "rollout_wall_seconds": round(wall, 2),
        # the same end as a native rolling update's (bench/native_peer.py): the last new pod
        # Ready, as the observer saw it
        "last_ready_seconds": round(max((w for w, _ in readies), default=started) - started, 2),
        "theoretical_minimum_seconds": minimum,
        "wall_over_minimum": round(wall / minimum, 3),
        "waves": waves,
        "seconds_over_minimum_per_wave": round((wall - minimum) / max(waves, 1), 2),
        "ready_to_next_delete_p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "ready_to_next_delete_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "ready_to_next_delete_max_ms": round(max(latencies, default=float("nan")) * 1000, 1),
        "latency_samples": len(latencies),
        "step_first_wave_send_seconds": [round(b, 2) for b in bursts],
        "time_over_minimum_by_step_seconds": over,
        "refill_parts_p50_p99_ms": {k: p50_p99_ms(v) for k, v in breakdown.items() if v},
        # refills that were the pod deletion alone (the node cordoned ahead)
        "refills_cordoned_ahead": "{}/{}".format(
            len(breakdown["handed out->pod deleted"])
            - len(breakdown["node written->pod deleted"]),
            len(breakdown["handed out->pod deleted"])),
        "controller_peak_rss_mib": round(rss, 1),
        "controller_cpu_seconds": round(cpu, 2),
        "controller_cpu_share_of_rollout": round(cpu / wall, 3),
        "controller_gc_collections_and_longest_ms": gc_pauses.summary(),
        # the rest of the machine's 2 cores during the rollout, and the memory it took
        "cluster_cpu_seconds": cluster_cpu,
        "cluster_peak_rss_mib": cluster_rss,
        "cluster_rss_mib_after": cluster_rss_now,
        "api_requests": requests,
        "api_requests_per_node": round(requests / nodes, 2),
        "planner_passes": controller.stats.passes,
        "pod_stages_p50_p99_ms": {k: p50_p99_ms(v) for k, v in segments.items()},
        "status_writes": controller.stats.status_writes,
        "node_requests_p50_p99_ms": [
            round(percentile(timings.request_seconds, q) * 1000, 1) for q in (0.5, 0.99)],
        "apiserver_p50_p99_ms_bucket_bounds": {
            " ".join(filter(None, key)): histogram_quantiles(server_before.get(key, {}), buckets)
            for key, buckets in server_after.items()},
        "controller_pass_p50_p99_ms": {
            name: [round(percentile([p[i] for p in timings.pass_seconds], q) * 1000, 1)
                   for q in (0.5, 0.99)]
            for i, name in enumerate(("plan", "act", "status_write"))},
    }


def command_line(description: str | None, *,
                 install_seconds: float = 20.0) -> argparse.ArgumentParser:
    """The command line the rollout benchmarks share: their docstring as the description,
    ``--nodes`` (default 2000), ``--install-seconds`` and ``--json``; each adds its own."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--install-seconds", type=float, default=install_seconds)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def main() -> int:
    parser = command_line(__doc__)
    parser.add_argument("--cluster-timeout", type=float, default=900.0,
                        help="seconds for the dev cluster's fleet to be Ready (default 900)")
    parser.add_argument("--lease-seconds", type=float, default=0.0,
                        help="node Lease heartbeats every this many seconds, as kubelets send "
                             "them (10); default 0: none")
    args = parser.parse_args()
    try:
        with DevCluster(args.nodes, args.install_seconds, timeout=args.cluster_timeout,
                        lease_seconds=args.lease_seconds) as cluster:
            result = run_rollout(cluster)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
        return 0
    wall, minimum = result["rollout_wall_seconds"], result["theoretical_minimum_seconds"]
    waves, per_wave = result["waves"], result["seconds_over_minimum_per_wave"]
    rss, cpu, requests = (result["controller_peak_rss_mib"], result["controller_cpu_seconds"],
                          result["api_requests"])
    rows = [
        # the measured cell starts with the figure the goal bounds (bench/run reads it)
        ("rollout wall time / theoretical minimum", "<= 1.10",
         f"{wall / minimum:.3f} ({wall:.1f} s / {minimum:.0f} s; "
         f"+{per_wave:.1f} s per wave, {waves} waves)", f"{wall / minimum / 1.10:.3f}"),
        ("p99 pod Ready -> next deletion", "< 500 ms",
         f"{result['ready_to_next_delete_p99_ms']} ms (p50 "
         f"{result['ready_to_next_delete_p50_ms']} ms, n={result['latency_samples']})",
         f"{result['ready_to_next_delete_p99_ms'] / 500:.3f}"),
        ("controller peak RSS", "-", f"{rss:.0f} MiB", "-"),
        ("controller CPU during the rollout", "-",
         f"{cpu:.0f} s ({cpu / wall:.0%} of one core)", "-"),
        ("controller API requests per node", "list/watch, no polling",
         f"{requests / args.nodes:.2f} ({requests} in all)", "-"),
    ]
    print(f"{'figure':44} {'goal':24} {'measured':40} ratio")
    for row in rows:
        print(f"{row[0]:44} {row[1]:24} {row[2]:40} {row[3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
