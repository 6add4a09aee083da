#!/usr/bin/env python3
"""Our rollout beside the native peer (issue 21): the DaemonSet controller's own RollingUpdate
(``maxUnavailable: W``, no batches, no gates) and our rollout (one ``100%`` step,
``maxParallel: W``, ``maxUnavailable: W``) of the same driver version change, with the same
install time, on one dev cluster in one run.

1. native: the driver DaemonSet gets ``updateStrategy: RollingUpdate`` with ``maxUnavailable:
   W`` and the new image; done when its status says every pod is updated and available;
2. the fleet goes back to the old image at once (``maxUnavailable: 100%``, not measured) and the
   DaemonSet back to ``OnDelete``;
3. ours: bench/controller_rollout.py's ``run_rollout`` with the one-step policy (the controller
   in this process); done when the status says Completed.

Both are also measured the same way by the same observer (a watch in a process of its own):
from the change to the last new driver pod turning Ready. The simulated kubelets treat both
alike: a driver pod's replacement (deletion, the DaemonSet controller's new pod, install time)
does not depend on who deleted the old one. Prints both wall times, ours over native (goal: at
most 1.02) and each one's time over ``waves x install`` (waves = ceil(nodes / W)).

``--native-only`` runs step 1 alone: how far the native peer itself is from ``waves x
install`` on this machine (at 10,000 nodes the whole run would take about an hour).

Usage: bench/native_peer.py [--nodes 2000] [--install-seconds 60] [--parallel W]
                            [--lease-seconds 0] [--native-only] [--json]
       (W defaults to a tenth of the nodes)
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from controller_rollout import (
    NEW,
    DevCluster,
    ObserverProcess,
    cluster_processes,
    command_line,
    run_rollout,
)

from reconciler.kube.api import KubeApi, resource_path
from reconciler.names import DRIVER_CONTAINER, DRIVER_DAEMONSET, OPERATOR_NAMESPACE
from reconciler.sim.control_plane import cpu_seconds

PARITY_GOAL = 1.02
DAEMONSET = resource_path("apps/v1", "daemonsets", DRIVER_DAEMONSET,
                          namespace=OPERATOR_NAMESPACE)


def one_step_policy(parallel: int) -> dict[str, Any]:
    return {"enableRollout": True,
            "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}],
            "pause": False, "maxParallel": parallel, "maxUnavailable": parallel,
            "maxFailureThreshold": 5, "fallback": "pause"}


def driver_image(api: KubeApi) -> str:
    containers = api.get(DAEMONSET)["spec"]["template"]["spec"]["containers"]
    return str(next(c["image"] for c in containers if c["name"] == DRIVER_CONTAINER))


def set_daemonset(api: KubeApi, image: str, strategy: dict[str, Any]) -> None:
    api.patch(DAEMONSET, {"spec": {"updateStrategy": strategy, "template": {"spec": {
        "containers": [{"name": DRIVER_CONTAINER, "image": image}]}}}}, patch_type="strategic")


def rolled_out(api: KubeApi, nodes: int) -> bool:
    """The DaemonSet controller's own verdict (as ``kubectl rollout status`` reads it)."""
    ds = api.get(DAEMONSET)
    status = ds.get("status") or {}
    return (status.get("observedGeneration", 0) >= ds["metadata"]["generation"]
            and status.get("desiredNumberScheduled") == nodes
            and status.get("updatedNumberScheduled") == nodes
            and status.get("numberAvailable") == nodes)


def wait_rolled_out(api: KubeApi, nodes: int, started: float, limit: float = 3600.0) -> float:
    while not rolled_out(api, nodes):
        if time.time() - started > limit:
            raise RuntimeError(f"native rolling update not done within {limit:.0f} s")
        time.sleep(0.2)
    return time.time() - started


def native(cluster: DevCluster, parallel: int, image: str) -> dict[str, Any]:
    """The DaemonSet controller's RollingUpdate to ``image``, measured."""
    api = KubeApi.from_kubeconfig(cluster.kubeconfig, pool_size=4)
    watcher = ObserverProcess(cluster.kubeconfig).start()
    pids = cluster_processes(cluster.pid)
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.time()
    set_daemonset(api, image, {"type": "RollingUpdate",
                               "rollingUpdate": {"maxUnavailable": parallel}})
    wall = wait_rolled_out(api, cluster.nodes, started)
    cpu = {name: round(cpu_seconds(pid) - cpu_before[name], 1) for name, pid in pids.items()}
    seen = watcher.finish()
    readies = seen.ready_at[watcher.ready_before:]
    api.close()
    return {"rollout_wall_seconds": round(wall, 2),
            "last_ready_seconds": round(max((w for w, _ in readies), default=started)
                                        - started, 2),
            "new_pods_ready": len(readies), "cluster_cpu_seconds": cpu}


def restore(cluster: DevCluster, image: str) -> None:
    """Every node back on ``image`` at once, then the DaemonSet back to OnDelete (the
    template stays the same, so its revision is the original one)."""
    api = KubeApi.from_kubeconfig(cluster.kubeconfig, pool_size=4)
    set_daemonset(api, image, {"type": "RollingUpdate",
                               "rollingUpdate": {"maxUnavailable": "100%"}})
    wait_rolled_out(api, cluster.nodes, time.time())
    api.patch(DAEMONSET, {"spec": {"updateStrategy": {"type": "OnDelete",
                                                      "rollingUpdate": None}}})
    api.close()


