"""Kubernetes Events on the ClusterOperator (what `kubectl describe` shows)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.names import API_VERSION, KIND
from reconciler.timefmt import format_seconds

log = logging.getLogger(__name__)

#: Events of a cluster-scoped object live in this namespace (as kubectl describe expects).
EVENT_NAMESPACE = "default"


def cluster_operator_event(
    cluster_operator: Mapping[str, Any],
    *,
    reason: str,
    message: str,
    type: str,
    component: str,
    now: float,
) -> JSON:
    meta = cluster_operator.get("metadata") or {}
    name = str(meta.get("name"))
    stamp = format_seconds(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.{uuid.uuid4().hex[:16]}",
            "namespace": EVENT_NAMESPACE,
            "labels": {"app.kubernetes.io/component": component},
        },
        "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": name,
                           **({"uid": meta["uid"]} if meta.get("uid") else {})},
        "reason": reason,
        "message": message[:1024],
        "type": type,
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": component,
    }


def record_event(api: KubeApi, event: JSON) -> None:
    """Creates the Event; a failure is logged, never raised: an Event is information and never a
    reason to stop a rollout."""
    try:
        api.create(resource_path("v1", "events", namespace=EVENT_NAMESPACE), event)
    except Exception as exc:
        log.warning("could not record event %s: %s", event.get("reason"), exc)
