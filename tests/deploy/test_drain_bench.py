"""bench/drain_rollout.py's arithmetic: the minimum with each wave's grace (in order over domains
under ``sequential``), the serving fleet it puts behind budgets, the zone-order check and the
verdicts beside issue 32's goals."""

from __future__ import annotations

from typing import Any

from tests.deploy.bench_scripts import load_bench


def test_the_minimum_adds_each_waves_grace_and_sequential_takes_a_domain_at_a_time() -> None:
    bench = load_bench("drain_rollout")
    # 2,000 nodes: batches 100, 500, 600, 800 at maxParallel 50%: 8 waves of 60 + 5 s
    assert bench.theoretical_minimum(2000, 65.0) == 8 * 65.0
    # 20 zones of 100: step 1 is zone 1 in 2 waves of 50; each later step's zones take a
    # wave each (250, 300, 400 in parallel > 100): 2 + 5 + 6 + 8 waves
    assert bench.sequential_minimum(2000, 20, 65.0) == 21 * 65.0
    # one domain: no different from the plain minimum
    assert bench.sequential_minimum(2000, 1, 65.0) == 8 * 65.0
    # 3 zones over 12 nodes (4 each): batches 1, 3, 4, 4 (targets 1, 4, 8, 12), maxParallel
    # 1, 2, 2, 2: zone 1 holds the first 4 nodes (1 wave, then 2: 1 + 2 waves), step 3 is
    # zone 2 (2 waves), step 4 zone 3 (2 waves)
    assert bench.sequential_minimum(12, 3, 10.0) == (1 + 2 + 2 + 2) * 10.0


def test_serving_pods_every_other_node_in_deployments_of_100_behind_10_percent_budgets() -> None:
    bench = load_bench("drain_rollout")
    assert bench.budget_sizes(1000, 100) == [100] * 10
    assert bench.budget_sizes(50, 100) == [50]
    assert bench.budget_sizes(250, 100) == [100, 100, 50]
    assert [bench.allowed_down(n) for n in (100, 50, 5, 1)] == [10, 5, 1, 1]
    objects = bench.serving_fleet([100, 50], 5)
    kinds = [(body["kind"], body["metadata"]["name"]) for _, body in objects]
    assert kinds == [("Deployment", "serve-01"), ("PodDisruptionBudget", "serve-01"),
                     ("Deployment", "serve-02"), ("PodDisruptionBudget", "serve-02")]
    deployment, budget = objects[0][1], objects[1][1]
    template = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] == 100
    assert template["spec"]["terminationGracePeriodSeconds"] == 5
    spread = template["spec"]["topologySpreadConstraints"]
    assert spread == [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                       "whenUnsatisfiable": "DoNotSchedule",
                       "labelSelector": {"matchLabels": {bench.TIER_LABEL: bench.TIER}}}]
    assert template["metadata"]["labels"] == {"app": "serve-01", bench.TIER_LABEL: bench.TIER}
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"] == {"maxUnavailable": "10%",
                              "selector": {"matchLabels": {"app": "serve-01"}}}


def test_a_start_before_an_earlier_zones_last_ready_is_a_violation() -> None:
    bench = load_bench("drain_rollout")
    zone_of = {"a1": "zone-1", "a2": "zone-1", "b1": "zone-2", "c1": "zone-3"}
    readies = [(10.0, "a1"), (12.0, "a2"), (20.0, "b1"), (30.0, "c1")]
    in_order = [(1.0, "a1"), (2.0, "a2"), (12.5, "b1"), (21.0, "c1")]
    assert bench.sequential_violations(zone_of, in_order, readies) == 0
    # c1 started (its first eviction) while zone 2 was still upgrading; b1's deletion came
    # later than its eviction: the first start counts
    early = [*in_order, (15.0, "c1"), (11.0, "b1")]
    assert bench.sequential_violations(zone_of, early, readies) == 2


def mode(name: str, **figures: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "mode": name, "wall_over_minimum": 1.05, "wall_seconds": 546.0, "minimum_seconds": 520.0,
        "waves": 8, "seconds_over_minimum_per_wave": 3.25,
        "load_average_1m_before_after": [2.0, 3.0], "requests_over_evicted": 1.2,
        "eviction_requests": 600, "pods_evicted": 500,
        "evictions_metric": {"evicted": 500, "refused": 100}, "metric_matches_executor": True,
        "fewest_healthy_per_deployment": {"serve-01": 90, "serve-02": 45},
        "serving_placement": {}, "sequential_violations": 0, "zones": 20}
    return {**found, **figures}


def test_each_goal_is_met_or_missed() -> None:
    bench = load_bench("drain_rollout")
    result = {"serving_deployments": [100, 50], "modes": [
        mode("off", wall_over_minimum=1.2),
        mode("drain"),
        mode("sequential", requests_over_evicted=1.6,
             fewest_healthy_per_deployment={"serve-01": 89, "serve-02": 45},
             sequential_violations=3)]}
    verdicts = {figure: verdict for figure, _, _, verdict in bench.table(result)}
    assert verdicts == {
        "off: wall time / minimum": "MISSED",
        "drain: wall time / minimum": "met",
        "drain: eviction requests / pods evicted": "met",
        "drain: budgets held (fewest Ready per Deployment)": "met",
        "sequential: wall time / minimum": "met",
        "sequential: eviction requests / pods evicted": "MISSED",
        "sequential: budgets held (fewest Ready per Deployment)": "MISSED",
        "sequential: starts before an earlier zone was done": "MISSED",
    }
