"""``reconciler simulate`` with the drain (docs/live-clusters.md#the-drain): serving pods behind
budgets on the virtual fleet, timelines computed by hand in the comments, and random fleets whose
budgets are never overdrawn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as s

from reconciler.cli.main import cli
from reconciler.policy.rollout_settings import DrainSettings
from reconciler.rollout.model import PlannerSettings
from reconciler.rollout.sim_workloads import ServingModel
from reconciler.rollout.simulator import SimConfig, Simulation

POLICY = """\
driver:
  payload: {{registry: reg.local/metax, name: driver-image, version: 2.33.0.9}}
  upgradePolicy:
    enableRollout: true
    upgradeSteps:
      - {{replicas: "100%", pauseDuration: 0}}
    maxParallel: {parallel}
    maxUnavailable: 0
    maxFailureThreshold: 2
    fallback: pause
"""


def policy_file(tmp_path: Path, parallel: int) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.format(parallel=parallel), encoding="utf-8")
    return path


def simulate(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, ["simulate", *map(str, args)], catch_exceptions=False)


def as_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    result = simulate(*args, "--format", "json")
    return result.exit_code, json.loads(result.stdout)


SERVING = ("--serving-pods", "2", "--pods-per-budget", "2", "--drain-seconds", "5",
           "--reschedule-seconds", "10")


def test_a_budget_holds_the_second_node_until_the_first_pod_is_replaced(tmp_path: Path) -> None:
    # two nodes drain at once, one serving pod each, one budget allowing one disruption:
    # t=0 web-0 evicted, web-1 held; t=5 web-0 gone, node-0001's driver pod goes (Ready at
    # 65); t=15 web-0's replacement Ready elsewhere: web-1 evicted; t=20 gone, node-0002's
    # driver pod goes, Ready at 80: done at 80. The budget held node-0002 from 0 to 15.
    code, out = as_json(policy_file(tmp_path, 2), "--nodes", "2", "--from-version",
                        "2.32.0.6", "--drain", *SERVING)
    assert code == 0 and out["completed"] is True
    assert out["duration_seconds"] == 80
    assert out["drain"]["nodes"] == [{"node": "node-0001", "seconds": 5.0},
                                     {"node": "node-0002", "seconds": 20.0}]
    assert out["drain"]["budgets_held"] == [
        {"budget": "serve/serve-0-pdb", "seconds": 15.0, "nodes": 1}]
    # the planner asked only what the budget allowed: no request refused
    assert out["drain"]["evictions"] == {"requested": 2, "refused": 0, "evicted": 2,
                                         "deleted": 0}
    blocked = [e for e in out["events"] if e["type"] == "NodeDrainBlocked"]
    assert [(e["t"], e["node"]) for e in blocked] == [(0, "node-0002")]
    assert "serve/serve-0-pdb" in blocked[0]["message"]


def test_text_output_names_drain_times_and_the_budgets_that_held(tmp_path: Path) -> None:
    result = simulate(policy_file(tmp_path, 2), "--nodes", "2", "--from-version", "2.32.0.6",
                      "--drain", *SERVING)
    assert result.exit_code == 0
    text = result.stdout
    assert "drain: timeout 900 s, onTimeout wait; 2 serving pods, 2 per budget" in text
    assert "drain: 2 nodes drained, mean 12.5 s, max 20 s" in text
    assert "budgets that held: serve/serve-0-pdb (1 nodes, 15 s)" in text
    assert "evictions: 2 requested, 0 refused" in text


def test_without_drain_a_node_with_a_serving_pod_waits(tmp_path: Path) -> None:
    code, out = as_json(policy_file(tmp_path, 2), "--nodes", "3", "--from-version",
                        "2.32.0.6", "--serving-pods", "1")
    assert code == 1 and out["stop_reason"] == "stalled"
    assert "node-0001 (serve/web-0)" in out["final"]["status"]["message"]
    assert out["drain"]["evictions"]["requested"] == 0


def test_drain_settings_come_from_the_repo_config(tmp_path: Path) -> None:
    config = tmp_path / "reconciler.yaml"
    config.write_text("rollout:\n  drain:\n    timeout: 1m\n    onTimeout: delete\n",
                      encoding="utf-8")
    # a budget that never allows (maxUnavailable 0): the pod is deleted after the minute
    code, out = as_json(policy_file(tmp_path, 1), "--nodes", "1", "--from-version",
                        "2.32.0.6", "--repo-config", config, "--serving-pods", "1",
                        "--budget-max-unavailable", "0", "--drain-seconds", "5")
    assert code == 0
    assert out["drain"]["evictions"]["deleted"] == 1
    assert out["drain"]["nodes"] == [{"node": "node-0001", "seconds": 65.0}]
    assert out["duration_seconds"] == 125


DRIVER: dict[str, Any] = {
    "payload": {"registry": "reg.local/metax", "name": "driver-image", "version": "2.33.0.9"},
    "upgradePolicy": {"enableRollout": True, "maxFailureThreshold": 3, "fallback": "pause",
                      "upgradeSteps": [{"replicas": "30%", "pauseDuration": 0},
                                       {"replicas": "100%", "pauseDuration": 0}]},
}


@settings(max_examples=25, deadline=None)
@given(nodes=s.integers(1, 12), pods=s.integers(0, 30), per=s.integers(1, 8),
       budget=s.integers(1, 2), parallel=s.integers(1, 6), grace=s.sampled_from([0, 5, 30]),
       crash=s.sets(s.integers(2, 30), max_size=3))
def test_random_fleets_drain_within_their_budgets(
    nodes: int, pods: int, per: int, budget: int, parallel: int, grace: int, crash: set[int]
) -> None:
    driver = {**DRIVER, "upgradePolicy": {**DRIVER["upgradePolicy"], "maxParallel": parallel,
                                          "maxUnavailable": 0}}
    worst: dict[str, int] = {}
    sim: Simulation | None = None

    def observe(*_: Any) -> None:
        assert sim is not None and sim.serving is not None
        for key, down in sim.serving.down.items():
            worst[key] = max(worst.get(key, 0), down)

    config = SimConfig(
        nodes=nodes, from_version="2.32.0.6", install_seconds=60,
        settings=PlannerSettings(drain=DrainSettings()),
        serving=ServingModel(pods, per, budget, float(grace), 10.0),
        crash_calls=frozenset(crash), verify_idempotent=not crash, observer=observe,
    )
    sim = Simulation(driver, config)
    result = sim.run()
    assert result.completed, result.stop_reason
    assert result.drain is not None
    assert result.drain["evictions"]["refused"] == 0
    assert all(down <= budget for down in worst.values())
    # every node that held a pod was drained, and none holds one now
    assert all(not n.pods for n in sim.nodes.values())
