"""The sync role on a cluster that runs the vendor's own CRD, unchanged (the data copy of the chart
0.15.2's ``crds/``), on a control plane of its own: a policy file that carries only
``spec.driver`` is applied over the installed whole object; before the vendor's chart installed
that object, the API server refuses to create it from the file and the sync says so and waits."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME, SOURCE_COMMIT_ANNOTATION
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.operator_install import (
    CO_PATH,
    FINALIZER,
    HELM_ANNOTATIONS,
    HELM_LABELS,
    INSTALLER,
    cluster_operator,
    install_crd,
    vendor_crd,
)
from reconciler.sim.waiting import wait_for
from reconciler.sync.loop import ClusterSync
from tests.planes import serve_plane
from tests.sync.conftest import (
    CLUSTER,
    PAYLOAD,
    POLICY_PATH,
    REPO_CONFIG,
    Person,
    Remote,
    policy,
)

pytestmark = pytest.mark.cluster

PATH = cluster_operator_path(CLUSTER_OPERATOR_NAME)


@pytest.fixture
def vendor_cluster(request: pytest.FixtureRequest) -> Iterator[KubeApi]:
    """A control plane of its own (the session's keeps our CRD) with the vendor's CRD."""
    for plane in serve_plane(request, ControlPlane(), "vendor-CRD control plane"):
        api = plane.api()
        try:
            install_crd(api, crd=vendor_crd())
            yield api
        finally:
            api.close()


def test_a_driver_only_file_waits_for_the_installed_object_then_applies_over_it(
    vendor_cluster: KubeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    api = vendor_cluster
    caplog.set_level(logging.WARNING, logger="reconciler")
    policy_remote = Remote(tmp_path / "server")
    seeder = Person(policy_remote.url, tmp_path / "seed", name="Sam Seeder")
    # every pauseDuration a number: the vendor's CRD types it as an integer
    seeder.commit("Add the prod-a policy", {"reconciler.yaml": REPO_CONFIG,
                                            POLICY_PATH: policy(first_pause="30000")})
    seeder.push()
    seed = policy_remote.head()
    sync = ClusterSync(api, policy_remote.url, cluster=CLUSTER, state_dir=tmp_path / "state",
                       fetch_interval=30.0).start()
    try:
        assert sync.wait_synced(30)
        # nothing installed yet: the file (spec.driver alone) cannot create the object
        wait_for(lambda: "is not installed" in caplog.text, timeout=30,
                 what="the sync saying the object is not installed",
                 observe=lambda: caplog.text[-2000:])
        line = next(r.getMessage() for r in caplog.records if "is not installed" in r.getMessage())
        assert "spec.dataExporter: Required value" in line
        assert "install the vendor's operator first" in line
        assert api.list(CO_PATH)["items"] == []

        # the vendor's chart installs it; the sync applies the commit over it
        api.request("POST", CO_PATH, body=cluster_operator(PAYLOAD),
                    query={"fieldManager": INSTALLER})
        sync.trigger()
        co = wait_for(lambda: (obj := api.get(PATH))["metadata"].get("annotations", {}).get(
            SOURCE_COMMIT_ANNOTATION) == seed and obj, timeout=60, what="the seed applied")
    finally:
        sync.stop()
    installed = cluster_operator(PAYLOAD)
    driver = co["spec"]["driver"]
    assert driver["upgradePolicy"]["enableRollout"] is True, "Git's policy"
    assert driver["upgradePolicy"]["maxFailureThreshold"] == 2
    # what the file does not name stays as installed, and so does the chart's metadata
    for section in ("dataExporter", "devicePlugin", "gpuScheduler", "labelgen", "maca",
                    "openshift", "runtime", "topoDiscovery"):
        assert section in co["spec"], section
    assert driver["deviceAsRootGroup"] is False and driver["fwEnableVirt"] is False
    assert driver["image"] == installed["spec"]["driver"]["image"]
    assert co["metadata"]["finalizers"] == [FINALIZER]
    assert {k: co["metadata"]["labels"][k] for k in HELM_LABELS} == HELM_LABELS
    assert {k: co["metadata"]["annotations"][k] for k in HELM_ANNOTATIONS} == HELM_ANNOTATIONS
