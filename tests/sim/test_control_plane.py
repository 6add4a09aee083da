"""The local control plane of the selected release (``KUBE_VERSION``, default 1.37.2): the smoke
test of issue 3 (server-side apply of a custom resource, status patch, watch, events, leases,
RBAC-bound kubeconfig) and the manager's own lifecycle."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from reconciler.kube.api import Conflict, Forbidden, KubeApi, resource_path
from reconciler.kube.watch import ListWatch
from reconciler.names import API_VERSION, PLURAL
from reconciler.policy.payload import Payload
from reconciler.sim.control_plane import GO_GC_PERCENT, Binaries, ControlPlane, ControlPlaneError
from reconciler.sim.fleet import Fleet
from reconciler.sim.operator_install import cluster_operator, install_crd
from reconciler.sim.waiting import wait_for

pytestmark = pytest.mark.cluster

CO = resource_path(API_VERSION, PLURAL)


def _co(name: str, version: str) -> dict[str, Any]:
    """A whole object (the vendor's CRD admits no other) of no Helm release."""
    return cluster_operator(
        Payload("cr.example", "driver-image", version), name=name, release=False,
        spec={"driver": {"upgradePolicy": {
            "enableRollout": True, "maxParallel": "50%",
            "upgradeSteps": [{"replicas": 1, "pauseDuration": 5000},
                             {"replicas": "100%", "pauseDuration": 0}]}}})


@pytest.mark.compat
def test_smoke_apply_status_watch_events_leases_rbac(control_plane: ControlPlane,
                                                     kube: KubeApi) -> None:
    install_crd(kube)
    name = "smoke-operator"
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def record(event_type: str, obj: dict[str, object]) -> None:
        meta = obj["metadata"]
        assert isinstance(meta, dict)
        if meta["name"] == name:
            with lock:
                seen.append((event_type, str(meta["resourceVersion"])))

    watch = ListWatch(kube, CO, on_event=record, name="smoke").start()
    try:
        assert watch.wait_synced(10)

        # Server-side apply of a custom resource, twice (the reflect2 crash of Go >= 1.18 hit
        # exactly this), by two field managers.
        applied = kube.apply(f"{CO}/{name}", _co(name, "2.31.0.6"), field_manager="smoke-a")
        assert applied["spec"]["driver"]["upgradePolicy"]["maxParallel"] == "50%"
        assert applied["spec"]["driver"]["upgradePolicy"]["upgradeSteps"][0] == {
            "replicas": 1, "pauseDuration": 5000}
        applied = kube.apply(
            f"{CO}/{name}",
            {"apiVersion": API_VERSION, "kind": "ClusterOperator", "metadata": {"name": name},
             "spec": {"driver": {"upgradePolicy": {"pause": True}}}},
            field_manager="smoke-b",
        )
        managers = {m["manager"] for m in applied["metadata"]["managedFields"]}
        assert {"smoke-a", "smoke-b"} <= managers
        assert applied["spec"]["driver"]["upgradePolicy"]["pause"] is True
        assert applied["spec"]["driver"]["payload"]["version"] == "2.31.0.6"

        # Status through the status subresource; a spec write cannot change status. (What the
        # vendor's CRD requires of a status: its state, and the counters with the step.)
        status = {"state": "ready", "upgradeStatus": {
            "phase": "Progressing", "upgrading": True,
            "status": {"currentStepIndex": 1, "currentStepState": "StepUpgrade",
                       "currentUpgradeReplicas": 1, "CurrentUpgradeReadyReplicas": 0,
                       "totalUpgradeReplicas": 2, "totalUpgradeReadyReplicas": 0,
                       "currentFailureRetry": 0}}}
        patched = kube.patch(f"{CO}/{name}/status", {"status": status})
        assert patched["status"] == status
        kube.patch(f"{CO}/{name}", {"status": {"upgradeStatus": {"phase": "Idling"}}})
        assert kube.get(f"{CO}/{name}")["status"]["upgradeStatus"]["phase"] == "Progressing"

        # The watch saw the creation and each change, in order.
        final_rv = kube.get(f"{CO}/{name}")["metadata"]["resourceVersion"]
        wait_for(lambda: any(rv == final_rv for _, rv in seen), timeout=10,
                 what="the watch to reach the last write", observe=lambda: seen)
        assert seen[0][0] == "ADDED"
        assert [t for t, _ in seen[1:]] == ["MODIFIED"] * (len(seen) - 1)
    finally:
        watch.stop()
    assert not watch.alive

    # Events.
    events = resource_path("v1", "events", namespace="default")
    kube.create(events, {
        "metadata": {"name": "smoke.1"},
        "involvedObject": {"kind": "ClusterOperator", "name": name},
        "reason": "SmokeTest", "message": "hello", "type": "Normal",
        "source": {"component": "smoke"},
    })
    found = kube.list(events, query={"fieldSelector": "reason=SmokeTest"})["items"]
    assert [e["message"] for e in found] == ["hello"]

    # Leases, with optimistic concurrency.
    leases = resource_path("coordination.k8s.io/v1", "leases", namespace="default")
    lease = kube.create(leases, {"metadata": {"name": "smoke-lease"},
                                 "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})
    lease["spec"]["holderIdentity"] = "b"
    kube.replace(f"{leases}/smoke-lease", lease)
    lease["spec"]["holderIdentity"] = "c"
    with pytest.raises(Conflict):
        kube.replace(f"{leases}/smoke-lease", lease)  # stale resourceVersion

    # An RBAC-bound identity: may read ClusterOperators and write their status, nothing else.
    rbac = "rbac.authorization.k8s.io/v1"
    kube.create(resource_path(rbac, "clusterroles"), {
        "metadata": {"name": "smoke-status-writer"},
        "rules": [
            {"apiGroups": ["gpu.metax-tech.com"], "resources": ["clusteroperators"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["gpu.metax-tech.com"], "resources": ["clusteroperators/status"],
             "verbs": ["patch"]},
        ],
    })
    limited = KubeApi.from_kubeconfig(control_plane.mint_kubeconfig("smoke-status-writer"))
    try:
        assert [i["metadata"]["name"] for i in limited.list(CO)["items"]].count(name) == 1
        limited.patch(f"{CO}/{name}/status",
                      {"status": {"upgradeStatus": {"phase": "Idling"}}})
        with pytest.raises(Forbidden):
            limited.apply(f"{CO}/{name}", _co(name, "9.9.9.9"), field_manager="intruder")
        with pytest.raises(Forbidden):
            limited.list(resource_path("v1", "nodes"))
    finally:
        limited.close()
    assert kube.get(f"{CO}/{name}")["status"]["upgradeStatus"]["phase"] == "Idling"
    kube.delete(f"{CO}/{name}")


def test_start_stop_leaves_no_process_and_removes_its_directory() -> None:
    plane = ControlPlane().start()
    pids = plane.pids
    workdir = plane.workdir
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
    assert plane.boot_seconds is not None and plane.boot_seconds > 0
    assert plane.leaked_processes() != []
    plane.stop()
    assert plane.leaked_processes() == []
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not workdir.exists()


def test_logs_are_kept_when_marked_failed() -> None:
    with ControlPlane() as plane:
        plane.mark_failed()
        logs = plane.logs
    try:
        assert plane.leaked_processes() == []
        assert (logs / "kube-apiserver.log").stat().st_size > 0
        assert {p.name for p in logs.iterdir()} == {
            "etcd.log", "kube-apiserver.log", "kube-controller-manager.log", "kube-scheduler.log"}
    finally:
        import shutil

        shutil.rmtree(logs.parent)


def test_missing_binaries_name_the_install_step(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("KUBE_BIN_DIR", str(tmp_path))
    with pytest.raises(ControlPlaneError, match="scripts/install-kubernetes"):
        Binaries.locate()


def test_apiserver_restart_keeps_data_and_clients_recover() -> None:
    namespaces = resource_path("v1", "namespaces")
    with ControlPlane() as plane:
        api = plane.api()
        api.create(namespaces, {"metadata": {"name": "survives-restart"}})
        names: set[str] = set()
        watch = ListWatch(api, namespaces, name="restart",
                          on_event=lambda _, obj: names.add(obj["metadata"]["name"])).start()
        assert watch.wait_synced(10)
        plane.restart_apiserver()
        # The same client (its pooled connections died with the server) works again, and the
        # watch resumes on its own.
        assert api.get(f"{namespaces}/survives-restart")["metadata"]["name"] == "survives-restart"
        api.create(namespaces, {"metadata": {"name": "after-restart"}})
        wait_for(lambda: "after-restart" in names, timeout=30, what="the watch to resume",
                 observe=lambda: (sorted(names), watch.last_error))
        watch.stop()
        api.close()

        # A controller-manager that dies is restarted, as a kubelet restarts a static pod.
        old = plane.pids["kube-controller-manager"]
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: plane.restarts["kube-controller-manager"] >= 1
                 and plane.pids["kube-controller-manager"] != old, timeout=20,
                 what="kube-controller-manager restarted", observe=lambda: plane.restarts)
    assert plane.leaked_processes() == []


def test_go_components_run_with_gogc_and_the_scheduler_with_its_profile(
    control_plane: ControlPlane, fleet: Fleet,
) -> None:
    expected = os.environ.get("GOGC", GO_GC_PERCENT)
    for name, pid in control_plane.pids.items():
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"GOGC={expected}".encode() in environ, name

    config_path = control_plane.workdir / "scheduler.yaml"
    cmdline = Path(f"/proc/{control_plane.pids['kube-scheduler']}/cmdline").read_bytes()
    assert f"--config={config_path}".encode() in cmdline.split(b"\0")
    profile = json.loads(config_path.read_text())["profiles"][0]
    filters = [p["name"] for p in profile["plugins"]["filter"]["enabled"]]
    assert filters[0] == "NodeAffinity", "every node but the pod's own fails at the first filter"
    assert "VolumeBinding" not in filters

    # the fleet fixture saw all ten driver pods bound and Ready, and no plugin of the profile
    # failed on the way (one that reads state its pre-filter did not write would)
    log = (control_plane.logs / "kube-scheduler.log").read_text()
    assert "Failed running" not in log
    assert "Plugin failed" not in log  # the same, as current releases say it
    assert len(fleet.ready_driver_nodes()) == 10
