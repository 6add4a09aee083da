"""Kubernetes Events on the ClusterOperator from the sync role (what ``kubectl describe``
shows next to the rollout controller's own events)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.clock import wall
from reconciler.fieldpath import section
from reconciler.kube import events
from reconciler.kube.api import KubeApi
from reconciler.names import SYNC_FIELD_MANAGER


def record_event(
    api: KubeApi, cluster_operator: str, live: Mapping[str, Any] | None, *, reason: str,
    message: str, warning: bool = False, clock: float | None = None,
) -> None:
    """Best effort: an event is information, never a reason to stop syncing."""
    meta = dict(section(live, ("metadata",)))
    meta["name"] = cluster_operator
    events.record_event(api, events.cluster_operator_event(
        {"metadata": meta}, reason=reason, message=message,
        type="Warning" if warning else "Normal", component=SYNC_FIELD_MANAGER,
        now=clock if clock is not None else wall(),
    ))
