"""A merged ``fwUpgradePolicy: PreferCloud`` is not applied as is: the sync hands it to the
firmware orchestrator as the request annotation (docs/firmware.md); the orchestrator's
``Never`` at the end is written back to Git, and its status goes to the snapshot's ``firmware``
section. The orchestrator is played here by its field manager's server-side applies and by its
record in the annotation ``FIRMWARE_STATUS_ANNOTATION`` (the vendor's CRD has no status field
for it: the API server prunes ``status.firmwareUpgrade``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from reconciler.kube.api import KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import API_VERSION, CLUSTER_OPERATOR_NAME, CONTROLLER_FIELD_MANAGER, KIND
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from reconciler.stored_status import FIRMWARE_STATUS_ANNOTATION
from reconciler.sync.desired import FIRMWARE_REQUEST_ANNOTATION
from tests.sync.conftest import PAYLOAD, POLICY_PATH, Person, Remote, SyncFactory, policy
from tests.sync.helpers import cluster_operator, driver, file_at_head, source_commit, status_file
from tests.sync.helpers import subjects as log_subjects

pytestmark = pytest.mark.cluster


def _with_firmware(text: str, value: str) -> str:
    return text.replace("    upgradePolicy:\n",
                        f"    fwUpgradePolicy: {value}   # firmware: Never or PreferCloud\n"
                        "    upgradePolicy:\n", 1)


def test_prefer_cloud_becomes_a_request_and_never_is_written_back(
    kube: KubeApi, fleet_factory: Callable[..., Fleet], policy_remote: Remote, alice: Person,
    make_sync: SyncFactory,
) -> None:
    fleet_factory(nodes=2, payload=PAYLOAD, install_seconds=0.2)
    seed = policy_remote.head()  # before the sync role pushes status snapshots
    sync = make_sync(policy_remote.url)
    wait_for(lambda: source_commit(kube) == seed, timeout=30,
             what="the seed applied")
    merge = alice.commit_and_push("Upgrade the firmware",
                                  {POLICY_PATH: _with_firmware(policy(), "PreferCloud")})
    sync.trigger()
    wait_for(lambda: source_commit(kube) == merge, timeout=20, what="the firmware commit")
    annotations = cluster_operator(kube)["metadata"]["annotations"]
    request = json.loads(annotations[FIRMWARE_REQUEST_ANNOTATION])
    assert request["fwUpgradePolicy"] == "PreferCloud"
    assert request["sourceCommit"] == merge
    assert driver(kube)["fwUpgradePolicy"] == "Never", "PreferCloud is never applied as is"

    # the orchestrator takes over, runs, and sets Never at the end (its own field manager)
    def orchestrator_sets(value: str) -> None:
        kube.apply(cluster_operator_path(CLUSTER_OPERATOR_NAME), {
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": CLUSTER_OPERATOR_NAME},
            "spec": {"driver": {"fwUpgradePolicy": value}}},
            field_manager=CONTROLLER_FIELD_MANAGER, force=True)

    def orchestrator_records(firmware: dict[str, Any]) -> None:
        # its whole record, where it keeps it (stored_status.FIRMWARE_STATUS_ANNOTATION)
        kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME), {"metadata": {"annotations": {
            FIRMWARE_STATUS_ANNOTATION: json.dumps(firmware, sort_keys=True)}}})

    orchestrator_sets("PreferCloud")
    orchestrator_records({"phase": "AwaitingReboot", "message": "reboot", "sourceCommit": merge,
                          "nodes": {"node-0001": {"stage": "awaiting-reboot"},
                                    "node-0002": {"stage": "verified"}}})
    firmware = wait_for(lambda: (status_file(policy_remote) or {}).get("firmware"), timeout=20,
                        what="the firmware section in Git")
    assert firmware["phase"] == "AwaitingReboot"
    assert firmware["nodes"] == {"node-0001": "awaiting-reboot", "node-0002": "verified"}

    # an unrelated commit meanwhile does not re-request nor apply anything firmware-related
    alice.pull()
    notes = alice.commit_and_push("Notes", {"README.md": "firmware in progress\n"})
    sync.trigger()
    wait_for(lambda: sync.handled_source == notes, timeout=20,
             what="the unrelated commit")
    assert driver(kube)["fwUpgradePolicy"] == "PreferCloud"

    orchestrator_sets("Never")
    orchestrator_records({"phase": "Completed", "message": "reboot", "sourceCommit": merge})
    wait_for(lambda: any("set fwUpgradePolicy: Never" in s for s in log_subjects(policy_remote)),
             timeout=20, what="the Never write-back", observe=lambda: log_subjects(policy_remote))
    # the phase is written after Never: the subject still says why, from the phase
    assert any(s.endswith("set fwUpgradePolicy: Never: firmware upgrade finished")
               for s in log_subjects(policy_remote)), log_subjects(policy_remote)
    text = file_at_head(policy_remote, POLICY_PATH)
    assert re.search(r"fwUpgradePolicy: Never +# firmware: Never or PreferCloud", text), text
    assert driver(kube)["fwUpgradePolicy"] == "Never"
