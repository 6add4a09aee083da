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

# The driver DaemonSet's pods, and GPU nodes.
DRIVER_CONTAINER = "driver"
DRIVER_POD_LABEL = "app.kubernetes.io/name"  # value: DRIVER_DAEMONSET
REVISION_HASH_LABEL = "controller-revision-hash"
GPU_RESOURCE = "metax-tech.com/gpu"
VFIO_GPU_RESOURCE = "metax-tech.com/vfio-gpu"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"

# Firmware (SPEC 5): the driver-manager's Event, the reboot request and its acknowledgement
# (node annotations), and the VBIOS version label (docs/dev-cluster.md).
NODE_NEED_REBOOT_REASON = "NodeNeedReboot"
NODE_NEED_REBOOT_MESSAGE = "firmware upgrade done, need reboot machine to take effect"
REBOOT_REQUESTED_ANNOTATION = "gpu.metax-tech.com/reboot-requested"
REBOOTED_ANNOTATION = "gpu.metax-tech.com/rebooted"
VBIOS_VERSION_LABEL = "metax-tech.com/gpu.vbios.version"
