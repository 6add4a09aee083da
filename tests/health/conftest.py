"""Fixtures for GPU health tests: the fleet's MX Exporter stand-in scraped by a real Prometheus
server, started as `reconciler dev-cluster up --prometheus` starts them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.config.document import load
from reconciler.config.settings import resolve
from reconciler.health.section import HealthSection
from reconciler.sim.fleet import Fleet
from reconciler.sim.mx_exporter import MxExporter
from reconciler.sim.prometheus import PrometheusServer

# Short, so a fault shows within a second; dev-cluster uses 1 s for small fleets.
SCRAPE_INTERVAL = 0.5

PrometheusFactory = Callable[..., PrometheusServer]


def health_of(text: str, cluster: str | None = None) -> HealthSection:
    """The ``health`` section ``text`` (a reconciler.yaml) gives ``cluster``, as the daemon
    resolves it."""
    return resolve(load(text), cluster, source="test").health


@pytest.fixture
def prometheus_for(request: pytest.FixtureRequest) -> Iterator[PrometheusFactory]:
    """``prometheus_for(fleet, faulty_gpus=2)``: an exporter for the fleet and a Prometheus
    scraping it, both stopped after the test (the test fails if Prometheus is left running;
    its log is kept when the test failed)."""
    started: list[tuple[MxExporter, PrometheusServer]] = []

    def make(fleet: Fleet, **exporter_options: Any) -> PrometheusServer:
        exporter = MxExporter.for_fleet(fleet, **exporter_options).start()
        prometheus = PrometheusServer([exporter.scrape_target()],
                                      scrape_interval=SCRAPE_INTERVAL)
        started.append((exporter, prometheus))
        return prometheus.start()

    yield make
    failed = request.node.stash.get(_FAILED, False)
    left = []
    for exporter, prometheus in started:
        pid = prometheus.pid
        if failed:
            prometheus.mark_failed()
            print(f"\nprometheus log kept in {prometheus.workdir}")
        prometheus.stop()
        exporter.stop()
        if pid is not None and Path(f"/proc/{pid}").exists():
            left.append(pid)
    assert not left, f"prometheus still running: {left}"


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


def value(prometheus: PrometheusServer, expr: str) -> float | None:
    """The single sample ``expr`` returns, or None without one."""
    result = prometheus.query(expr)
    if len(result) != 1:
        return None
    return float(result[0]["value"][1])
