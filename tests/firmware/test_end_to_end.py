"""Issue 8 end to end, from a merged pull request: the sync role (the real one) hands the
merged ``fwUpgradePolicy: PreferCloud`` to the firmware orchestrator, which runs the flow on the
simulated fleet with its reboot hook; ``Never`` comes back to Git and the snapshot's firmware
section shows every node verified."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import pytest

from reconciler.firmware.controller import FirmwareController
from reconciler.firmware.model import FirmwareSettings
from reconciler.kube.api import KubeApi
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.firmware.helpers import firmware_status, gpu_nodes
from tests.sync.conftest import (  # noqa: F401 - the sync tests' fixtures, used here
    PAYLOAD,
    POLICY_PATH,
    Person,
    Remote,
    SyncFactory,
    git_identity,
    policy,
)
from tests.sync.conftest import alice as alice
from tests.sync.conftest import make_sync as make_sync
from tests.sync.conftest import policy_remote as policy_remote
from tests.sync.helpers import driver, file_at_head, source_commit, status_file, subjects

pytestmark = pytest.mark.cluster


def with_firmware(text: str, value: str) -> str:
    return text.replace("    upgradePolicy:\n",
                        f"    fwUpgradePolicy: {value}   # firmware: Never or PreferCloud\n"
                        "    fwEnableVirt: false\n"
                        "    upgradePolicy:\n", 1)


def test_merged_prefer_cloud_runs_the_flow_and_never_comes_back_to_git(
    kube: KubeApi, control_plane: ControlPlane, fleet_factory: Callable[..., Fleet],
    policy_remote: Remote, alice: Person, make_sync: SyncFactory,
) -> None:
    fleet = fleet_factory(nodes=10, payload=PAYLOAD, install_seconds=0.2, firmware_seconds=0.5,
                          reboot_seconds=(0.5, 1.5))
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 10, timeout=60, what="10 Ready pods")
    seed = policy_remote.head()  # before the sync role pushes status snapshots
    sync = make_sync(policy_remote.url)
    wait_for(lambda: source_commit(kube) == seed, timeout=30,
             what="the seed applied")
    orchestrator = FirmwareController(kube, settings=FirmwareSettings(
        reboot_mode="hook", reboot_command=(sys.executable, "-m",
                                            "reconciler.firmware.annotate_reboot"),
        max_concurrent_reboots=3), hook_env={"KUBECONFIG": str(control_plane.kubeconfig)})
    orchestrator.start()
    try:
        assert orchestrator.wait_synced(30)
        merge = alice.commit_and_push("Upgrade the GPU firmware",
                                      {POLICY_PATH: with_firmware(policy(), "PreferCloud")})
        sync.trigger()
        wait_for(lambda: firmware_status(kube).get("phase") == "Completed", timeout=120,
                 what="the firmware flow Completed", observe=lambda: firmware_status(kube))
        assert firmware_status(kube)["sourceCommit"] == merge
        wait_for(lambda: any("fwUpgradePolicy: Never" in s for s in subjects(policy_remote)),
                 timeout=30, what="the Never write-back",
                 observe=lambda: subjects(policy_remote))
        text = file_at_head(policy_remote, POLICY_PATH)
        # the person's comment is kept (at its column)
        assert re.search(r"fwUpgradePolicy: Never +# firmware: Never or PreferCloud\n", text)
        wait_for(lambda: ((status_file(policy_remote) or {}).get("firmware") or {})
                 .get("phase") == "Completed", timeout=30, what="the Completed snapshot",
                 observe=lambda: status_file(policy_remote))
        firmware = (status_file(policy_remote) or {})["firmware"]
        assert firmware["nodes"] == {f"node-{i:04d}": "verified" for i in range(1, 11)}
        assert firmware["sourceCommit"] == merge
        assert driver(kube)["fwUpgradePolicy"] == "Never"
        assert not any(n["spec"].get("unschedulable") for n in gpu_nodes(kube).values())
        assert orchestrator.stats.max_hooks_at_once <= 3
    finally:
        orchestrator.stop()
