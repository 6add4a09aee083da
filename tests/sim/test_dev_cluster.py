"""`reconciler dev-cluster up|down` as a person uses it, in real processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.cli.dev_cluster import dev_cluster
from reconciler.kube.api import KubeApi, resource_path
from reconciler.sim.waiting import wait_for

RECONCILER = [str(Path(sys.executable).parent / "reconciler")]


def reconciler(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RECONCILER, *args], capture_output=True, text=True, timeout=120,
                          check=False)


def start_up(state: Path, *args: str) -> subprocess.Popen[str]:
    """``reconciler dev-cluster up --dir state ARGS`` in a process group of its own."""
    return subprocess.Popen(
        [*RECONCILER, "dev-cluster", "up", "--dir", str(state), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
    )


def kubeconfig_line(up: subprocess.Popen[str], state: Path) -> str:
    """The first line ``up`` prints: the kubeconfig path, once the cluster is ready."""
    assert up.stdout is not None
    line = up.stdout.readline().strip()
    assert line == str(state / "kubeconfig"), up.stderr.read() if up.stderr else ""
    return line


def descendants(pid: int) -> set[int]:
    """Every process whose parent chain leads to ``pid`` (or that shares its process groups)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


@pytest.mark.cluster
def test_up_prints_the_kubeconfig_when_ready_and_down_stops_everything(tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text("faults:\n  - {node: node-0002, fault: crashloop}\n")
    state = tmp_path / "dev"
    up = start_up(state, "--nodes", "4", "--install-seconds", "0.2-0.5",
                  "--faults", str(faults), "--lease-seconds", "10")
    try:
        line = kubeconfig_line(up, state)
        api = KubeApi.from_kubeconfig(line)
        pods = api.list(resource_path("v1", "pods", namespace="metax-operator"))["items"]
        ready = [p for p in pods if (p["status"].get("containerStatuses") or [{}])[0].get("ready")]
        assert len(ready) == 3  # node-0002 crash-loops
        assert len(api.list(resource_path("v1", "nodes"))["items"]) == 4
        leases = api.list(resource_path("coordination.k8s.io/v1", "leases",
                                        namespace="kube-node-lease"))["items"]
        assert sorted(lease["spec"]["holderIdentity"] for lease in leases) == [
            f"node-000{i}" for i in range(1, 5)]
        api.close()

        spawned = descendants(up.pid)
        assert len(spawned) >= 4  # etcd, apiserver, controller-manager, scheduler

        second = reconciler("dev-cluster", "up", "--nodes", "1", "--dir", str(state))
        assert second.returncode == 1
        assert "already running" in second.stderr

        stopped = reconciler("dev-cluster", "down", "--dir", str(state))
        assert stopped.returncode == 0, stopped.stderr
        assert up.wait(60) == 0
        said = up.stderr.read() if up.stderr else ""
        # the memory of each process, once the fleet is Ready (docs/rollout.md#scale)
        memory = next(line for line in said.splitlines() if "memory:" in line)
        for process in ("simulator", "etcd", "kube-apiserver", "kube-controller-manager",
                        "kube-scheduler"):
            assert re.search(rf"{process} \d+ MiB \(peak \d+\)", memory), memory
        wait_for(lambda: not any(alive(p) for p in spawned), timeout=10,
                 what="every process of the dev cluster gone",
                 observe=lambda: [p for p in spawned if alive(p)])
        assert not (state / "kubeconfig").exists()
        assert (state / "logs" / "kube-apiserver.log").exists()
        assert "no dev cluster is running" in reconciler("dev-cluster", "down", "--dir",
                                                         str(state)).stdout
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def test_bad_fault_file_is_a_usage_error(tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text("faults:\n  - {node: node-0009, fault: imagepull}\n")
    result = reconciler("dev-cluster", "up", "--nodes", "3", "--faults", str(faults),
                        "--dir", str(tmp_path / "dev"))
    assert result.returncode == 2
    assert "node-0009" in result.stderr and "node-0001..node-0003" in result.stderr
    faults.write_text("faults:\n  - {node: node-0001, fault: explode}\n")
    result = reconciler("dev-cluster", "up", "--nodes", "3", "--faults", str(faults),
                        "--dir", str(tmp_path / "dev"))
    assert result.returncode == 2
    assert "'fault' must be one of" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_install_seconds_and_idle_down(tmp_path: Path) -> None:
    result = reconciler("dev-cluster", "up", "--install-seconds", "soon", "--dir", str(tmp_path))
    assert result.returncode == 2
    assert "expected seconds such as 5 or a range such as 3-8" in result.stderr
    result = reconciler("dev-cluster", "down", "--dir", str(tmp_path))
    assert result.returncode == 0
    assert "no dev cluster is running" in result.stdout


@pytest.mark.cluster
def test_up_with_workloads_and_domains_serves_pods_behind_a_budget(tmp_path: Path) -> None:
    state = tmp_path / "dev"
    up = start_up(state, "--nodes", "6", "--install-seconds", "0.1", "--workloads", "2",
                  "--domains", "3")
    try:
        line = kubeconfig_line(up, state)
        api = KubeApi.from_kubeconfig(line)
        nodes = api.list(resource_path("v1", "nodes"))["items"]
        zones = {n["metadata"]["name"]: (n["metadata"]["labels"]["topology.kubernetes.io/zone"],
                                         n["metadata"]["labels"]["gpu.metax-tech.com/rack"])
                 for n in nodes}
        assert zones == {f"node-000{i}": (f"zone-{(i + 1) // 2}", f"rack-{(i + 1) // 2}")
                         for i in range(1, 7)}
        assert all(n["status"]["allocatable"]["metax-tech.com/gpu"] == "8" for n in nodes)
        # printed once the serving pods are Ready and counted by the disruption controller
        budget = api.get(resource_path("policy/v1", "poddisruptionbudgets", "gpu-serving",
                                       namespace="gpu-workloads"))
        assert budget["status"]["currentHealthy"] == 2
        assert budget["status"]["disruptionsAllowed"] == 1
        pods = api.list(resource_path("v1", "pods", namespace="gpu-workloads"))["items"]
        assert len(pods) == 2
        assert {p["status"]["phase"] for p in pods} == {"Running"}
        assert all(p["spec"]["nodeName"] in zones for p in pods)
        assert {p["metadata"]["ownerReferences"][0]["kind"] for p in pods} == {"ReplicaSet"}
        api.close()
        stopped = reconciler("dev-cluster", "down", "--dir", str(state))
        assert stopped.returncode == 0, stopped.stderr
        assert up.wait(60) == 0
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def test_workloads_and_domains_must_fit_the_fleet(tmp_path: Path) -> None:
    # in process: refused before anything starts
    runner = CliRunner()
    result = runner.invoke(dev_cluster, ["up", "--nodes", "2", "--workloads", "17",
                                         "--dir", str(tmp_path / "dev")])
    assert result.exit_code == 2
    assert "2 nodes have 16 GPUs" in result.output
    result = runner.invoke(dev_cluster, ["up", "--nodes", "2", "--domains", "3",
                                         "--dir", str(tmp_path / "dev")])
    assert result.exit_code == 2
    assert "more domains than the 2 nodes" in result.output
    assert not (tmp_path / "dev").exists()