def main() -> int:
    parser = command_line(__doc__, install_seconds=60.0)
    parser.add_argument("--parallel", type=int, default=None,
                        help="W: native maxUnavailable and our maxParallel (default nodes/10)")
    parser.add_argument("--lease-seconds", type=float, default=0.0,
                        help="node Lease heartbeats every this many seconds, as kubelets send "
                             "them (10); default 0: none")
    parser.add_argument("--native-only", action="store_true",
                        help="the native rolling update alone, not ours")
    args = parser.parse_args()
    if args.nodes < 1 or args.install_seconds <= 0:
        parser.error("--nodes and --install-seconds must be positive")
    parallel = args.parallel or max(args.nodes // 10, 1)
    waves = math.ceil(args.nodes / parallel)
    minimum = waves * args.install_seconds
    try:
        with DevCluster(args.nodes, args.install_seconds, timeout=900 + 0.2 * args.nodes,
                        lease_seconds=args.lease_seconds) as cluster:
            api = KubeApi.from_kubeconfig(cluster.kubeconfig, pool_size=4)
            old_image = driver_image(api)
            api.close()
            new_image = f"{old_image.rsplit(':', 1)[0]}:{NEW}"
            theirs = native(cluster, parallel, new_image)
            if not args.native_only:
                restore(cluster, old_image)
                ours = run_rollout(cluster, spec=one_step_policy(parallel), version=NEW)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    result: dict[str, Any] = {
        "nodes": args.nodes, "install_seconds": args.install_seconds, "parallel": parallel,
        "waves": waves, "waves_x_install_seconds": minimum,
        "native": {**theirs, "over_minimum": round(theirs["rollout_wall_seconds"] / minimum, 3),
                   "last_ready_over_minimum": round(theirs["last_ready_seconds"] / minimum, 3),
                   "seconds_over_minimum_per_wave": round(
                       (theirs["rollout_wall_seconds"] - minimum) / waves, 2)},
    }
    if args.native_only:
        native_row = result["native"]
        if args.json:
            print(json.dumps(result))
        else:
            print(f"native RollingUpdate: done (DaemonSet status) "
                  f"{native_row['rollout_wall_seconds']:.1f} s ({native_row['over_minimum']:.3f}"
                  f" x {waves} waves x {args.install_seconds:g} s, "
                  f"+{native_row['seconds_over_minimum_per_wave']:.1f} s per wave); last new "
                  f"pod Ready {native_row['last_ready_seconds']:.1f} s")
        return 0
    result.update({
        "ours": {"rollout_wall_seconds": ours["rollout_wall_seconds"],
                 "last_ready_seconds": ours["last_ready_seconds"],
                 "over_minimum": round(ours["rollout_wall_seconds"] / minimum, 3),
                 "last_ready_over_minimum": round(ours["last_ready_seconds"] / minimum, 3),
                 "controller_cpu_seconds": ours["controller_cpu_seconds"],
                 "api_requests": ours["api_requests"],
                 "ready_to_next_delete_p99_ms": ours["ready_to_next_delete_p99_ms"],
                 "cluster_cpu_seconds": ours["cluster_cpu_seconds"]},
    })
    done_ratio = ours["rollout_wall_seconds"] / theirs["rollout_wall_seconds"]
    ready_ratio = ours["last_ready_seconds"] / theirs["last_ready_seconds"]
    result["ours_over_native"] = round(done_ratio, 3)
    result["ours_over_native_last_ready"] = round(ready_ratio, 3)
    if args.json:
        print(json.dumps(result))
        return 0
    native_row, ours_row = result["native"], result["ours"]
    rows = [
        ("native RollingUpdate: done (DaemonSet status)", "-",
         f"{native_row['rollout_wall_seconds']:.1f} s ({native_row['over_minimum']:.3f} x "
         f"{waves} waves x {args.install_seconds:g} s)", "-"),
        ("ours, one 100% step: done (status Completed)", "-",
         f"{ours_row['rollout_wall_seconds']:.1f} s ({ours_row['over_minimum']:.3f} x "
         f"{waves} waves x {args.install_seconds:g} s)", "-"),
        ("ours / native, until done as each reports it", f"<= {PARITY_GOAL}",
         f"{done_ratio:.3f}", f"{done_ratio / PARITY_GOAL:.3f}"),
        ("ours / native, until the last new pod Ready", f"<= {PARITY_GOAL}",
         f"{ready_ratio:.3f} ({ours_row['last_ready_seconds']:.1f} s / "
         f"{native_row['last_ready_seconds']:.1f} s)", f"{ready_ratio / PARITY_GOAL:.3f}"),
    ]
    print(f"{'figure':48} {'goal':8} {'measured':44} ratio")
    for row in rows:
        print(f"{row[0]:48} {row[1]:8} {row[2]:44} {row[3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
