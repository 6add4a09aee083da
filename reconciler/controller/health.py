"""The controller's thin health step before each plan (docs/health.md): ask Prometheus the pending
checks only, at most once per check and node (or step) per ``health.interval``, and hand the
latest readings, with the time each was read, to the planner's snapshot. The planner decides.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from reconciler.clock import Clock, wall
from reconciler.health.checks import NodeCheck, Reading, StepCheck, evaluate
from reconciler.health.prometheus import PrometheusClient
from reconciler.health.section import HealthSection
from reconciler.rollout.health_gate import pending_queries
from reconciler.rollout.model import HealthInput, HealthReading, RolloutSnapshot

log = logging.getLogger(__name__)

#: (node or None for the step, check name, the query as sent)
_Key = tuple[str | None, str, str]


class HealthFeeder:
    """Readings cached with their time; an entry no longer pending is dropped, so a reading
    never outlives the wait it belonged to."""

    def __init__(self, section: HealthSection | Callable[[], HealthSection], *,
                 clock: Clock = wall, query: Callable[[str], Reading] | None = None,
                 on_result: Callable[[str, str], None] | None = None) -> None:
        """``section``: the section, or where to read the current one (the daemon's: the live
        view of reconciler.yaml, docs/health.md reads ``health`` at every commit)."""
        self._section = section if callable(section) else (lambda: section)
        self.clock = clock
        #: a fixed query function (tests); else one Prometheus client per URL and timeout
        self._fixed_query = query
        self._clients: dict[tuple[str, float], Callable[[str], Reading]] = {}
        self._on_result = on_result
        self._cache: dict[_Key, HealthReading] = {}
        #: queries sent (for tests and benchmarks: at most one per key per interval)
        self.queries = 0

    @property
    def section(self) -> HealthSection:
        return self._section()

    def _query_for(self, url: str, timeout: float) -> Callable[[str], Reading]:
        if self._fixed_query is not None:
            return self._fixed_query
        key = (url, timeout)
        if key not in self._clients:
            self._clients = {key: PrometheusClient(url, timeout=timeout).query}
        return self._clients[key]

    def feed(self, snapshot: RolloutSnapshot) -> RolloutSnapshot:
        section = self.section
        if not section.present:
            self._cache = {}
            return snapshot
        config = section.config
        if config is None:
            return dataclasses.replace(snapshot, health=HealthInput(None, error=section.error))
        query = self._query_for(config.prometheus_url, config.timeout)
        checks: dict[str, NodeCheck | StepCheck] = {c.name: c for c in config.node_checks}
        checks.update((c.name, c) for c in config.step_checks)
        bare = dataclasses.replace(snapshot, health=HealthInput(config))
        kept: dict[_Key, HealthReading] = {}
        nodes: dict[str, dict[str, HealthReading]] = {}
        step: dict[str, HealthReading] = {}
        for pending in pending_queries(bare):
            key = (pending.node, pending.check, pending.query)
            reading = self._cache.get(key)
            now = self.clock()
            if reading is None or now - reading.at >= config.interval:
                reading = HealthReading(now, query(pending.query))
                self.queries += 1
                self._count(checks.get(pending.check), reading.value)
            kept[key] = reading
            if pending.node is None:
                step[pending.check] = reading
            else:
                nodes.setdefault(pending.node, {})[pending.check] = reading
        self._cache = kept
        return dataclasses.replace(snapshot, health=HealthInput(config, nodes, step))

    def _count(self, check: NodeCheck | StepCheck | None, value: Reading) -> None:
        if check is None or self._on_result is None:
            return
        self._on_result(check.name, str(evaluate(check, value)).lower())
