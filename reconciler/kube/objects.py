"""Names of the vendor operator's objects (docs/policy.md#the-objects-in-the-cluster) and their API
paths."""

from __future__ import annotations

from reconciler.kube.api import resource_path
from reconciler.names import API_VERSION, PLURAL
from reconciler.names import (
    CLUSTER_OPERATOR_NAME as CLUSTER_OPERATOR_NAME,
)
from reconciler.names import (
    CONTROLLER_FIELD_MANAGER as CONTROLLER_FIELD_MANAGER,
)
from reconciler.names import (
    DRIVER_CONTAINER as DRIVER_CONTAINER,
)
from reconciler.names import (
    DRIVER_DAEMONSET as DRIVER_DAEMONSET,
)
from reconciler.names import (
    DRIVER_POD_LABEL as DRIVER_POD_LABEL,
)
from reconciler.names import (
    GPU_NODE_LABEL as GPU_NODE_LABEL,
)
from reconciler.names import (
    GPU_RESOURCE as GPU_RESOURCE,
)
from reconciler.names import (
    GROUP as GROUP,
)
from reconciler.names import (
    KIND as KIND,
)
from reconciler.names import (
    NODE_NEED_REBOOT_MESSAGE as NODE_NEED_REBOOT_MESSAGE,
)
from reconciler.names import (
    NODE_NEED_REBOOT_REASON as NODE_NEED_REBOOT_REASON,
)
from reconciler.names import (
    NOT_READY_TAINT as NOT_READY_TAINT,
)
from reconciler.names import (
    OPERATOR_NAMESPACE as OPERATOR_NAMESPACE,
)
from reconciler.names import (
    REBOOT_REQUESTED_ANNOTATION as REBOOT_REQUESTED_ANNOTATION,
)
from reconciler.names import (
    REBOOTED_ANNOTATION as REBOOTED_ANNOTATION,
)
from reconciler.names import (
    REVISION_HASH_LABEL as REVISION_HASH_LABEL,
)
from reconciler.names import (
    SYNC_FIELD_MANAGER as SYNC_FIELD_MANAGER,
)
from reconciler.names import (
    VBIOS_VERSION_LABEL as VBIOS_VERSION_LABEL,
)
from reconciler.names import (
    VERSION as VERSION,
)
from reconciler.names import (
    VFIO_GPU_RESOURCE as VFIO_GPU_RESOURCE,
)


def cluster_operator_path(name: str | None = None, *, subresource: str | None = None) -> str:
    return resource_path(API_VERSION, PLURAL, name, subresource=subresource)

