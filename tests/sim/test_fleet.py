"""The simulated GPU fleet against the real control plane: node registration, driver pod
lifecycle, every fault kind, workloads, deletion, nodes joining and leaving, firmware events and
reboots."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from reconciler.kube.api import KubeApi, NotFound, resource_path
from reconciler.kube.watch import ListWatch
from reconciler.names import (
    API_VERSION,
    CLUSTER_OPERATOR_NAME,
    DRIVER_DAEMONSET,
    GPU_RESOURCE,
    NODE_NEED_REBOOT_MESSAGE,
    NOT_READY_TAINT,
    OPERATOR_NAMESPACE,
    PLURAL,
    REBOOT_REQUESTED_ANNOTATION,
    REBOOTED_ANNOTATION,
    REVISION_HASH_LABEL,
    VBIOS_VERSION_LABEL,
)
from reconciler.policy.payload import Payload
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.fleet import FLEET_LABEL, LEASE_NAMESPACE, WORKLOAD_NAMESPACE, Fleet, lease_path
from reconciler.sim.operator_install import (
    DEFAULT_PAYLOAD,
    FINALIZER,
    cluster_operator,
    merge_patch,
    release_finalizer,
    rendered_object,
)
from reconciler.sim.waiting import wait_for
from tests.conftest import FleetFactory

pytestmark = pytest.mark.cluster

NODES = resource_path("v1", "nodes")
DRIVER_PODS = resource_path("v1", "pods", namespace=OPERATOR_NAMESPACE)
DAEMONSET = resource_path("apps/v1", "daemonsets", DRIVER_DAEMONSET, namespace=OPERATOR_NAMESPACE)
CO = resource_path(API_VERSION, PLURAL, CLUSTER_OPERATOR_NAME)
NEW = Payload(DEFAULT_PAYLOAD.registry, DEFAULT_PAYLOAD.name, "2.40.0.1")


def ready_condition(node: dict[str, Any]) -> str:
    conditions = node.get("status", {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), "Unknown")


def pod_on(kube: KubeApi, node: str) -> dict[str, Any] | None:
    pods = kube.list(DRIVER_PODS, query={"fieldSelector": f"spec.nodeName={node}"})["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return live[0] if live else None


def container_state(pod: dict[str, Any]) -> tuple[str, bool, str | None, int]:
    """(phase, ready, waiting reason, restartCount) of the pod's first container."""
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    state = statuses[0].get("state") or {}
    return (pod.get("status", {}).get("phase", ""), bool(statuses[0].get("ready")),
            (state.get("waiting") or {}).get("reason"), int(statuses[0].get("restartCount", 0)))


def set_template_image(kube: KubeApi, image: str) -> None:
    """What the rollout controller does when a rollout starts (the simulator never does it)."""
    kube.patch(DAEMONSET, {"spec": {"template": {"spec": {"containers": [
        {"name": "driver", "image": image}]}}}}, patch_type="strategic")


def replace_driver_pod(kube: KubeApi, node: str) -> None:
    pod = pod_on(kube, node)
    assert pod is not None, f"no driver pod on {node}"
    kube.delete(resource_path("v1", "pods", pod["metadata"]["name"], namespace=OPERATOR_NAMESPACE))
    wait_for(lambda: (p := pod_on(kube, node)) is not None
             and p["metadata"]["uid"] != pod["metadata"]["uid"],
             timeout=30, what=f"a new driver pod on {node}")


@contextmanager
def recording(kube: KubeApi, path: str, query: dict[str, str] | None = None
              ) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    lock = threading.Lock()

    def record(event_type: str, obj: dict[str, Any]) -> None:
        with lock:
            events.append((event_type, obj))

    watch = ListWatch(kube, path, on_event=record, query=query, name="test recorder").start()
    assert watch.wait_synced(10)
    try:
        yield events
    finally:
        watch.stop()


# -- registration ---------------------------------------------------------------------------


