"""Names of the vendor operator's objects (SPEC section 2) and their API paths."""

from __future__ import annotations

from reconciler.kube.api import resource_path

GROUP = "gpu.metax-tech.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ClusterOperator"
PLURAL = "clusteroperators"
CLUSTER_OPERATOR_NAME = "cluster-operator"

OPERATOR_NAMESPACE = "metax-operator"
DRIVER_DAEMONSET = "metax-driver"
GPU_NODE_LABEL = "metax-tech.com/gpu.installed"

#: field managers of SPEC 4.6: the sync role and the rollout controller
SYNC_FIELD_MANAGER = "gpu-gitops-reconciler"
CONTROLLER_FIELD_MANAGER = "gpu-rollout-controller"


def cluster_operator_path(name: str | None = None, *, subresource: str | None = None) -> str:
    return resource_path(API_VERSION, PLURAL, name, subresource=subresource)
