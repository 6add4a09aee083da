"""The MX Exporter stand-in's text, from fleet state built by hand (no cluster):
docs/dev-cluster.md#prometheus-and-the-mx-exporter-metrics's metric and label names, who exports
nothing, the GPU faults and workload labels, and the endpoint."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from reconciler.sim.faults import GPU_FAULTS, POD_FAULTS, Fault, FaultKind, parse_faults
from reconciler.sim.fleet import SimNode, SimPod
from reconciler.sim.mx_exporter import METRICS, MxExporter, NodeTelemetry, fleet_telemetry

OLD, NEW = "2.31.0.6-amd64", "2.33.0.9-amd64"
SPEC_LABELS = {"deviceId", "uuid", "Hostname", "driver_version", "bios_version", "modelName"}


def node(name: str, *, faults: Iterable[Fault] = (), gpu: bool = True, ready: bool = True,
         rebooting: bool = False, vbios: str = "1.12.0.0") -> SimNode:
    return SimNode(name=name, index=int(name[-4:]), gpu=gpu, vbios=vbios, rebooting=rebooting,
                   labels={"metax-tech.com/gpu.product": "MXC500"}, reported_ready=ready,
                   faults=list(faults))


def pod(node_name: str, version: str | None = OLD, *, driver: bool = True, ready: bool = True,
        deleting: bool = False, name: str | None = None, created: str = "2026-01-01T00:00:00Z",
        gpus: dict[str, int] | None = None) -> SimPod:
    name = name or f"metax-driver-{node_name}"
    return SimPod(uid=f"uid-{name}", namespace="metax-operator" if driver else "gpu-workloads",
                  name=name, node=node_name, driver=driver, version=version if driver else None,
                  revision=None, containers=list(gpus or {"driver": 0}), images={},
                  created=created, ready=ready, deleting=deleting, gpu_requests=dict(gpus or {}))


def samples(nodes: list[SimNode], pods: list[SimPod], **options: int) -> dict[str, list[Sample]]:
    """Parsed exposition: samples per metric family."""
    exporter = MxExporter(lambda: fleet_telemetry(nodes, pods, **options))
    text = exporter.render().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def by_device(found: dict[str, list[Sample]], metric: str, host: str) -> dict[str, float]:
    return {s.labels["deviceId"]: s.value for s in found[metric] if s.labels["Hostname"] == host}


def test_a_node_with_a_ready_driver_exports_every_spec_metric_for_each_of_its_8_gpus() -> None:
    found = samples([node("node-0001", vbios="1.13.0.0")], [pod("node-0001")])
    assert list(found) == [name for name, _ in METRICS]
    for family in found.values():
        assert len(family) == 8
        for sample in family:
            assert set(sample.labels) == SPEC_LABELS
            assert sample.labels["Hostname"] == "node-0001"
            assert sample.labels["driver_version"] == "2.31.0.6"  # the driver's, no arch suffix
            assert sample.labels["bios_version"] == "1.13.0.0"
            assert sample.labels["modelName"] == "MXC500"
    assert by_device(found, "mx_gpu_state", "node-0001") == {str(d): 1.0 for d in range(8)}
    assert set(by_device(found, "mx_clk_thr", "node-0001").values()) == {0.0}
    assert len({s.labels["uuid"] for s in found["mx_gpu_state"]}) == 8


def test_nodes_whose_exporter_cannot_run_export_nothing() -> None:
    nodes = [node("node-0001"), node("node-0002"), node("node-0003"), node("node-0004"),
             node("node-0005", rebooting=True), node("node-0006", ready=False),
             node("node-0007", gpu=False), node("node-0008")]
    pods = [pod("node-0001"),
            pod("node-0002", ready=False),  # installing or crash-looping
            pod("node-0003", deleting=True),  # being replaced
            pod("node-0005"), pod("node-0006"), pod("node-0007")]
    # node-0004: no driver pod at all; node-0008: only a workload
    pods.append(pod("node-0008", driver=False, name="job", gpus={"train": 8}))
    found = samples(nodes, pods)
    assert {s.labels["Hostname"] for s in found["mx_gpu_state"]} == {"node-0001"}


def test_gpu_faults_apply_only_while_the_node_runs_their_version() -> None:
    faults = [Fault("node-0001", FaultKind.GPU_UNAVAILABLE, "2.33.0.9"),
              Fault("node-0002", FaultKind.GPU_THROTTLING, "2.33.0.9")]
    nodes = [node("node-0001", faults=faults[:1]), node("node-0002", faults=faults[1:])]

    before = samples(nodes, [pod("node-0001", OLD), pod("node-0002", OLD)])
    assert set(by_device(before, "mx_gpu_state", "node-0001").values()) == {1.0}
    assert set(by_device(before, "mx_clk_thr", "node-0002").values()) == {0.0}

    after = samples(nodes, [pod("node-0001", NEW), pod("node-0002", NEW)])
    state = by_device(after, "mx_gpu_state", "node-0001")
    assert [d for d, v in sorted(state.items()) if v == 0.0] == ["0", "1"]  # 2 of 8 by default
    assert set(by_device(after, "mx_clk_thr", "node-0001").values()) == {0.0}
    throttled = by_device(after, "mx_clk_thr", "node-0002")
    assert sorted(d for d, v in throttled.items() if v > 0) == ["0", "1"]
    assert set(by_device(after, "mx_gpu_state", "node-0002").values()) == {1.0}  # still available
    assert {s.labels["driver_version"] for s in after["mx_gpu_state"]} == {"2.33.0.9"}


def test_an_unversioned_gpu_fault_applies_on_every_version_to_as_many_gpus_as_configured() -> None:
    nodes = [node("node-0001", faults=[Fault("node-0001", FaultKind.GPU_UNAVAILABLE)])]
    for version in (OLD, NEW):
        found = samples(nodes, [pod("node-0001", version)], faulty_gpus=5)
        state = by_device(found, "mx_gpu_state", "node-0001")
        assert sum(1 for v in state.values() if v == 0.0) == 5
    found = samples(nodes, [pod("node-0001")], faulty_gpus=99)
    assert set(by_device(found, "mx_gpu_state", "node-0001").values()) == {0.0}


def test_gpus_in_use_carry_the_workload_pod_namespace_and_container() -> None:
    pods = [pod("node-0001"),
            pod("node-0001", driver=False, name="eval", created="2026-01-01T00:00:02Z",
                gpus={"eval": 1}),
            pod("node-0001", driver=False, name="train", created="2026-01-01T00:00:01Z",
                gpus={"train": 2}),
            pod("node-0001", driver=False, name="web", gpus={})]  # no GPUs: not on any
    found = samples([node("node-0001")], pods)
    users = {s.labels["deviceId"]: (s.labels.get("namespace"), s.labels.get("pod"),
                                    s.labels.get("container"))
             for s in found["mx_gpu_state"]}
    assert users["0"] == users["1"] == ("gpu-workloads", "train", "train")
    assert users["2"] == ("gpu-workloads", "eval", "eval")
    assert all(users[str(d)] == (None, None, None) for d in range(3, 8))
    usage = by_device(found, "mx_gpu_usage", "node-0001")
    assert all(usage[str(d)] > 0 for d in range(3)) and usage["3"] == 0.0


def test_a_node_text_is_rendered_again_only_when_its_state_changed() -> None:
    state = [NodeTelemetry(f"node-{i:04d}", "2.31.0.6", "1.12.0.0") for i in range(1, 4)]
    exporter = MxExporter(lambda: state)
    first = exporter.render()
    assert exporter.rendered_nodes == 3
    assert exporter.render() == first and exporter.rendered_nodes == 3
    state[1] = NodeTelemetry("node-0002", "2.33.0.9", "1.12.0.0")
    changed = exporter.render().decode()
    assert exporter.rendered_nodes == 4
    assert 'Hostname="node-0002"' in changed and 'driver_version="2.33.0.9"' in changed
    del state[0]
    assert 'Hostname="node-0001"' not in exporter.render().decode()


def test_the_endpoint_serves_the_text_format_at_metrics_only() -> None:
    exporter = MxExporter(lambda: [NodeTelemetry("node-0001", "2.31.0.6", "1.12.0.0")]).start()
    try:
        with urllib.request.urlopen(exporter.url, timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            families = list(text_string_to_metric_families(response.read().decode()))
        assert len(families) == len(METRICS) and all(len(f.samples) == 8 for f in families)
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(exporter.url.replace("/metrics", "/other"), timeout=10)
        assert error.value.code == 404
    finally:
        exporter.stop()


def test_the_fault_file_names_the_gpu_faults_with_an_optional_version() -> None:
    faults = parse_faults({"faults": [
        {"node": "node-0001", "fault": "gpu-unavailable", "version": "2.33.0.9"},
        {"node": "node-0002", "fault": "gpu-throttling"},
    ]})
    assert faults == [Fault("node-0001", FaultKind.GPU_UNAVAILABLE, "2.33.0.9"),
                      Fault("node-0002", FaultKind.GPU_THROTTLING)]
    assert set(GPU_FAULTS) == {FaultKind.GPU_UNAVAILABLE, FaultKind.GPU_THROTTLING}
    assert not GPU_FAULTS & POD_FAULTS  # the driver pod turns Ready as usual
