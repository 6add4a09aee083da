"""Operator mode's health gate (docs/health.md): the vendor runs the rollout; the sync role runs the
same node checks on the nodes the vendor upgraded and, when one fails, commits ``pause: true``
with the reason and applies it to the cluster (``stop_vendor``; the vendor stops). Thin: it
lists, asks Prometheus, and records; the verdicts are ``reconciler.health.checks``'s and the
node selection ``reconciler.rollout.health_gate``'s. Its timers live in a node annotation, so a
restarted sync role resumes them.

The section is read at every pass from the commit the sync handled last (docs/health.md: ``health``
is read at every commit); one that does not validate fails closed: ``pause: true`` is committed
with the located error as the reason and a Warning Event ``HealthConfigInvalid`` is recorded,
once per error; the checks are never silently switched off.

Step checks are not run in this mode: the vendor's status gives the current step only as counts
(``currentStepIndex``, ``currentUpgradeReplicas``, ``currentUpgradeReadyReplicas``), never the
names of the step's nodes, and which nodes a step takes depends on its own node order, retries
and the rollout nodes frozen at its start, none of which it publishes (docs/rollout.md#status-fields
and docs/dev-cluster.md#what-the-vendor-operators-install-looks-like). A ``{{nodes}}`` guessed from
when the sync role saw pods turn Ready could name nodes of another step, so a step check could pass
or fail on the wrong nodes; and the vendor passes StepReady on its own, so the checks could not gate
it anyway. The node checks cover every node the vendor upgrades."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from reconciler.clock import Clock, wall
from reconciler.health.checks import (
    HealthConfig,
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
from reconciler.kube.observe import driver_pod_view, is_driver_pod, node_view
from reconciler.names import (
    ANN_VENDOR_HEALTH,
    GPU_NODE_LABEL,
    OPERATOR_NAMESPACE,
    SYNC_FIELD_MANAGER,
)
from reconciler.rollout.health_gate import VendorRecord, vendor_verifying
from reconciler.rollout.model import DriverPod
from reconciler.runtime.failures import RetryLater
from reconciler.runtime.worker import Worker
from reconciler.stored_status import upgrade_status_of
from reconciler.sync.drift import DriftRepair
from reconciler.sync.events import record_event
from reconciler.sync.fields import PAUSE

log = logging.getLogger(__name__)

#: ``on_failure(reason, live ClusterOperator)``: commit ``pause: true`` with the reason
OnFailure = Callable[[str, Mapping[str, Any]], None]

def stop_vendor(api: KubeApi, cluster_operator: str, drift: DriftRepair) -> None:
    """``pause: true`` applied to the cluster now, as the sync applies Git (the write-back
    commit says the same): the sync applies no commit of its own, and the vendor stops only
    once the cluster says so."""
    if drift.apply_now(PAUSE, True) is None:
        api.patch(cluster_operator_path(cluster_operator),
                  {"spec": {"driver": {"upgradePolicy": {"pause": True}}}},
                  field_manager=SYNC_FIELD_MANAGER)


#: how often the section is looked at again while there is none (or it does not validate)
IDLE_INTERVAL = 10.0
#: seconds to use instead of ``IDLE_INTERVAL`` (tests of ``reconciler run`` as a process watch
#: the passes go by instead of waiting 10 s for each)
IDLE_INTERVAL_ENV = "RECONCILER_HEALTH_IDLE_INTERVAL"


def configured_idle_interval(environ: Mapping[str, str] = os.environ) -> float:
    """``IDLE_INTERVAL``, or the positive finite number of seconds ``IDLE_INTERVAL_ENV`` gives."""
    try:
        given = float(environ.get(IDLE_INTERVAL_ENV, IDLE_INTERVAL))
    except ValueError:
        return IDLE_INTERVAL
    return given if math.isfinite(given) and given > 0 else IDLE_INTERVAL


class VendorHealthWatch:
    def __init__(self, api: KubeApi, *, cluster_operator: str,
                 section: HealthSection | Callable[[], HealthSection],
                 on_failure: OnFailure, on_invalid: OnFailure | None = None,
                 stop_vendor: Callable[[], None] | None = None, clock: Clock = wall,
                 query: Callable[[str], Reading] | None = None,
                 on_result: Callable[[str, str], None] | None = None,
                 is_leader: Callable[[], bool] = lambda: True,
                 idle_interval: float | None = None) -> None:
        """``section``: the section, or where to read the current one (the daemon's follows
        the commit the sync handled last). ``on_invalid(located error, live)``: commit
        ``pause: true`` because the section does not validate (default ``on_failure``).
        ``stop_vendor()``: after either, apply ``pause: true`` to the cluster now.
        ``idle_interval``: between looks without a valid section (default
        ``configured_idle_interval()``)."""
        self.api = api
        self.name = cluster_operator
        self._section = section if callable(section) else (lambda: section)
        self.on_failure = on_failure
        self.on_invalid = on_invalid or on_failure
        self.stop_vendor = stop_vendor
        self.clock = clock
        #: a fixed query function (tests); else one Prometheus client per URL and timeout
        self._fixed_query = query
        self._clients: dict[tuple[str, float], Callable[[str], Reading]] = {}
        self._on_result = on_result
        #: the invalid section reported (paused for) last; None once a valid one is read
        self._reported_invalid: str | None = None
        self.config: HealthConfig | None = None
        #: (node, check, query) -> (when read, reading): at most one query per interval
        self._cache: dict[tuple[str, str, str], tuple[float, Reading]] = {}
        self.queries = 0
        self.idle_interval = (idle_interval if idle_interval is not None
                              else configured_idle_interval())
        #: looks so far (tests wait for the next ones instead of for the interval)
        self.looks = 0
        # the loop every controller runs on; only the leader checks (and pauses the vendor)
        self.worker = Worker(
            self._look, name="vendor-health", clock=clock, is_leader=is_leader,
            ready=lambda: True, not_leader_requeue=self.idle_interval,
            failures=RetryLater(clock, what="operator-mode health checks",
                                retry=self._interval, logger=log),
        )

    def start(self) -> VendorHealthWatch:
        self.worker.start_thread()
        return self

    def stop(self) -> None:
        self.worker.stop_thread(10)

    def _interval(self) -> float:
        return self.config.interval if self.config is not None else self.idle_interval

    def _look(self) -> float:
        """One look, as the worker's pass; the next comes one check interval later."""
        self.run_once()
        self.looks += 1
        log.debug("operator mode: health section looked at (%d looks)", self.looks)
        return self.clock() + self._interval()

    def _query_for(self, config: HealthConfig) -> Callable[[str], Reading]:
        if self._fixed_query is not None:
            return self._fixed_query
        key = (config.prometheus_url, config.timeout)
        if key not in self._clients:
            self._clients = {key: PrometheusClient(key[0], timeout=key[1]).query}
        return self._clients[key]

    def run_once(self) -> None:
        section = self._section()
        if section.error is not None:
            self.config = None
            self._cache = {}
            if section.error != self._reported_invalid:
                self._fail_closed(section.error)
            return
        self._reported_invalid = None
        self.config = section.config
        if self.config is None or not self.config.node_checks:
            self._cache = {}
            return
        self._check(self.config)

    def _fail_closed(self, error: str) -> None:
        """docs/health.md: an invalid section stops the vendor (``pause: true`` with the located
        error), with a Warning Event; once per error."""
        co = self.api.get(cluster_operator_path(self.name))
        log.error("operator mode: health section invalid, committing pause: true: %s", error)
        record_event(self.api, self.name, co, reason="HealthConfigInvalid",
                     message=f"health section invalid, rollout paused: {error}", warning=True)
        self.on_invalid(error, co)
        if self.stop_vendor is not None:
            self.stop_vendor()
        self._reported_invalid = error

    def _check(self, config: HealthConfig) -> None:
        query = self._query_for(config)
        co = self.api.get(cluster_operator_path(self.name))
        status = upgrade_status_of(co)
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
            if all(c.name in stored.record.passed for c in config.node_checks):
                continue
            readings: dict[str, Reading] = {}
            for check, expr in pending_node_queries(config.node_checks, node.name,
                                                    version, stored.record).items():
                key = (node.name, check, expr)
                cached = self._cache.get(key)
                if cached is None or now - cached[0] >= config.interval:
                    cached = (now, query(expr))
                    self.queries += 1
                    self._count(config, check, cached[1])
                kept[key] = cached
                if cached[0] >= stored.record.started:
                    readings[check] = cached[1]
            health = node_health(config.node_checks, node.name, version, stored.record,
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
                if self.stop_vendor is not None:
                    self.stop_vendor()
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

    def _count(self, config: HealthConfig, check: str, value: Reading) -> None:
        if self._on_result is None:
            return
        found = next((c for c in config.node_checks if c.name == check), None)
        if found is not None:
            self._on_result(check, str(evaluate(found, value)).lower())
