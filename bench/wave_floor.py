#!/usr/bin/env python3
"""The floor the dev cluster itself puts under any rollout controller (issue 21): on one dev
cluster of N nodes and no controller at all, the first wave of each step of the 2,000-node
benchmark's policy (steps 5%, 30%, 60%, 100%, maxParallel 50%) is deleted at once, from as many
threads as the controller starts nodes from, and timed until every one of those nodes runs its
new driver pod (the install time starts there).

Why that is a floor: a step of k waves ends no earlier than its first wave's last new pod
Running (D after the step starts) plus k installs (that pod's own, then for each later wave a
replacement that can start only once every pod of the wave before is Ready); the minimum counts
the k installs alone. So every step adds at least D over the minimum, whatever the controller
does (it only adds CPU to the 2 cores the wave waits on), and

    floor = 1 + sum over steps of D / theoretical minimum

is a lower bound of ``bench/scale.py``'s wall time / minimum at that size and install time.
The bound leaves out everything after the first wave (each refill's own pipeline, the
controller's CPU beside the cluster's), so the real figure is above it. Each wave's pods turn
Ready only after the install time, as in the rollout, so their Ready writes do not land inside
the burst; the next step's wave waits until they have, plus ``--settle-seconds``.

While each wave is worked through, a probe deletes the driver pod of one more node (outside
every wave) once a second (``--probe-seconds``) and times the request: what a refill's deletion
waits at the API server while the cluster works through a wave, with no controller adding to
it (about 2% more load on a wave of 2,000). A refill's Ready -> next deletion is that wait plus
the watch and the controller's pass, so the probe's p99 beside the 1 s goal is the second floor.

Prints per step: the wave, how long its deletions took to go out (and each one's latency, p50 /
p99), p50 and last new pod Running, the probe's deletions and each dev-cluster process's CPU
seconds during the wave; then both floors beside the goals.

Usage: bench/wave_floor.py [--nodes 10000] [--install-seconds 120] [--threads 32]
                           [--settle-seconds 15] [--probe-seconds 1] [--json]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from controller_rollout import (
    POLICY,
    DevCluster,
    cluster_processes,
    p50_p99_ms,
    theoretical_minimum,
)

from reconciler.kube.api import KubeApi, KubeError, resource_path
from reconciler.kube.observe import driver_pod_view, is_driver_pod
from reconciler.kube.watch import ListWatch
from reconciler.names import OPERATOR_NAMESPACE
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.sim.control_plane import cpu_seconds

WALL_GOAL = 1.10  # bench/scale.py's goals: wall time / theoretical minimum,
P99_GOAL_MS = 1000  # and Ready -> next deletion p99
CONTROLLER_THREADS = 32  # the rollout controller's threads that start nodes (dispatch.py)


def first_waves(nodes: int, spec: dict[str, Any] = POLICY) -> list[int]:
    """Per step that adds nodes, the size of its first wave: the nodes it starts at once."""
    policy = UpgradePolicy.from_spec(spec)
    waves, previous = [], 0
    for target in policy.step_targets(nodes):
        batch = max(target - previous, 0)
        if batch:
            waves.append(min(policy.batch_max_parallel(batch), batch))
        previous = max(previous, target)
    return waves


def floor_over_minimum(last_running: list[float], minimum: float) -> float:
    """The lower bound of wall time / minimum: each step's first wave's last pod Running."""
    return 1.0 + sum(last_running) / minimum


class NewPods:
    """Per watched node, when a driver pod other than its old one was first seen Running."""

    def __init__(self, api: KubeApi) -> None:
        self._lock = threading.Lock()
        self.current: dict[str, tuple[str, bool]] = {}  # node -> (pod, Running and not deleting)
        self.ready: dict[str, bool] = {}  # node -> its driver pod is Ready
        self._old: dict[str, str] = {}
        self.running_at: dict[str, float] = {}
        self.watch = ListWatch(api, resource_path("v1", "pods"), on_event=self._on_pod,
                               name="wave floor pods")

    def _on_pod(self, event: str, obj: dict[str, Any]) -> None:
        if not is_driver_pod(obj):
            return
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        if not node:
            return
        view = driver_pod_view(obj)
        running = (obj.get("status") or {}).get("phase") == "Running" and not view.deleting
        with self._lock:
            if event == "DELETED":
                if self.current.get(node, ("",))[0] == view.name:
                    del self.current[node]
                    self.ready.pop(node, None)
                return
            self.current[node] = (view.name, running)
            self.ready[node] = view.ready and not view.deleting
            if running and node in self._old and view.name != self._old[node]:
                self.running_at.setdefault(node, time.time())

    def expect(self, nodes: list[str]) -> dict[str, str]:
        """Watches ``nodes`` for new pods; returns their current (old) pods."""
        with self._lock:
            self._old = {node: self.current[node][0] for node in nodes}
            self.running_at = {}
            return dict(self._old)

    def running(self) -> list[float]:
        with self._lock:
            return list(self.running_at.values())

    def all_ready(self) -> int:
        with self._lock:
            return sum(self.ready.values())

    def current_pod(self, node: str) -> str | None:
        with self._lock:
            current = self.current.get(node)
            return current[0] if current is not None and current[1] else None

    def running_nodes(self) -> list[str]:
        with self._lock:
            return sorted(node for node, (_, running) in self.current.items() if running)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def wait_ready(pods: NewPods, nodes: int, limit: float) -> None:
    deadline = time.monotonic() + limit
    while pods.all_ready() < nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {pods.all_ready()} of {nodes} driver pods Ready")
        time.sleep(0.5)


class Probe:
    """A refill's deletion, played alone: every ``interval`` s while a wave is worked through, the
    driver pod of one more node (outside every wave) deleted on a thread of its own, and the
    request timed. It is the API server's part of a refill's Ready -> next deletion under the
    cluster's own load (a controller adds its own on top)."""

    def __init__(self, api: KubeApi, pods: NewPods, nodes: list[str], interval: float) -> None:
        self.api, self.pods, self.interval = api, pods, interval
        self.spare = list(reversed(nodes))
        self.latencies: list[float] = []
        self.failed = 0  # deletions the API server refused or dropped (not timed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Probe:
        if self.interval > 0:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="wave floor probe",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while self.spare and not self._stop.wait(self.interval):
            node = self.spare.pop()
            pod = self.pods.current_pod(node)
            if pod is None:
                continue
            sent = time.perf_counter()
            try:
                self.api.delete(resource_path("v1", "pods", pod, namespace=OPERATOR_NAMESPACE))
            except KubeError:
                self.failed += 1  # counted and reported; the probe goes on
                continue
            self.latencies.append(time.perf_counter() - sent)


