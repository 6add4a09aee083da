"""``reconciler simulate --nodes-file`` with ``rollout.topology``
(docs/rollout.md#topology-aware-waves): the fleet's labels modelled, per-domain progress and waves,
and both orders shown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from reconciler.cli.main import cli

ZONE = "topology.kubernetes.io/zone"
POLICY = """driver:
  payload: {registry: reg.local/metax, name: driver-image, version: 2.33.0.9}
  upgradePolicy:
    enableRollout: true
    upgradeSteps:
      - {replicas: 2, pauseDuration: 0}
      - {replicas: "100%", pauseDuration: 0}
    maxParallel: 2
    maxUnavailable: "50%"
"""


def simulate(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, ["simulate", *map(str, args)], catch_exceptions=False)


def files(tmp_path: Path, topology: str | None = "order: sequential") -> list[str | Path]:
    (tmp_path / "policy.yaml").write_text(POLICY, encoding="utf-8")
    nodes = "nodes:\n" + "".join(
        f"  - name: gpu-{i:02d}\n    labels: {{{ZONE}: zone-{(i - 1) // 4 + 1}}}\n"
        for i in range(1, 13))
    (tmp_path / "nodes.yaml").write_text(nodes, encoding="utf-8")
    args: list[str | Path] = [tmp_path / "policy.yaml", "--nodes-file", tmp_path / "nodes.yaml",
                              "--from-version", "2.32.0.6"]
    if topology is not None:
        (tmp_path / "reconciler.yaml").write_text(
            f"rollout:\n  topology:\n    key: {ZONE}\n    {topology}\n", encoding="utf-8")
        args += ["--repo-config", tmp_path / "reconciler.yaml"]
    return args


def as_json(*args: str | Path) -> dict[str, Any]:
    result = simulate(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_sequential_finishes_each_zone_before_the_next_and_shows_spread_beside_it(
        tmp_path: Path) -> None:
    out = as_json(*files(tmp_path, "order: sequential\n    maxUnavailablePerDomain: 1"))
    assert out["completed"] is True
    assert out["final"]["topology"] == {"key": ZONE, "order": "sequential",
                                        "maxUnavailablePerDomain": 1}
    report = out["topology"]
    domains = report["domains"]
    assert [d["domain"] for d in domains] == ["zone-1", "zone-2", "zone-3"]
    # one node at a time per zone, 60 s each: a zone takes 4 waves, and the next one starts
    # when it is done
    assert [(d["nodes"], d["upgraded"], d["waves"], d["first_start"], d["last_ready"])
            for d in domains] == [(4, 4, 4, 0, 240), (4, 4, 4, 240, 480), (4, 4, 4, 480, 720)]
    assert out["duration_seconds"] == 720
    other = report["other_order"]
    assert other["order"] == "spread" and other["completed"] is True
    # spread: every zone from the start, maxParallel 2 in flight at a time
    assert all(d["upgraded"] == 4 for d in other["domains"])
    assert other["domains"][0]["first_start"] == 0 and other["domains"][1]["first_start"] == 0
    assert other["duration_seconds"] == 360
    text = simulate(*files(tmp_path, "order: sequential\n    maxUnavailablePerDomain: 1"))
    assert text.exit_code == 0
    assert "topology topology.kubernetes.io/zone, order sequential, maxUnavailablePerDomain 1:" \
        in text.stdout
    assert "the same fleet with order spread: completes after 0:06:00 (360 s)" in text.stdout
    starts = [e["node"] for e in out["events"] if e["type"] == "NodeUpgradeStarted"]
    assert starts == [f"gpu-{i:02d}" for i in range(1, 13)]


def test_without_topology_the_output_has_no_topology_part(tmp_path: Path) -> None:
    out = as_json(*files(tmp_path, None))
    assert "topology" not in out and "topology" not in out["final"]
    assert [n["name"] for n in out["nodes"]] == [f"gpu-{i:02d}" for i in range(1, 13)]


def test_kubectl_get_nodes_output_is_a_nodes_file_and_faults_name_its_nodes(
        tmp_path: Path) -> None:
    args = files(tmp_path, "order: spread")
    listing = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": f"gpu-{i:02d}", "labels": {ZONE: f"zone-{(i - 1) // 4 + 1}",
                                               "kubernetes.io/os": "linux"}},
         "status": {"conditions": []}} for i in range(1, 13)]}
    (tmp_path / "nodes.json").write_text(json.dumps(listing), encoding="utf-8")
    args[2] = tmp_path / "nodes.json"
    (tmp_path / "faults.yaml").write_text("faults:\n  - {node: gpu-05, fault: imagepull}\n",
                                          encoding="utf-8")
    result = simulate(*args, "--faults", tmp_path / "faults.yaml", "--format", "json")
    out = json.loads(result.stdout)
    # spread: zone-1, zone-2 first; gpu-05 (zone-2's first) fails at once and is retried
    starts = [e["node"] for e in out["events"] if e["type"] == "NodeUpgradeStarted"]
    assert starts[:2] == ["gpu-01", "gpu-05"]
    assert any(e["type"] == "NodeFailed" and e["node"] == "gpu-05" for e in out["events"])
    assert out["topology"]["order"] == "spread"


def test_a_bad_nodes_file_is_located_and_exits_2(tmp_path: Path) -> None:
    args = files(tmp_path)
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("nodes:\n  - name: a\n    labels: {gpu.metax-tech.com/canary: true}\n",
                     encoding="utf-8")
    result = simulate(*args)
    assert result.exit_code == 2
    assert f"{nodes}:3:" in result.output and "expected a string" in result.output
    nodes.write_text("nodes:\n  - {name: a}\n  - {name: a}\n", encoding="utf-8")
    result = simulate(*args)
    assert result.exit_code == 2 and "node a is listed twice" in result.output
    result = simulate(*args, "--nodes", "3")
    assert result.exit_code == 2 and "one of them" in result.output
    (tmp_path / "faults.yaml").write_text("faults:\n  - {node: node-0001, fault: imagepull}\n",
                                          encoding="utf-8")
    nodes.write_text("nodes:\n  - {name: a}\n", encoding="utf-8")
    result = simulate(*args, "--faults", tmp_path / "faults.yaml")
    assert result.exit_code == 2 and "no node named 'node-0001'" in result.output
