"""Kubernetes Events on the ClusterOperator from the sync role (what ``kubectl describe``
shows next to the rollout controller's own events)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.objects import API_VERSION, KIND, SYNC_FIELD_MANAGER

log = logging.getLogger(__name__)

#: Events of a cluster-scoped object live in this namespace (as the controller's do).
EVENT_NAMESPACE = "default"


def record_event(
    api: KubeApi, cluster_operator: str, live: Mapping[str, Any] | None, *, reason: str,
    message: str, warning: bool = False, clock: float | None = None,
) -> None:
    """Best effort: an event is information, never a reason to stop syncing."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock or time.time()))
    uid = ((live or {}).get("metadata") or {}).get("uid")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{cluster_operator}.{uuid.uuid4().hex[:16]}",
            "namespace": EVENT_NAMESPACE,
            "labels": {"app.kubernetes.io/component": SYNC_FIELD_MANAGER},
        },
        "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": cluster_operator,
                           **({"uid": uid} if uid else {})},
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": SYNC_FIELD_MANAGER},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "reportingComponent": SYNC_FIELD_MANAGER,
    }
    try:
        api.create(resource_path("v1", "events", namespace=EVENT_NAMESPACE), event)
    except Exception as exc:
        log.warning("could not record event %s: %s", reason, exc)
