"""What the cluster's last rollout measured of its fleet, for the status snapshot's ``fleet``
(docs/plan.md: ``reconciler plan`` predicts the next rollout with it).

The install time: measured once per completed rollout: when the status says a rollout ended
``Completed`` (no ``RolledBack``) on a revision not measured yet, the driver pods on that revision
are listed once; each Ready one gives the seconds from its creation (the old pod's deletion,
within the API's latency) to its Ready condition. The mean of those is the figure; the status
writer keeps it (in Git) until the next rollout completes.

The topology domains (``rollout.topology``, docs/rollout.md#topology-aware-waves): the rollout
nodes as the controller counts them (GPU nodes, those labelled ``upgrade.skip=true`` left out)
counted by the value of the topology key, ``(no label)`` for a node without it. Counted once per
process, per key and per completed rollout (a node list each time: at 10,000 nodes a few MB, far
from every status write).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.kube.api import KubeApi, KubeError, resource_path
from reconciler.kube.observe import is_driver_pod, parse_timestamp
from reconciler.names import (
    GPU_NODE_LABEL,
    LABEL_UPGRADE_SKIP,
    OPERATOR_NAMESPACE,
    REVISION_LABEL,
    TERMINAL_PHASES,
)
from reconciler.rollout.topology import UNLABELLED
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


def count_domains(nodes: Iterable[Mapping[str, Any]], key: str) -> dict[str, int]:
    """The rollout nodes among ``nodes`` (GPU nodes not labelled ``upgrade.skip=true``, as
    the controller's N), counted by their label ``key`` (``(no label)`` without it), in name
    order of the domains."""
    counts: dict[str, int] = {}
    for node in nodes:
        labels = _mapping(_mapping(_mapping(node).get("metadata")).get("labels"))
        if labels.get(GPU_NODE_LABEL) != "true" or labels.get(LABEL_UPGRADE_SKIP) == "true":
            continue
        value = labels.get(key)
        domain = UNLABELLED if value is None else str(value)
        counts[domain] = counts.get(domain, 0) + 1
    return dict(sorted(counts.items()))


class FleetMeasures:
    """The measurements of the newest completed rollout, kept while the sync role runs."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._revision: str | None = None
        self._seconds: float | None = None
        #: the newest completed revision seen (a rollout that starts or rolls back keeps it)
        self._completed: str | None = None
        #: (key, completed revision) of the domains counted last, and the count
        self._domains_of: tuple[str, str | None] | None = None
        self._domains: dict[str, Any] | None = None

    def domains(self, key: str | None, upgrade: Mapping[str, Any]) -> dict[str, Any] | None:
        """``{key, nodes: {domain: count}}`` for the topology ``key`` in force (None: no
        topology, or the nodes cannot be listed now)."""
        if key is None:
            return None
        self._completed = completed_revision(upgrade) or self._completed
        of = (key, self._completed)
        if of == self._domains_of:
            return self._domains
        try:
            nodes = self.api.list(resource_path("v1", "nodes"),
                                  query={"labelSelector": f"{GPU_NODE_LABEL}=true"})
        except KubeError as exc:
            log.warning("counting the rollout nodes by %s: %s", key, exc)
            return self._domains if self._domains_of and self._domains_of[0] == key else None
        counts = count_domains(nodes.get("items") or (), key)
        self._domains_of = of
        self._domains = {"key": key, "nodes": counts} if counts else None
        return self._domains

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