def one_wave(api: KubeApi, pods: NewPods, nodes: list[str], threads: int,
             processes: dict[str, int], limit: float, probe: Probe) -> dict[str, Any]:
    old = pods.expect(nodes)
    cpu_before = {name: cpu_seconds(pid) for name, pid in processes.items()}
    started = time.time()
    probed = len(probe.latencies)

    def delete(node: str) -> float:
        sent = time.perf_counter()
        api.delete(resource_path("v1", "pods", old[node], namespace=OPERATOR_NAMESPACE))
        return time.perf_counter() - sent

    with probe, concurrent.futures.ThreadPoolExecutor(threads) as pool:
        latencies = list(pool.map(delete, nodes))
        sent = time.time() - started
        while len(pods.running()) < len(nodes):
            if time.time() - started > limit:
                raise RuntimeError(f"{len(pods.running())} of {len(nodes)} new pods Running "
                                   f"after {limit:.0f} s")
            time.sleep(0.1)
    running = sorted(when - started for when in pods.running())
    return {
        "first_wave": len(nodes),
        "deletions_sent_seconds": round(sent, 2),
        "deletion_p50_p99_ms": p50_p99_ms(latencies),
        "running_p50_seconds": round(running[len(running) // 2], 2),
        "last_running_seconds": round(running[-1], 2),
        "probe_deletions": len(probe.latencies) - probed,
        "probe_deletion_p50_p99_ms": p50_p99_ms(probe.latencies[probed:]),
        "cluster_cpu_seconds": {name: round(cpu_seconds(pid) - cpu_before[name], 1)
                                for name, pid in processes.items()},
    }


def measure(nodes: int, install: float, threads: int, settle: float,
            probe_seconds: float) -> dict[str, Any]:
    waves = first_waves(nodes)
    minimum = theoretical_minimum(nodes, install)
    with DevCluster(nodes, install, timeout=1800) as cluster:
        api = KubeApi.from_kubeconfig(cluster.kubeconfig, pool_size=threads + 4)
        pods = NewPods(api)
        pods.watch.start()
        pods.watch.wait_synced(300)
        processes = cluster_processes(cluster.pid)
        wait_ready(pods, nodes, 600)
        order = pods.running_nodes()
        probe = Probe(api, pods, order[sum(waves):], probe_seconds)
        steps, used = [], 0
        for index, size in enumerate(waves, start=1):
            time.sleep(settle)
            say(f"step {index}: a wave of {size} of {nodes} nodes ...")
            row = one_wave(api, pods, order[used:used + size], threads, processes,
                           limit=max(600.0, install * 2), probe=probe)
            used += size
            say(f"  deletions out in {row['deletions_sent_seconds']} s, new pods Running: "
                f"p50 {row['running_p50_seconds']} s, last {row['last_running_seconds']} s")
            steps.append({"step": index, **row})
            wait_ready(pods, nodes, install + 600)
        api.close()
    floor = floor_over_minimum([step["last_running_seconds"] for step in steps], minimum)
    return {"nodes": nodes, "install_seconds": install, "threads": threads,
            "theoretical_minimum_seconds": minimum, "steps": steps,
            "floor_wall_over_minimum": round(floor, 3), "wall_goal": WALL_GOAL,
            "goal_within_floor": floor <= WALL_GOAL,
            "probe_seconds": probe_seconds, "probe_deletions": len(probe.latencies),
            "probe_deletions_failed": probe.failed,
            "probe_deletion_p50_p99_ms": p50_p99_ms(probe.latencies),
            "ready_to_deletion_p99_goal_ms": P99_GOAL_MS}


def report(result: dict[str, Any]) -> str:
    lines = [f"{result['nodes']} nodes, {result['install_seconds']:g} s install, no controller: "
             f"each step's first wave deleted at once from {result['threads']} threads"]
    for step in result["steps"]:
        cpu = ", ".join(f"{name} {seconds}" for name, seconds
                        in sorted(step["cluster_cpu_seconds"].items(), key=lambda kv: -kv[1]))
        p50, p99 = step["deletion_p50_p99_ms"]
        lines.append(f"  step {step['step']}: {step['first_wave']} pods: deletions out in "
                     f"{step['deletions_sent_seconds']} s (each {p50} / {p99} ms p50 / p99); "
                     f"new pods Running p50 "
                     f"{step['running_p50_seconds']} s, last {step['last_running_seconds']} s; "
                     f"CPU s: {cpu}")
    verdict = ("a rollout can meet" if result["goal_within_floor"]
               else "no rollout controller can meet")
    if result["probe_deletions"]:
        p50, p99 = result["probe_deletion_p50_p99_ms"]
        lines.append(f"a lone deletion every {result['probe_seconds']:g} s while the waves were "
                     f"worked through ({result['probe_deletions']} of them, "
                     f"{result['probe_deletions_failed']} failed): {p50} / {p99} ms "
                     f"p50 / p99 "
                     f"(goal for the whole Ready -> next deletion: p99 under "
                     f"{result['ready_to_deletion_p99_goal_ms']} ms)")
    lines.append(f"floor of wall time / minimum ({result['theoretical_minimum_seconds']:g} s): "
                 f"{result['floor_wall_over_minimum']:.3f}; goal {result['wall_goal']:.2f}: "
                 f"{verdict} it on this machine")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--install-seconds", type=float, default=120.0)
    parser.add_argument("--threads", type=int, default=CONTROLLER_THREADS)
    parser.add_argument("--settle-seconds", type=float, default=15.0)
    parser.add_argument("--probe-seconds", type=float, default=1.0,
                        help="a lone deletion this often during each wave (0: none)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    seconds = (args.install_seconds, args.settle_seconds, args.probe_seconds)
    if (args.nodes < 20 or args.threads < 1 or not all(map(math.isfinite, seconds))
            or args.install_seconds <= 0 or args.settle_seconds < 0 or args.probe_seconds < 0):
        parser.error("--nodes at least 20, --threads at least 1, --install-seconds above 0, "
                     "--settle-seconds and --probe-seconds finite and not negative")
    result = measure(args.nodes, args.install_seconds, args.threads, args.settle_seconds,
                     args.probe_seconds)
    print(json.dumps(result) if args.json else report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
