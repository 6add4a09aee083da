#!/usr/bin/env python3
"""Scaling benchmark (issue 21, docs/rollout.md#scale): the 2,000-node benchmark's rollout
(bench/controller_rollout.py: steps 5%, 30%, 60%, 100%, maxParallel 50%, maxUnavailable 10%)
at each fleet size with a fixed install time, one run each, each in a fresh dev cluster and a
fresh process (so the controller's peak RSS and CPU time are that size's alone).

Per size: wall time / theoretical minimum, Ready -> next deletion p50/p99, the controller's CPU
seconds per node, peak RSS, API requests per node, and each dev-cluster process's CPU seconds
and peak memory (read from /proc); then the largest size's per-node costs over the smallest's,
each with met/MISSED against the issue's goals:

- wall time at most 1.10 x the minimum, p99 Ready -> next deletion under 1 s (at every size);
- controller CPU seconds and API requests per node at the largest size within 1.2 x of the
  smallest's; controller peak RSS under 1 GiB.

Usage: bench/scale.py [--sizes 1000,2000,5000,10000] [--install-seconds 120]
                      [--lease-seconds 0] [--json]

Each size's full figures (controller_rollout.py --json) are kept under "sizes" in --json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

WALL_GOAL = 1.10
P99_GOAL_MS = 1000.0
PER_NODE_RATIO_GOAL = 1.2
RSS_GOAL_MIB = 1024.0


def run_size(nodes: int, install: float, lease_seconds: float = 0.0) -> dict[str, Any]:
    """One rollout at ``nodes`` by bench/controller_rollout.py in a process of its own."""
    # registering and installing the fleet takes longer the bigger it is
    cluster_timeout = 900 + 0.2 * nodes
    done = subprocess.run(
        [sys.executable, str(BENCH / "controller_rollout.py"), "--nodes", str(nodes),
         "--install-seconds", str(install), "--cluster-timeout", str(cluster_timeout),
         "--lease-seconds", str(lease_seconds), "--json"],
        capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{nodes} nodes: controller_rollout.py exited {done.returncode}: "
                           f"{done.stderr.strip()[-500:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    found["ready_to_deletion_p50_ms"] = found["ready_to_next_delete_p50_ms"]
    found["ready_to_deletion_p99_ms"] = found["ready_to_next_delete_p99_ms"]
    found["controller_cpu_seconds_per_node"] = round(found["controller_cpu_seconds"] / nodes, 5)
    found["controller_peak_rss_kib_per_node"] = round(
        found["controller_peak_rss_mib"] * 1024 / nodes, 2)
    return found


def ratios(smallest: dict[str, Any], largest: dict[str, Any]) -> dict[str, float]:
    """The largest size's per-node costs over the smallest's."""
    def ratio(key: str) -> float:
        low = smallest[key]
        return round(largest[key] / low, 3) if low else float("inf")
    return {"controller_cpu_seconds_per_node": ratio("controller_cpu_seconds_per_node"),
            "api_requests_per_node": ratio("api_requests_per_node"),
            "controller_peak_rss_per_node": ratio("controller_peak_rss_kib_per_node")}


def verdict(met: bool | None) -> str:
    return "-" if met is None else ("met" if met else "MISSED")


def table(sizes: list[dict[str, Any]], ratio: dict[str, float]) -> list[tuple[str, str, str,
                                                                               str]]:
    """(figure, goal, measured, goal met) rows."""
    rows: list[tuple[str, str, str, str]] = []
    for size in sizes:
        n = size["nodes"]
        processes = ", ".join(
            f"{name} {cpu:.1f} s / {size['cluster_peak_rss_mib'].get(name, float('nan')):.0f} MiB"
            for name, cpu in size["cluster_cpu_seconds"].items())
        rows += [
            (f"{n} nodes: wall time / theoretical minimum", f"<= {WALL_GOAL:.2f}",
             f"{size['wall_over_minimum']:.3f} ({size['rollout_wall_seconds']:.1f} s / "
             f"{size['theoretical_minimum_seconds']:.0f} s, "
             f"+{size['seconds_over_minimum_per_wave']:.1f} s per wave)",
             verdict(size["wall_over_minimum"] <= WALL_GOAL)),
            (f"{n} nodes: Ready -> next deletion p99", f"< {P99_GOAL_MS:.0f} ms",
             f"{size['ready_to_deletion_p99_ms']} ms (p50 {size['ready_to_deletion_p50_ms']} "
             f"ms, n={size['latency_samples']})",
             verdict(size["ready_to_deletion_p99_ms"] < P99_GOAL_MS)),
            (f"{n} nodes: controller CPU per node", "-",
             f"{size['controller_cpu_seconds_per_node'] * 1000:.2f} ms "
             f"({size['controller_cpu_seconds']:.1f} s)", "-"),
            (f"{n} nodes: controller peak RSS", f"< {RSS_GOAL_MIB:.0f} MiB",
             f"{size['controller_peak_rss_mib']:.0f} MiB",
             verdict(size["controller_peak_rss_mib"] < RSS_GOAL_MIB)),
            (f"{n} nodes: controller API requests per node", "-",
             f"{size['api_requests_per_node']:.2f} ({size['api_requests']} in all)", "-"),
            # each pass plans over every node: passes growing with the fleet make the
            # planning work grow faster than it (the per-node CPU ratio below shows it)
            (f"{n} nodes: planning passes", "-",
             f"{size['planner_passes']} ({size['planner_passes'] / n:.2f} per node; plan p50 "
             f"{size['controller_pass_p50_p99_ms']['plan'][0]} ms, p99 "
             f"{size['controller_pass_p50_p99_ms']['plan'][1]} ms)", "-"),
            (f"{n} nodes: cluster CPU / peak RSS", "-", processes, "-"),
        ]
    if len(sizes) > 1:
        low, high = sizes[0]["nodes"], sizes[-1]["nodes"]
        for key, figure, goal in (
                ("controller_cpu_seconds_per_node", "controller CPU per node", True),
                ("api_requests_per_node", "controller API requests per node", True),
                ("controller_peak_rss_per_node", "controller peak RSS per node", False)):
            rows.append((f"{figure}, {high} / {low} nodes",
                         f"<= {PER_NODE_RATIO_GOAL}" if goal else "-", f"{ratio[key]:.3f}",
                         verdict(ratio[key] <= PER_NODE_RATIO_GOAL) if goal else "-"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,2000,5000,10000",
                        help="fleet sizes, comma-separated (default 1000,2000,5000,10000)")
    parser.add_argument("--install-seconds", type=float, default=120.0)
    parser.add_argument("--lease-seconds", type=float, default=0.0,
                        help="node Lease heartbeats every this many seconds, as kubelets send "
                             "them (10); default 0: none")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: expected numbers such as 1000,2000")
    if not sizes or min(sizes) < 1:
        parser.error("--sizes: at least one size, each at least 1")
    if args.install_seconds <= 0:
        parser.error("--install-seconds: must be positive")
    results = []
    for nodes in sizes:
        print(f"[scale] {nodes} nodes ...", file=sys.stderr, flush=True)
        try:
            results.append(run_size(nodes, args.install_seconds, args.lease_seconds))
        except RuntimeError as exc:
            print(f"[scale] {exc}", file=sys.stderr)
            return 1
    ratio = ratios(results[0], results[-1]) if len(results) > 1 else {}
    rows = table(results, ratio)
    if args.json:
        print(json.dumps({"install_seconds": args.install_seconds,
                          "lease_seconds": args.lease_seconds, "sizes": results,
                          "largest_over_smallest_per_node": ratio,
                          "goals": [{"figure": f, "goal": g, "measured": m, "verdict": v}
                                    for f, g, m, v in rows if v != "-"]}))
    else:
        widths = [max(len(r[i]) for r in [("figure", "goal", "measured", "goal met"), *rows])
                  for i in range(4)]
        for row in [("figure", "goal", "measured", "goal met"), *rows]:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    missed = any(v == "MISSED" for *_, v in rows)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
