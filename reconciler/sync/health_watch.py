"""Operator mode's health gate (SPEC 9): the vendor runs the rollout; the sync role runs the
same node checks on the nodes the vendor upgraded and, when one fails, commits ``pause: true``
with the reason (the vendor stops once the sync applies it). Thin: it lists, asks Prometheus,
and records; the verdicts are ``reconciler.health.checks``'s and the node selection
``reconciler.rollout.health_gate``'s. Its timers live in a node annotation, so a restarted sync
role resumes them. Step checks are not run in this mode (the vendor decides its steps)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from reconciler.clock import Clock, wall
from reconciler.controller.observe import driver_pod_view, is_driver_pod, node_view
from reconciler.health.checks import (
    HealthState,
    Reading,
    evaluate,
    node_health,
    pending_node_queries,
)
from reconciler.health.prometheus import PrometheusClient
from reconciler.health.section import HealthSection
from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import ANN_VENDOR_HEALTH, GPU_NODE_LABEL, OPERATOR_NAMESPACE
from reconciler.rollout.health_gate import VendorRecord, vendor_verifying
from reconciler.rollout.model import DriverPod
from reconciler.sync.events import record_event

log = logging.getLogger(__name__)

#: ``on_failure(reason, live ClusterOperator)``: commit ``pause: true`` with the reason
OnFailure = Callable[[str, Mapping[str, Any]], None]


class VendorHealthWatch:
    def __init__(self, api: KubeApi, *, cluster_operator: str, section: HealthSection,
                 on_failure: OnFailure, clock: Clock = wall,
                 query: Callable[[str], Reading] | None = None,
                 on_result: Callable[[str, str], None] | None = None) -> None:
        assert section.config is not None
        self.api = api
        self.name = cluster_operator
        self.config = section.config
        self.on_failure = on_failure
        self.clock = clock
        self._query = query or PrometheusClient(self.config.prometheus_url,
                                                timeout=self.config.timeout).query
        self._on_result = on_result
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: (node, check, query) -> (when read, reading): at most one query per interval
        self._cache: dict[tuple[str, str, str], tuple[float, Reading]] = {}
        self.queries = 0

    def start(self) -> VendorHealthWatch:
        self._thread = threading.Thread(target=self._run, name="vendor-health", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # one failed look is retried at the next interval
                log.exception("operator-mode health checks: a pass failed")
            self._stop.wait(self.config.interval)

    def run_once(self) -> None:
        co = self.api.get(cluster_operator_path(self.name))
        status = (co.get("status") or {}).get("upgradeStatus") or {}
        revision, nodes = vendor_verifying(self._nodes(), status)
        payload = ((status.get("lastAppliedSpec") or {}).get("payload")
                   or ((co.get("spec") or {}).get("driver") or {}).get("payload") or {})
        version = str(payload.get("version") or "")
        kept: dict[tuple[str, str, str], tuple[float, Reading]] = {}
        for node in nodes:
            now = self.clock()
            stored = VendorRecord.read(node, revision, now)
            if stored.failure is not None:
                continue  # reported once; a person decides
            if not stored.stored:
                self._annotate(node.name, stored.to_text())  # the checks start now
                continue
            if all(c.name in stored.record.passed for c in self.config.node_checks):
                continue
            readings: dict[str, Reading] = {}
            for check, query in pending_node_queries(self.config.node_checks, node.name,
                                                     version, stored.record).items():
                key = (node.name, check, query)
                cached = self._cache.get(key)
                if cached is None or now - cached[0] >= self.config.interval:
                    cached = (now, self._query(query))
                    self.queries += 1
                    self._count(check, cached[1])
                kept[key] = cached
                if cached[0] >= stored.record.started:
                    readings[check] = cached[1]
            health = node_health(self.config.node_checks, node.name, version, stored.record,
                                 readings, now)
            failure = health.failure
            result = VendorRecord(revision, health.record,
                                  failure.message if failure is not None else None)
            if result.to_text() != node.annotations.get(ANN_VENDOR_HEALTH):
                self._annotate(node.name, result.to_text())
            if failure is not None:
                log.warning("operator mode: %s; committing pause: true", failure.message)
                record_event(self.api, self.name, co, reason="HealthCheckFailed",
                             message=failure.message, warning=True)
                self.on_failure(failure.message, co)
            elif health.state is HealthState.PASSED:
                record_event(self.api, self.name, co, reason="HealthCheckPassed",
                             message=f"{node.name}: node health checks passed on the vendor's "
                                     f"upgrade")
        self._cache = kept

    def _nodes(self) -> list[Any]:
        nodes = self.api.list(resource_path("v1", "nodes"),
                              query={"labelSelector": f"{GPU_NODE_LABEL}=true"})["items"]
        pods = self.api.list(resource_path("v1", "pods", namespace=OPERATOR_NAMESPACE))["items"]
        by_node: dict[str, list[DriverPod]] = {}
        for pod in pods:
            if is_driver_pod(pod):
                node = str((pod.get("spec") or {}).get("nodeName") or "")
                by_node.setdefault(node, []).append(driver_pod_view(pod))
        views = []
        for node in nodes:
            name = str(node["metadata"]["name"])
            candidates = [p for p in by_node.get(name, []) if not p.deleting]
            pod = max(candidates, key=lambda p: p.created_at) if candidates else None
            views.append(node_view(node, pod))
        return views

    def _annotate(self, node: str, text: str) -> JSON:
        return self.api.patch(f"/api/v1/nodes/{node}",
                              {"metadata": {"annotations": {ANN_VENDOR_HEALTH: text}}})

    def _count(self, check: str, value: Reading) -> None:
        if self._on_result is None:
            return
        found = next((c for c in self.config.node_checks if c.name == check), None)
        if found is not None:
            self._on_result(check, str(evaluate(found, value)).lower())
