"""Fixtures of the controller's tests on the real control plane."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from reconciler.kube.api import KubeApi, resource_path
from reconciler.sim.waiting import wait_for
from tests.conftest import FleetFactory

_serial = itertools.count(1)


@pytest.fixture
def workload_namespace(kube: KubeApi, fleet_factory: FleetFactory) -> Iterator[str]:
    """A namespace of its own for Deployments, DaemonSets, Jobs and budgets; their pods are
    gone before the fleet (set up before, torn down after) stops, so nothing lands on another
    test's nodes."""
    name = f"drain-{next(_serial)}-{int(time.monotonic() * 1000) % 100000}"
    kube.create(resource_path("v1", "namespaces"),
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    for plural, version in (("deployments", "apps/v1"), ("daemonsets", "apps/v1"),
                            ("jobs", "batch/v1"), ("poddisruptionbudgets", "policy/v1")):
        kube.request("DELETE", resource_path(version, plural, namespace=name),
                     body={"kind": "DeleteOptions", "apiVersion": "v1",
                           "propagationPolicy": "Background"})

    def leftovers() -> list[str]:
        return [f"{kind}/{item['metadata']['name']}"
                for kind, path in (("rs", resource_path("apps/v1", "replicasets", namespace=name)),
                                   ("pod", resource_path("v1", "pods", namespace=name)))
                for item in kube.list(path)["items"]]

    # pods still terminating are ended at once: their fleet stops next
    kube.request("DELETE", resource_path("v1", "pods", namespace=name),
                 query={"gracePeriodSeconds": 0})
    wait_for(lambda: not leftovers(), timeout=30, what=f"{name} emptied", observe=leftovers)
    kube.delete(resource_path("v1", "namespaces", name))