def test_nodes_register_as_ready_schedulable_gpu_nodes(fleet: Fleet, kube: KubeApi) -> None:
    nodes = kube.list(NODES, query={"labelSelector": f"{FLEET_LABEL}=default"})["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == [f"node-{i:04d}" for i in range(1, 11)]
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels["metax-tech.com/gpu.installed"] == "true"
        assert labels["metax-tech.com/gpu.product"] == "MXC500"
        assert labels["metax-tech.com/gpu.sriov"] == "forbidden"
        assert {labels[f"metax-tech.com/gpu.driver.{p}"] for p in ("major", "minor", "patch")} \
            <= {"2", "31", "0"}
        assert labels["metax-tech.com/driver.ready"] == "true"
        assert labels["metax-tech.com/runtime.ready"] == "true"
        assert labels["metax-tech.com/gpu.driver.mode"] == "cloud"
        assert labels[VBIOS_VERSION_LABEL] == "1.12.0.0"
        assert node["status"]["allocatable"][GPU_RESOURCE] == "8"
        assert ready_condition(node) == "True"
        assert NOT_READY_TAINT not in {t["key"] for t in node["spec"].get("taints") or []}
        assert node["status"]["nodeInfo"]["bootID"]


@pytest.mark.compat
def test_nodes_report_the_api_servers_release_as_their_kubelet_version(
        fleet: Fleet, kube: KubeApi) -> None:
    server = kube.get("/version")["gitVersion"]
    assert re.fullmatch(r"v1\.\d+\.\d+", server)
    nodes = kube.list(NODES, query={"labelSelector": f"{FLEET_LABEL}=default"})["items"]
    assert {n["status"]["nodeInfo"]["kubeletVersion"] for n in nodes} == {server}
    # Current kubelets no longer report a kube-proxy version (the server shows the field empty);
    # 1.20's did.
    proxy = {n["status"]["nodeInfo"].get("kubeProxyVersion") or "" for n in nodes}
    assert proxy == ({""} if int(server.split(".")[1]) >= 31 else {server})


def test_operator_install_creates_the_vendor_objects(fleet: Fleet, kube: KubeApi) -> None:
    daemonset = kube.get(DAEMONSET)
    assert daemonset["spec"]["updateStrategy"]["type"] == "OnDelete"
    assert daemonset["spec"]["template"]["spec"]["nodeSelector"] == {
        "metax-tech.com/gpu.installed": "true", "metax-tech.com/runtime.ready": "true"}
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == \
        DEFAULT_PAYLOAD.image
    co = kube.get(CO)
    assert co["spec"]["driver"]["payload"]["version"] == DEFAULT_PAYLOAD.version
    assert co["spec"]["driver"]["fwUpgradePolicy"] == "Never"


def test_the_cluster_operator_is_the_vendor_chart_0_15_2_install(fleet: Fleet,
                                                                 kube: KubeApi) -> None:
    """docs/dev-cluster.md#what-the-vendor-operators-install-looks-like: the chart's finalizer,
    labels and Helm's annotations, and the whole spec the chart renders with its default values
    (every section the vendor's CRD requires) with the simulator's payload; what the API server
    stored is what was sent, plus the CRD's defaults."""
    co = kube.get(CO)
    meta = co["metadata"]
    assert meta["finalizers"] == ["gpu.metax-tech.com/finalizers"] == [FINALIZER]
    assert meta["labels"] == {
        "app.kubernetes.io/component": "metax-operator",
        "app.kubernetes.io/instance": "metax-operator",
        "app.kubernetes.io/managed-by": "Helm",
        "app.kubernetes.io/name": "metax-operator",
        "app.kubernetes.io/version": "0.15.2",
        "helm.sh/chart": "metax-operator-0.15.2",
    }
    assert meta["annotations"] == {"meta.helm.sh/release-name": "metax-operator",
                                   "meta.helm.sh/release-namespace": "metax-operator"}
    assert "namespace" not in meta, "cluster-scoped"
    sent = cluster_operator(DEFAULT_PAYLOAD)["spec"]
    assert merge_patch(co["spec"], sent) == co["spec"], "every field sent is stored as sent"
    assert set(co["spec"]) >= {"dataExporter", "devicePlugin", "driver", "gpuScheduler",
                               "labelgen", "maca", "openshift", "runtime", "topoDiscovery"}
    assert "vfioManager" not in co["spec"], "not a section of the vendor's CRD"
    driver = co["spec"]["driver"]
    assert driver["upgradePolicy"] == {
        "enableRollout": False, "fallback": "pause", "maxFailureThreshold": 5,
        "maxParallel": "100%", "maxUnavailable": "0%", "pause": False,
        "upgradeSteps": [{"replicas": 1, "pauseDuration": 30000},
                         {"replicas": "100%", "pauseDuration": 0}]}
    assert {k: driver[k] for k in ("deployPolicy", "fwEffectPolicy", "fwEnableVirt",
                                   "fwUpgradePolicy", "deviceAsRootGroup")} == {
        "deployPolicy": "PreferCloud", "fwEffectPolicy": "NextReboot", "fwEnableVirt": False,
        "fwUpgradePolicy": "Never", "deviceAsRootGroup": False}
    assert driver["payload"] == {"name": "driver-image", "pullPolicy": "IfNotPresent",
                                 "registry": DEFAULT_PAYLOAD.registry,
                                 "version": DEFAULT_PAYLOAD.version}
    assert driver["image"] == {"name": "metax/driver-manager", "pullPolicy": "IfNotPresent",
                               "registry": "release.daocloud.io", "version": "0.15.2"}
    assert driver["log"] == {"dir": "/var/log/metax", "format": "json", "level": "info",
                             "maxAge": "26w", "rotationTime": "1w"}


def test_the_vendor_chart_payload_names_its_image_and_the_fleet_reads_its_version(
    fleet_factory: FleetFactory, kube: KubeApi
) -> None:
    """The chart's own payload (``metax/driver-image``, ``3.2.1.12-amd64``) names the image
    ``<registry>/metax/driver-image:3.2.1.12-amd64``; the DaemonSet runs it, the nodes report
    driver 3.2.1 on it, and the same version without its arch suffix names the same image."""
    vendor = rendered_object()["spec"]["driver"]["payload"]
    payload = Payload(vendor["registry"], vendor["name"], vendor["version"])
    assert payload.image == "release.daocloud.io/metax/driver-image:3.2.1.12-amd64"
    assert payload.same_image(Payload(payload.registry, payload.name, "3.2.1.12"))
    fleet = fleet_factory(nodes=2, payload=payload)
    wait_for(lambda: len(fleet.ready_driver_nodes("3.2.1.12")) == 2, timeout=60,
             what="2 driver pods Ready on 3.2.1.12", observe=fleet.driver_pods)
    daemonset = kube.get(DAEMONSET)
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == payload.image
    assert kube.get(CO)["spec"]["driver"]["payload"] == {
        "name": "metax/driver-image", "pullPolicy": "IfNotPresent",
        "registry": "release.daocloud.io", "version": "3.2.1.12-amd64"}
    labels = kube.get(f"{NODES}/node-0001")["metadata"]["labels"]
    assert {k: labels[k] for k in ("metax-tech.com/gpu.driver.major",
                                   "metax-tech.com/gpu.driver.minor",
                                   "metax-tech.com/gpu.driver.patch")} == {
        "metax-tech.com/gpu.driver.major": "3", "metax-tech.com/gpu.driver.minor": "2",
        "metax-tech.com/gpu.driver.patch": "1"}


def test_deleting_the_cluster_operator_completes_the_stand_in_removes_the_finalizer(
    fleet: Fleet, kube: KubeApi
) -> None:
    with recording(kube, resource_path(API_VERSION, PLURAL)) as events:
        kube.delete(CO)
        wait_for(lambda: any(kind == "DELETED" for kind, _ in events), timeout=20,
                 what="the ClusterOperator deleted",
                 observe=lambda: [(k, o["metadata"].get("finalizers")) for k, o in events])
    # the finalizer held the object until the stand-in took it off
    held = [o for kind, o in events if kind == "MODIFIED"
            and o["metadata"].get("deletionTimestamp")
            and o["metadata"].get("finalizers") == [FINALIZER]]
    assert held, [(k, o["metadata"].get("finalizers")) for k, o in events]
    with pytest.raises(NotFound):
        kube.get(CO)


def test_the_stand_in_takes_off_only_the_vendor_finalizer_of_an_object_being_deleted(
    fleet_factory: FleetFactory, kube: KubeApi
) -> None:
    fleet_factory(nodes=1)
    kube.patch(CO, {"metadata": {"finalizers": ["example.com/backup", FINALIZER]}})
    assert release_finalizer(kube) is False, "not being deleted: nothing to release"
    assert kube.get(CO)["metadata"]["finalizers"] == ["example.com/backup", FINALIZER]
    kube.delete(CO)
    try:
        held = wait_for(lambda: (o := kube.get(CO))["metadata"].get("finalizers")
                        == ["example.com/backup"] and o, timeout=20,
                        what="only the other finalizer left",
                        observe=lambda: kube.get(CO)["metadata"].get("finalizers"))
        assert held["metadata"]["deletionTimestamp"], "still being deleted, held by the other"
    finally:
        kube.patch(CO, {"metadata": {"finalizers": None}})
    wait_for(lambda: not kube.list(resource_path(API_VERSION, PLURAL))["items"], timeout=20,
             what="the ClusterOperator gone")


def test_stopping_a_fleet_with_cleanup_deletes_its_cluster_operator(kube: KubeApi) -> None:
    fleet = Fleet(kube, nodes=1, install_seconds=0.1).start()
    try:
        assert kube.get(CO)["metadata"]["finalizers"] == [FINALIZER]
    finally:
        fleet.stop(cleanup=True, timeout=60)
    with pytest.raises(NotFound):
        kube.get(CO)


# -- driver pod lifecycle ---------------------------------------------------------------------


def test_driver_pod_goes_pending_running_ready_on_the_current_revision(
    fleet_factory: FleetFactory, kube: KubeApi
) -> None:
    with recording(kube, DRIVER_PODS) as events:
        fleet = fleet_factory(nodes=2, install_seconds=1.5, pull_seconds=0.3)
        wait_for(lambda: len(fleet.ready_driver_nodes()) == 2, timeout=30, what="2 Ready drivers",
                 observe=fleet.driver_pods)
        name = fleet.driver_pods()["node-0001"].name
        # the fleet counts a pod Ready as it sends the status; the recorder sees it a moment later
        wait_for(lambda: any(pod["metadata"]["name"] == name and container_state(pod)[1]
                             for _, pod in list(events)),
                 timeout=10, what="the Ready status recorded")
    states = []
    for _, pod in events:
        if pod["metadata"]["name"] == name:
            phase, ready, _, _ = container_state(pod)
            if not states or states[-1] != (phase, ready):
                states.append((phase, ready))
    assert states[0] == ("Pending", False)
    assert states[-1] == ("Running", True)
    assert ("Running", False) in states
    assert states.index(("Running", False)) < states.index(("Running", True))

    revisions = kube.list(resource_path("apps/v1", "controllerrevisions",
                                        namespace=OPERATOR_NAMESPACE))["items"]
    current = max(revisions, key=lambda r: r["revision"])["metadata"]["labels"][REVISION_HASH_LABEL]
    pod = pod_on(kube, "node-0001")
    assert pod is not None and pod["metadata"]["labels"][REVISION_HASH_LABEL] == current
    assert fleet.driver_pods()["node-0001"].revision == current


def test_image_pull_fault(fleet_factory: FleetFactory, kube: KubeApi) -> None:
    fleet = fleet_factory(nodes=3, crash_seconds=0.3,
                          faults=[Fault("node-0002", FaultKind.IMAGE_PULL)])
    wait_for(lambda: fleet.ready_driver_nodes() == ["node-0001", "node-0003"], timeout=30,
             what="the healthy nodes Ready", observe=fleet.driver_pods)
    reasons: set[str | None] = set()

    def both_reasons_seen() -> bool:
        pod = pod_on(kube, "node-0002")
        if pod is not None:
            phase, ready, reason, _ = container_state(pod)
            assert phase == "Pending" and not ready
            reasons.add(reason)
        return {"ErrImagePull", "ImagePullBackOff"} <= reasons

    wait_for(both_reasons_seen, timeout=20, what="ErrImagePull then ImagePullBackOff",
             observe=lambda: reasons)


def test_crash_loop_fault_restart_count_grows(fleet_factory: FleetFactory, kube: KubeApi) -> None:
    fleet = fleet_factory(nodes=2, crash_seconds=0.2,
                          faults=[Fault("node-0001", FaultKind.CRASH_LOOP)])

    def crashing_twice() -> bool:
        pod = pod_on(kube, "node-0001")
        if pod is None:
            return False
        phase, ready, reason, restarts = container_state(pod)
        return phase == "Running" and not ready and reason == "CrashLoopBackOff" and restarts >= 2

    wait_for(crashing_twice, timeout=30, what="CrashLoopBackOff with restartCount >= 2",
             observe=lambda: pod_on(kube, "node-0001"))
    assert fleet.ready_driver_nodes() == ["node-0002"]


def test_never_ready_fault(fleet_factory: FleetFactory, kube: KubeApi) -> None:
    fleet = fleet_factory(nodes=2, install_seconds=0.2,
                          faults=[Fault("node-0002", FaultKind.NEVER_READY)])
    wait_for(lambda: fleet.ready_driver_nodes() == ["node-0001"], timeout=30,
             what="node-0001 Ready", observe=fleet.driver_pods)
    # Ten install times later node-0002's driver runs but is still not Ready.
    threading.Event().wait(2.0)
    pod = pod_on(kube, "node-0002")
    assert pod is not None
    assert container_state(pod) == ("Running", False, None, 0)


def test_node_notready_fault_at_start_and_at_run_time(
    fleet_factory: FleetFactory, kube: KubeApi
) -> None:
    fleet = fleet_factory(nodes=3, faults=[Fault("node-0001", FaultKind.NODE_NOT_READY)])
    wait_for(lambda: fleet.ready_driver_nodes() == ["node-0002", "node-0003"], timeout=30,
             what="the Ready nodes' drivers", observe=fleet.driver_pods)
    node = kube.get(f"{NODES}/node-0001")
    assert ready_condition(node) == "False"
    assert NOT_READY_TAINT in {t["key"] for t in node["spec"]["taints"]}
    assert pod_on(kube, "node-0001") is None  # the DaemonSet does not tolerate not-ready

    fleet.set_fault("node-0002", FaultKind.NODE_NOT_READY)
    wait_for(lambda: ready_condition(kube.get(f"{NODES}/node-0002")) == "False", timeout=20,
             what="node-0002 NotReady")
    fleet.clear_faults("node-0001")
    wait_for(lambda: fleet.ready_driver_nodes() == ["node-0001", "node-0003"], timeout=30,
             what="node-0001 back with a Ready driver", observe=fleet.driver_pods)
    node = kube.get(f"{NODES}/node-0001")
    assert ready_condition(node) == "True"
    assert NOT_READY_TAINT not in {t["key"] for t in node["spec"].get("taints") or []}


def test_faults_tied_to_a_version_disappear_on_another_version(
    fleet_factory: FleetFactory, kube: KubeApi
) -> None:
    fleet = fleet_factory(nodes=3, crash_seconds=0.2, faults=[
        Fault("node-0002", FaultKind.CRASH_LOOP, version=NEW.version),
        Fault("node-0003", FaultKind.NODE_NOT_READY, version=f"{NEW.version}-amd64"),
    ])
    wait_for(lambda: len(fleet.ready_driver_nodes(DEFAULT_PAYLOAD.version)) == 3, timeout=30,
             what="all Ready on the old version", observe=fleet.driver_pods)

    set_template_image(kube, NEW.image)
    for node in ("node-0001", "node-0002", "node-0003"):
        replace_driver_pod(kube, node)
    wait_for(lambda: fleet.ready_driver_nodes(NEW.version) == ["node-0001"], timeout=30,
             what="node-0001 Ready on the new version", observe=fleet.driver_pods)
    wait_for(lambda: (p := fleet.pod_view("node-0002")) is not None
             and p.waiting_reason == "CrashLoopBackOff", timeout=20,
             what="node-0002 crash-looping on the new version", observe=fleet.driver_pods)
    wait_for(lambda: ready_condition(kube.get(f"{NODES}/node-0003")) == "False", timeout=20,
             what="node-0003 NotReady on the new version")

    set_template_image(kube, DEFAULT_PAYLOAD.image)  # roll back
    for node in ("node-0002", "node-0003"):
        replace_driver_pod(kube, node)
    wait_for(lambda: fleet.ready_driver_nodes(DEFAULT_PAYLOAD.version) == ["node-0002",
                                                                          "node-0003"],
             timeout=30, what="nodes 2 and 3 Ready on the old version", observe=fleet.driver_pods)
    assert ready_condition(kube.get(f"{NODES}/node-0003")) == "True"


# -- workloads, deletion, nodes joining and leaving --------------------------------------------


def test_workload_pods_run_on_their_node_and_leave(fleet: Fleet, kube: KubeApi) -> None:
    name = fleet.add_workload("node-0004", gpus=8)
    pods = resource_path("v1", "pods", namespace=WORKLOAD_NAMESPACE)

    def running() -> bool:
        pod = kube.get(f"{pods}/{name}")
        return container_state(pod)[:2] == ("Running", True)

    wait_for(running, timeout=20, what="the GPU job Running and Ready")
    pod = kube.get(f"{pods}/{name}")
    assert pod["spec"]["nodeName"] == "node-0004"
    assert pod["spec"]["containers"][0]["resources"]["requests"][GPU_RESOURCE] == "8"

    fleet.remove_workload(name)  # graceful: the kubelet stand-in completes it

    def gone() -> bool:
        try:
            kube.get(f"{pods}/{name}")
            return False
        except NotFound:
            return True

    wait_for(gone, timeout=20, what="the GPU job deleted")


def test_graceful_deletion_completes_and_the_daemonset_replaces_the_pod(
    fleet_factory: FleetFactory, kube: KubeApi
) -> None:
    fleet = fleet_factory(nodes=2, termination_seconds=0.5)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 2, timeout=30, what="2 Ready drivers")
    old = pod_on(kube, "node-0001")
    assert old is not None
    # Default grace period (30 s): the simulated kubelet finishes it after termination_seconds.
    kube.delete(resource_path("v1", "pods", old["metadata"]["name"], namespace=OPERATOR_NAMESPACE))

    def replaced() -> bool:
        view = fleet.pod_view("node-0001")
        return view is not None and view.name != old["metadata"]["name"] and view.ready

    wait_for(replaced, timeout=20, what="a new Ready driver pod on node-0001",
             observe=fleet.driver_pods)
    with pytest.raises(NotFound):
        kube.get(resource_path("v1", "pods", old["metadata"]["name"],
                               namespace=OPERATOR_NAMESPACE))


