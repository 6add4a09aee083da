"""bench/scale.py's verdicts: per size and for the largest size's per-node costs over the
smallest's (issue 21's goals), from controller_rollout.py's figures."""

from __future__ import annotations

from typing import Any

from tests.deploy.bench_scripts import load_bench


def size(nodes: int, *, wall: float, p99: float, cpu: float, rss: float,
         requests: int) -> dict[str, Any]:
    return {"nodes": nodes, "wall_over_minimum": wall, "rollout_wall_seconds": 100.0 * wall,
            "theoretical_minimum_seconds": 100.0, "seconds_over_minimum_per_wave": 1.0,
            "ready_to_deletion_p50_ms": p99 / 2, "ready_to_deletion_p99_ms": p99,
            "latency_samples": nodes, "controller_cpu_seconds": cpu,
            "controller_cpu_seconds_per_node": cpu / nodes, "controller_peak_rss_mib": rss,
            "controller_peak_rss_kib_per_node": rss * 1024 / nodes,
            "api_requests": requests, "api_requests_per_node": requests / nodes,
            "planner_passes": nodes, "controller_pass_p50_p99_ms": {"plan": [1.0, 2.0]},
            "cluster_cpu_seconds": {"kube-apiserver": 10.0},
            "cluster_peak_rss_mib": {"kube-apiserver": 900.0}}


def test_each_goal_is_met_or_missed_and_costs_per_node_are_compared_largest_to_smallest(
        ) -> None:
    scale = load_bench("scale")
    small = size(1000, wall=1.05, p99=300.0, cpu=10.0, rss=200.0, requests=5500)
    big = size(10000, wall=1.12, p99=1200.0, cpu=130.0, rss=1100.0, requests=55000)
    ratio = scale.ratios(small, big)
    assert ratio["controller_cpu_seconds_per_node"] == 1.3
    assert ratio["api_requests_per_node"] == 1.0
    verdicts = {figure: verdict for figure, _, _, verdict in scale.table([small, big], ratio)}
    assert verdicts["1000 nodes: wall time / theoretical minimum"] == "met"
    assert verdicts["10000 nodes: wall time / theoretical minimum"] == "MISSED"
    assert verdicts["1000 nodes: Ready -> next deletion p99"] == "met"
    assert verdicts["10000 nodes: Ready -> next deletion p99"] == "MISSED"
    assert verdicts["10000 nodes: controller peak RSS"] == "MISSED"
    assert verdicts["controller CPU per node, 10000 / 1000 nodes"] == "MISSED"
    assert verdicts["controller API requests per node, 10000 / 1000 nodes"] == "met"
    assert verdicts["10000 nodes: planning passes"] == "-"
