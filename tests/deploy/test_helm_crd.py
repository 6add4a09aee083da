"""The chart and the vendor's ClusterOperator CRD, with the real helm 4 on a control plane of this
module's own: where the vendor's GPU operator installed its CRD first (by helm 4, by helm 3's
client-side create, by kubectl), `helm install`, `helm upgrade` and `helm uninstall` of our chart
leave it exactly as it was (not one write: same resourceVersion, the vendor's schema and its
controller-gen annotation). Where none exists the release makes ours and keeps it on uninstall.

Why the chart's CRD is a guarded template and not in crds/: helm 4 installs crds/ by server-side
apply (`--server-side` is on by default), which replaced a vendor CRD that helm 4 had applied
(the same field manager, `helm`) with ours, and failed the install on one any other manager
made (deploy/README.md, "The CRD")."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.kube.api import Conflict, KubeApi, NotFound, resource_path
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.crd import CRD_NAME, cluster_operator_crd
from reconciler.sim.operator_install import VENDOR_CRD, vendor_crd
from reconciler.sim.waiting import wait_for
from tests.deploy.helm import CHART, NAMESPACE, RELEASE, helm
from tests.planes import serve_plane

pytestmark = pytest.mark.cluster

CRD_PATH = resource_path("apiextensions.k8s.io/v1", "customresourcedefinitions", CRD_NAME)
VENDOR_RELEASE = VENDOR_NAMESPACE = "metax-operator"
OURS = ("--namespace", NAMESPACE, "--set", "replicas=0")


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """Its own control plane: the session's has our generated CRD, installed by the tests."""
    yield from serve_plane(request, ControlPlane(), "helm CRD control plane")


@pytest.fixture
def kube(plane: ControlPlane) -> Iterator[KubeApi]:
    """No CRD and no release at the start; every release and the CRD gone at the end."""
    api = plane.api()
    for name in (NAMESPACE, VENDOR_NAMESPACE):
        with contextlib.suppress(Conflict):
            api.create(resource_path("v1", "namespaces"), {"metadata": {"name": name}})
    try:
        yield api
    finally:
        for release, namespace in ((RELEASE, NAMESPACE), (VENDOR_RELEASE, VENDOR_NAMESPACE)):
            helm("uninstall", release, "--namespace", namespace, "--ignore-not-found", "--wait",
                 kubeconfig=plane.kubeconfig)
        api.delete(CRD_PATH)
        wait_for(lambda: _missing(api), timeout=60, what="the CRD deleted")
        api.close()


def _missing(api: KubeApi) -> bool:
    try:
        api.get(CRD_PATH)
    except NotFound:
        return True
    return False


def _vendor_chart(tmp_path: Path) -> Path:
    """The vendor's chart as far as its CRD goes: its crds/ file, byte for byte (the data copy
    of metax-operator 0.15.2's crds/gpu.metax-tech.com_clusteroperators.yaml)."""
    chart = tmp_path / "metax-operator"
    (chart / "crds").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: metax-operator\nversion: 0.15.2\nappVersion: 0.15.2\n")
    shutil.copy(VENDOR_CRD, chart / "crds" / VENDOR_CRD.name)
    return chart


def _install_vendor_crd(how: str, plane: ControlPlane, tmp_path: Path) -> None:
    if how == "kubectl":
        assert plane.binaries.kubectl is not None
        subprocess.run([plane.binaries.kubectl, f"--kubeconfig={plane.kubeconfig}", "create",
                        "-f", str(VENDOR_CRD)], check=True, capture_output=True)
        return
    extra = ("--server-side=false",) if how == "helm-client-side" else ()
    helm("install", VENDOR_RELEASE, str(_vendor_chart(tmp_path)), "--namespace",
         VENDOR_NAMESPACE, *extra, kubeconfig=plane.kubeconfig)


def _served(api: KubeApi) -> dict[str, Any]:
    return wait_for(lambda: (crd := api.get(CRD_PATH)) and any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions") or []) and crd,
        timeout=60, what="the CRD established")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["helm", "helm-client-side", "kubectl"])
def test_a_vendor_crd_installed_first_is_never_touched(
    how: str, plane: ControlPlane, kube: KubeApi, tmp_path: Path
) -> None:
    _install_vendor_crd(how, plane, tmp_path)
    before = _served(kube)
    vendor = vendor_crd()
    assert before["metadata"]["annotations"] == {"controller-gen.kubebuilder.io/version":
                                                 "v0.18.0"}
    assert before["spec"]["versions"][0]["schema"] == vendor["spec"]["versions"][0]["schema"]

    helm("install", RELEASE, str(CHART), *OURS, kubeconfig=plane.kubeconfig)
    manifest = helm("get", "manifest", RELEASE, "--namespace", NAMESPACE,
                    kubeconfig=plane.kubeconfig).stdout
    assert "kind: CustomResourceDefinition" not in manifest, "not part of our release"
    helm("upgrade", RELEASE, str(CHART), *OURS, kubeconfig=plane.kubeconfig)
    helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait",
         kubeconfig=plane.kubeconfig)

    after = kube.get(CRD_PATH)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], (
        "not one write")
    assert after["spec"] == before["spec"]
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert after["metadata"].get("labels") == before["metadata"].get("labels")
    assert after["metadata"]["managedFields"] == before["metadata"]["managedFields"]


@pytest.mark.slow
def test_without_a_crd_the_release_makes_ours_and_keeps_it(plane: ControlPlane,
                                                           kube: KubeApi) -> None:
    helm("install", RELEASE, str(CHART), *OURS, kubeconfig=plane.kubeconfig)
    made = _served(kube)
    meta = made["metadata"]
    assert meta["annotations"]["meta.helm.sh/release-name"] == RELEASE
    assert meta["annotations"]["meta.helm.sh/release-namespace"] == NAMESPACE
    assert meta["annotations"]["helm.sh/resource-policy"] == "keep"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    # the release's CRD is the chart's file (deploy/crd.yaml), nothing lost on the way
    expected = cluster_operator_crd()
    assert made["spec"]["versions"][0]["schema"] == expected["spec"]["versions"][0]["schema"]

    # an upgrade keeps managing it (it is this release's); an uninstall leaves it
    helm("upgrade", RELEASE, str(CHART), *OURS, kubeconfig=plane.kubeconfig)
    manifest = helm("get", "manifest", RELEASE, "--namespace", NAMESPACE,
                    kubeconfig=plane.kubeconfig).stdout
    assert f"name: {CRD_NAME}" in manifest
    helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait",
         kubeconfig=plane.kubeconfig)
    kept = kube.get(CRD_PATH)
    assert kept["metadata"]["uid"] == made["metadata"]["uid"]


@pytest.mark.slow
def test_crd_install_false_makes_none(plane: ControlPlane, kube: KubeApi) -> None:
    helm("install", RELEASE, str(CHART), *OURS, "--set", "crd.install=false",
         kubeconfig=plane.kubeconfig)
    assert _missing(kube)
