"""The orchestrator SIGKILLed mid-flow (a standalone process) and started again: the flow
resumes from the CR status and node annotations; no node is cordoned twice, rebooted twice, or
restored wrongly, and the reboot bound holds."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from reconciler.kube.api import KubeApi, resource_path
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.waiting import wait_for
from tests.firmware.helpers import (
    NodeObserver,
    cluster_operator,
    firmware_status,
    gpu_nodes,
    request_firmware,
)

pytestmark = pytest.mark.cluster


ENTRIES = {
    # the orchestrator alone
    "standalone": ["-m", "reconciler.cli.main", "firmware", "--config", "{config}"],
    # the daemon's controller role (rollout controller and firmware orchestrator)
    "reconciler-run": ["-m", "reconciler.cli.main", "run", "--role", "controller",
                       "--repo-config", "{config}", "--ops-listen", "off"],
}


def _spawn(entry: str, kubeconfig: Path, config: Path) -> subprocess.Popen[bytes]:
    log = open(config.parent / "firmware.log", "ab")  # noqa: SIM115 - lives with the child
    args = [a.format(config=config) for a in ENTRIES[entry]]
    return subprocess.Popen(
        [sys.executable, *args, "--kubeconfig", str(kubeconfig), "--log-level", "warning"],
        stdout=log, stderr=log, start_new_session=True,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)})  # for the reboot hook


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_sigkill_mid_flow_resumes(
    kube: KubeApi, control_plane: ControlPlane, fleet_factory: Any, tmp_path: Path, entry: str
) -> None:
    fleet = fleet_factory(nodes=10, firmware_seconds=(0.3, 3.0), reboot_seconds=(1.0, 3.0))
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 10, timeout=60, what="10 Ready pods")
    kube.patch(resource_path("v1", "nodes", "node-0007"), {"spec": {"unschedulable": True}})
    hook = json.dumps([sys.executable, "-m", "reconciler.firmware.annotate_reboot"])
    config = tmp_path / "reconciler.yaml"
    config.write_text(f"firmware:\n  reboot:\n    mode: hook\n    command: {hook}\n"
                      "    maxConcurrent: 2\n")
    observer = NodeObserver(kube).start()
    rng = random.Random(8)
    process = _spawn(entry, control_plane.kubeconfig, config)
    kills = 0
    phases_killed_in: set[str] = set()
    try:
        request_firmware(kube, source_commit="dead01")
        deadline = time.monotonic() + 240
        # a start costs ~2 s here (interpreter, imports, list+watch): kill within 1.5-5 s of it
        while kills < 8 and firmware_status(kube).get("phase") not in ("Completed", "Failed"):
            assert time.monotonic() < deadline, f"not finished: {firmware_status(kube)}"
            time.sleep(rng.uniform(1.5, 5.0))
            phase = str(firmware_status(kube).get("phase"))
            if phase in ("Completed", "Failed"):
                break
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
            kills += 1
            phases_killed_in.add(phase)
            process = _spawn(entry, control_plane.kubeconfig, config)
        wait_for(lambda: firmware_status(kube).get("phase") in ("Completed", "Failed"),
                 timeout=max(1.0, deadline - time.monotonic()), what="the end of the flow",
                 observe=lambda: firmware_status(kube))
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)
        observer.stop()
    status = firmware_status(kube)
    assert status["phase"] == "Completed", status
    assert kills >= 3, kills
    assert len(phases_killed_in) >= 2, phases_killed_in
    assert observer.boots == {f"node-{i:04d}": 1 for i in range(1, 11)}
    assert observer.max_not_ready <= 2
    assert cluster_operator(kube)["spec"]["driver"]["fwUpgradePolicy"] == "Never"
    assert {n: bool(o["spec"].get("unschedulable")) for n, o in gpu_nodes(kube).items()} == {
        f"node-{i:04d}": i == 7 for i in range(1, 11)}
    assert process.returncode == 0  # SIGTERM stops it cleanly