def test_nodes_join_and_leave(fleet: Fleet, kube: KubeApi) -> None:
    name = fleet.add_node(labels={"gpu.metax-tech.com/canary": "true"})
    assert name == "node-0011"
    wait_for(lambda: "node-0011" in fleet.ready_driver_nodes(), timeout=30,
             what="the new node's driver Ready", observe=fleet.driver_pods)
    assert kube.get(f"{NODES}/node-0011")["metadata"]["labels"]["gpu.metax-tech.com/canary"] \
        == "true"

    fleet.remove_node("node-0011")
    with pytest.raises(NotFound):
        kube.get(f"{NODES}/node-0011")
    wait_for(lambda: pod_on(kube, "node-0011") is None, timeout=20,
             what="the removed node's pods gone")
    assert "node-0011" not in fleet.node_names


def test_non_gpu_nodes_get_no_driver(fleet: Fleet, kube: KubeApi) -> None:
    name = fleet.add_node("cpu-0001", gpu=False)
    node = kube.get(f"{NODES}/{name}")
    assert "metax-tech.com/gpu.installed" not in node["metadata"]["labels"]
    assert ready_condition(node) == "True"
    threading.Event().wait(1.0)
    assert pod_on(kube, name) is None


# -- firmware ---------------------------------------------------------------------------------


