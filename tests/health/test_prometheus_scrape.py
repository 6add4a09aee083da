"""A real Prometheus server scraping the MX Exporter stand-in of a fleet on the real control
plane: what a health check's query sees before, during and after a driver version change."""

from __future__ import annotations

import pytest

from reconciler.kube.api import KubeApi
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.operator_install import DEFAULT_PAYLOAD
from reconciler.sim.waiting import wait_for
from tests.conftest import FleetFactory
from tests.health.conftest import PrometheusFactory, value
from tests.sim.test_fleet import NEW, replace_driver_pod, set_template_image

pytestmark = pytest.mark.cluster

OLD_DRIVER = DEFAULT_PAYLOAD.version  # as the exporter reports it: no arch suffix
NEW_DRIVER = NEW.version


def test_prometheus_sees_every_gpu_of_every_node_with_its_driver_and_workload(
    fleet_factory: FleetFactory, prometheus_for: PrometheusFactory
) -> None:
    fleet = fleet_factory(nodes=3)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 3, timeout=60,
             what="3 Ready driver pods", observe=fleet.driver_pods)
    job = fleet.add_workload("node-0001", gpus=2)
    prometheus = prometheus_for(fleet)

    wait_for(lambda: value(prometheus, f'count(mx_gpu_state{{exported_pod="{job}"}})') == 2,
             timeout=30, what="the job's 2 GPUs in Prometheus",
             observe=lambda: prometheus.query('mx_gpu_state{Hostname="node-0001"}'))
    assert value(prometheus, 'min(mx_gpu_state{Hostname="node-0001"})') == 1
    assert value(prometheus, 'count(mx_gpu_state)') == 24
    per_node = prometheus.query("count by (Hostname, driver_version, bios_version, modelName) "
                                "(mx_clk_thr == 0)")
    assert sorted((r["metric"]["Hostname"], r["metric"]["driver_version"],
                   r["metric"]["bios_version"], r["metric"]["modelName"], r["value"][1])
                  for r in per_node) == [
        (f"node-000{i}", OLD_DRIVER, "1.12.0.0", "MXC500", "8") for i in (1, 2, 3)]
    used = prometheus.query(f'mx_gpu_usage{{exported_pod="{job}"}}')
    assert {r["metric"]["exported_namespace"] for r in used} == {"gpu-workloads"}
    assert {r["metric"]["exported_container"] for r in used} == {"train"}
    assert all(float(r["value"][1]) > 0 for r in used)


def test_gpu_faults_for_the_new_version_reach_prometheus_once_the_node_runs_it(
    fleet_factory: FleetFactory, prometheus_for: PrometheusFactory, kube: KubeApi
) -> None:
    fleet = fleet_factory(nodes=3, faults=[
        Fault("node-0002", FaultKind.GPU_UNAVAILABLE, version=NEW_DRIVER),
        Fault("node-0003", FaultKind.GPU_THROTTLING, version=NEW_DRIVER),
    ])
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 3, timeout=60,
             what="3 Ready driver pods", observe=fleet.driver_pods)
    prometheus = prometheus_for(fleet)
    wait_for(lambda: value(prometheus, "count(mx_gpu_state)") == 24, timeout=30,
             what="24 GPUs scraped", observe=lambda: prometheus.query("up"))
    assert value(prometheus, 'min(mx_gpu_state{Hostname="node-0002"})') == 1
    assert value(prometheus, 'max(mx_clk_thr{Hostname="node-0003"})') == 0

    set_template_image(kube, NEW.image)
    for node in ("node-0002", "node-0003"):
        replace_driver_pod(kube, node)
    wait_for(lambda: fleet.ready_driver_nodes(NEW_DRIVER) == ["node-0002", "node-0003"],
             timeout=30, what="nodes 2 and 3 Ready on the new version", observe=fleet.driver_pods)

    def driver_of(node: str) -> set[str]:
        found = prometheus.query(f'mx_gpu_state{{Hostname="{node}"}}')
        return {r["metric"]["driver_version"] for r in found}

    wait_for(lambda: driver_of("node-0002") == driver_of("node-0003") == {NEW_DRIVER},
             timeout=20, what="the new driver_version on nodes 2 and 3",
             observe=lambda: (driver_of("node-0002"), driver_of("node-0003")))
    # The pods are Ready, the GPUs are not all well.
    assert value(prometheus, 'min(mx_gpu_state{Hostname="node-0002"})') == 0
    assert value(prometheus, 'count(mx_gpu_state{Hostname="node-0002"} == 0)') == 2
    throttling = value(prometheus, 'max(mx_clk_thr{Hostname="node-0003"})')
    assert throttling is not None and throttling > 0
    assert value(prometheus, 'min(mx_gpu_state{Hostname="node-0003"})') == 1
    assert value(prometheus, 'max(mx_clk_thr{Hostname="node-0002"})') == 0
    # The node left alone is unchanged.
    assert driver_of("node-0001") == {OLD_DRIVER}
    assert value(prometheus, 'min(mx_gpu_state{Hostname="node-0001"})') == 1
