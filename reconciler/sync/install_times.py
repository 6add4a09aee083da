"""The install time the cluster's last rollout measured, for the status snapshot's ``fleet``
(docs/plan.md: ``reconciler plan`` predicts the next rollout with it).

Measured once per completed rollout: when the status says a rollout ended ``Completed`` (no
``RolledBack``) on a revision not measured yet, the driver pods on that revision are listed
once; each Ready one gives the seconds from its creation (the old pod's deletion, within the
API's latency) to its Ready condition. The mean of those is the figure; the status writer keeps
it (in Git) until the next rollout completes.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.kube.api import KubeApi, KubeError, resource_path
from reconciler.kube.observe import is_driver_pod, parse_timestamp
from reconciler.names import OPERATOR_NAMESPACE, REVISION_LABEL, TERMINAL_PHASES
from reconciler.stored_status import condition_in_force

log = logging.getLogger(__name__)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def completed_revision(upgrade: Mapping[str, Any]) -> str | None:
    """The revision a rollout that ended ``Completed`` brought (None: no such ending here)."""
    inner = _mapping(upgrade.get("status"))
    if upgrade.get("phase") not in TERMINAL_PHASES or inner.get("currentStepState") != \
            "Completed":
        return None
    if condition_in_force(upgrade, "RolledBack"):
        return None
    revision = inner.get("lastPodSpecRevision")
    return str(revision) if revision else None


def _on_revision(pod_revision: str, revision: str) -> bool:
    # builtin mode records the DaemonSet's revision hash; the vendor's status may name the
    # ControllerRevision (``metax-driver-<hash>``)
    return bool(pod_revision) and (pod_revision == revision or
                                   revision.endswith("-" + pod_revision))


def mean_install_seconds(pods: Iterable[Mapping[str, Any]], revision: str) -> float | None:
    """Mean seconds from creation to Ready of the Ready driver pods on ``revision``; None when
    none is."""
    samples: list[float] = []
    for pod in pods:
        meta = _mapping(pod.get("metadata"))
        if not _on_revision(str(_mapping(meta.get("labels")).get(REVISION_LABEL) or ""),
                            revision) or meta.get("deletionTimestamp"):
            continue
        created = parse_timestamp(meta.get("creationTimestamp"))
        ready = next((c for c in _mapping(pod.get("status")).get("conditions") or ()
                      if _mapping(c).get("type") == "Ready" and c.get("status") == "True"),
                     None)
        if ready is None or not created:
            continue
        since = parse_timestamp(ready.get("lastTransitionTime"))
        if since >= created:
            samples.append(since - created)
    if not samples:
        return None
    # API timestamps are whole seconds: a pod Ready within its first second measures 0
    return round(max(statistics.fmean(samples), 0.5), 1)


class InstallTimes:
    """The measurement of the newest completed rollout, kept while the sync role runs."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._revision: str | None = None
        self._seconds: float | None = None

    def measured(self, upgrade: Mapping[str, Any]) -> float | None:
        """The mean install time of the rollout ``upgrade`` says completed (listing its pods
        the first time); None until one completed while this process ran (the snapshot in Git
        keeps the earlier figure)."""
        revision = completed_revision(upgrade)
        if revision is None or revision == self._revision:
            return self._seconds
        try:
            pods = self.api.list(resource_path("v1", "pods", namespace=OPERATOR_NAMESPACE))
        except KubeError as exc:
            log.warning("measuring the last rollout's install time: %s", exc)
            return self._seconds
        seconds = mean_install_seconds(
            (pod for pod in pods.get("items") or () if is_driver_pod(pod)), revision)
        self._revision = revision
        if seconds is not None:
            self._seconds = seconds
        return self._seconds