def _need_reboot_events(kube: KubeApi) -> dict[str, dict[str, Any]]:
    events = kube.list(resource_path("v1", "events", namespace="default"),
                       query={"fieldSelector": "reason=NodeNeedReboot"})["items"]
    return {e["involvedObject"]["name"]: e for e in events}


def test_firmware_upgrade_emits_node_need_reboot_and_reboots_apply_it(
    fleet_factory: FleetFactory, kube: KubeApi
) -> None:
    fleet = fleet_factory(
        nodes=4, firmware_seconds=(0.1, 0.5), reboot_seconds=1.0, install_seconds=0.2,
        faults=[Fault("node-0003", FaultKind.FIRMWARE_WRONG_VERSION),
                Fault("node-0004", FaultKind.FIRMWARE_NO_REPORT)],
    )
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=30, what="4 Ready drivers")
    kube.patch(resource_path(API_VERSION, PLURAL, CLUSTER_OPERATOR_NAME),
               {"spec": {"driver": {"fwUpgradePolicy": "PreferCloud"}}})
    events = wait_for(lambda: (e := _need_reboot_events(kube)) and len(e) >= 3 and e,
                      timeout=20, what="NodeNeedReboot on three nodes",
                      observe=lambda: sorted(_need_reboot_events(kube)))
    assert sorted(events) == ["node-0001", "node-0002", "node-0003"]
    for name, event in events.items():
        assert event["message"] == NODE_NEED_REBOOT_MESSAGE
        assert event["type"] == "Normal"
        assert event["involvedObject"]["kind"] == "Node"
        assert event["involvedObject"]["uid"] == kube.get(f"{NODES}/{name}")["metadata"]["uid"]
        assert fleet.pending_firmware(name) == "1.13.0.0"
    threading.Event().wait(1.0)
    assert "node-0004" not in _need_reboot_events(kube)  # fails to report

    boot_ids = {n: kube.get(f"{NODES}/{n}")["status"]["nodeInfo"]["bootID"] for n in events}
    with recording(kube, NODES, {"labelSelector": f"{FLEET_LABEL}=default"}) as seen:
        # A reboot hook's request (annotation) and a person's reboot.
        for name in ("node-0001", "node-0003"):
            kube.patch(f"{NODES}/{name}",
                       {"metadata": {"annotations": {REBOOT_REQUESTED_ANNOTATION: f"t-{name}"}}})
        fleet.reboot("node-0002")

        def back(name: str) -> bool:
            node = kube.get(f"{NODES}/{name}")
            return (ready_condition(node) == "True"
                    and node["status"]["nodeInfo"]["bootID"] != boot_ids[name])

        wait_for(lambda: all(back(n) for n in boot_ids), timeout=30,
                 what="the three nodes back with new boot IDs")
    for name in boot_ids:
        states = [ready_condition(o) for _, o in seen if o["metadata"]["name"] == name]
        assert "False" in states, f"{name} never went NotReady"
    vbios = {n: kube.get(f"{NODES}/{n}")["metadata"]["labels"][VBIOS_VERSION_LABEL]
             for n in boot_ids}
    assert vbios == {"node-0001": "1.13.0.0", "node-0002": "1.13.0.0", "node-0003": "1.12.0.0"}
    annotations = kube.get(f"{NODES}/node-0001")["metadata"]["annotations"]
    assert annotations[REBOOTED_ANNOTATION] == "t-node-0001"
    # The driver came back too, restarted once.
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=30,
             what="drivers Ready after the reboots", observe=fleet.driver_pods)
    pod = pod_on(kube, "node-0001")
    assert pod is not None and container_state(pod)[3] == 1


def test_lease_heartbeats_renew_each_nodes_lease_and_leave_the_node_status_alone(
        kube: KubeApi, fleet_factory: FleetFactory) -> None:
    # what a kubelet with node leases does (docs/rollout.md#scale: 10,000 nodes' heartbeats must
    # stay cheap)
    fleet = fleet_factory(nodes=3, lease_seconds=0.5)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 3, timeout=60,
             what="3 Ready driver pods", observe=fleet.driver_pods)
    names = fleet.node_names
    nodes = {n["metadata"]["name"]: n for n in kube.list(
        NODES, query={"labelSelector": f"{FLEET_LABEL}=default"})["items"]}
    # counted before the leases are read: a renewal between the two reads is then counted once
    # in the difference below, never before it
    renewals = fleet.lease_renewals
    leases = {name: kube.get(lease_path(name)) for name in names}
    for name, lease in leases.items():
        assert lease["spec"]["holderIdentity"] == name
        assert lease["spec"]["leaseDurationSeconds"] == 2
        owner = lease["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("Node", nodes[name]["metadata"]["uid"])
    wait_for(lambda: all(kube.get(lease_path(name))["spec"]["renewTime"]
                         > leases[name]["spec"]["renewTime"] for name in names),
             timeout=10, what="every Lease renewed")
    assert fleet.lease_renewals >= renewals + 3
    # heartbeats are the Lease alone: no Node write (a full NodeStatus) among them
    for name in names:
        assert kube.get(resource_path("v1", "nodes", name))["metadata"]["resourceVersion"] == \
            nodes[name]["metadata"]["resourceVersion"]
    fleet.stop(cleanup=True)
    left = kube.list(resource_path("coordination.k8s.io/v1", "leases",
                                   namespace=LEASE_NAMESPACE),
                     query={"labelSelector": f"{FLEET_LABEL}=default"})["items"]
    assert left == []


def test_native_rolling_update_replaces_each_driver_pod_with_the_install_time(
        kube: KubeApi, fleet_factory: FleetFactory) -> None:
    # bench/native_peer.py: the DaemonSet controller's own RollingUpdate, played by the same
    # kubelets as our rollout (deletion, the controller's new pod, install time, node labels)
    fleet = fleet_factory(nodes=3, install_seconds=1.0)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 3, timeout=60,
             what="3 Ready driver pods", observe=fleet.driver_pods)
    started = time.monotonic()
    kube.patch(DAEMONSET, {"spec": {
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        "template": {"spec": {"containers": [{"name": "driver", "image": NEW.image}]}}}},
        patch_type="strategic")
    wait_for(lambda: fleet.ready_driver_nodes(NEW.version) == fleet.node_names, timeout=60,
             what="every node Ready on the new driver", observe=fleet.driver_pods)
    # one node at a time, each new pod Ready an install time after it started
    assert time.monotonic() - started >= 3 * 1.0
    for name in fleet.node_names:
        labels = kube.get(resource_path("v1", "nodes", name))["metadata"]["labels"]
        assert labels["metax-tech.com/driver.ready"] == "true"
        assert (labels["metax-tech.com/gpu.driver.major"],
                labels["metax-tech.com/gpu.driver.minor"]) == ("2", "40")
        # the container's ready flag is its own status write: wait for it, not for the clock
        wait_for(lambda n=name: (p := pod_on(kube, n)) is not None
                 and container_state(p)[:2] == ("Running", True),
                 timeout=30, what=f"{name}'s driver container Running and ready")


def test_the_simulated_kubelets_threads_grow_with_the_fleet_up_to_a_cap() -> None:
    """16 threads up to 1,600 nodes, then one per 100 nodes, at most 64 (10,000 nodes' waves
    of 1,000 pods queued for 10-20 s behind 16)."""
    from reconciler.sim.fleet import default_workers

    assert [default_workers(n) for n in (10, 1000, 1600, 2000, 5000, 6400, 10000, 100000)] \
        == [16, 16, 16, 20, 50, 64, 64, 64]


def test_a_deleted_driver_pod_clears_only_its_own_nodes_driver_ready_label(
        kube: KubeApi, fleet_factory: FleetFactory) -> None:
    """The label follows the node's own pods (indexed by node): the other node keeps it."""
    fleet = fleet_factory(nodes=2, install_seconds=2.0)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 2, timeout=60,
             what="2 Ready driver pods", observe=fleet.driver_pods)
    old = fleet.driver_pods()["node-0001"].name
    kube.delete(resource_path("v1", "pods", old, namespace=OPERATOR_NAMESPACE))

    def label(node: str) -> str | None:
        labels = kube.get(resource_path("v1", "nodes", node))["metadata"]["labels"]
        return labels.get("metax-tech.com/driver.ready")

    wait_for(lambda: label("node-0001") == "false", timeout=30,
             what="node-0001's driver.ready false once its pod is gone")
    assert label("node-0002") == "true"
    wait_for(lambda: label("node-0001") == "true" and fleet.driver_pods()["node-0001"].name
             != old, timeout=60, what="the replacement Ready: driver.ready true again")
