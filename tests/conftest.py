"""Shared fixtures: one real control plane per test session, a fresh simulated fleet per test,
and waits that say what they saw when they time out.

Tests that need the control plane are marked ``@pytest.mark.cluster``; they need the binaries
``scripts/install-kubernetes`` builds (or ``KUBE_BIN_DIR``).

``scripts/test`` runs test files side by side (pytest-xdist, ``--dist loadfile``): each worker
is a session of its own, so it starts a control plane of its own (on free loopback ports, in
temporary directories of its own) and nothing here is shared between workers. Files with tests
marked ``slow`` go first, then those marked ``cluster``, so the long ones do not start last; the
tests of ``SPREAD_FILES`` go out one by one instead of as a whole file.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reconciler.kube.api import KubeApi, resource_path
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import WaitTimeout, wait_for
from tests.planes import serve_plane

__all__ = ["WaitTimeout", "wait_for"]


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler for the whole session,
    with the workload controllers (Deployments, Jobs, disruption budgets: they act on nothing
    but those, which only tests of workloads create). Its logs are kept (path printed) when any
    test of the session failed."""
    yield from serve_plane(request, ControlPlane(workload_controllers=True))


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Iterator[KubeApi]:
    """A JSON client with the admin identity."""
    api = control_plane.api(pool_size=40)
    yield api
    api.close()


#: files of many long tests that share nothing but the session's fixtures (each runs the CLI as
#: child processes, CPU-bound): side by side, their tests are spread over the workers one by
#: one; as whole files, the largest alone took a worker for 17 minutes on a loaded machine
SPREAD_FILES = frozenset({
    "tests/policy/test_cli_numbers.py",
    "tests/policy/test_hostile_files.py",
    "tests/policy/test_cli.py",
})


def _scope(nodeid: str) -> str:
    """A test's work unit: its file, or the test itself in ``SPREAD_FILES``."""
    file = nodeid.split("::", 1)[0]
    return nodeid if file in SPREAD_FILES else file


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, but the tests of ``SPREAD_FILES`` are work units of their own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesExceptSpread(LoadFileScheduling):  # type: ignore[misc]  # xdist is untyped
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return FilesExceptSpread(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with slow tests first, then files with cluster tests, then the rest; in collection
    order otherwise (a file's tests keep theirs). Every worker sorts alike, as xdist needs."""
    rank: dict[str, int] = {}
    for item in items:
        file = item.nodeid.split("::", 1)[0]
        mine = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker(
            "cluster") else 2
        rank[file] = min(rank.get(file, mine), mine)
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])


FleetFactory = Callable[..., Fleet]


@pytest.fixture
def fleet_factory(kube: KubeApi) -> Iterator[FleetFactory]:
    """``fleet_factory(nodes=3, faults=[...], ...)`` starts a fleet on the session's control
    plane; every fleet is stopped and cleaned away after the test, which fails if the fleet's
    own work failed or left a thread behind."""
    fleets: list[Fleet] = []

    def make(**options: Any) -> Fleet:
        options.setdefault("install_seconds", 0.3)
        fleet = Fleet(kube, **options)
        fleets.append(fleet)
        return fleet.start()

    yield make
    problems = []
    for fleet in fleets:
        fleet.stop(cleanup=True)
        if fleet.threads():
            problems.append(f"threads left running: {fleet.threads()}")
        if fleet.errors:
            problems.append(f"fleet task errors: {fleet.errors}")
    assert not problems, problems


@pytest.fixture
def fleet(fleet_factory: FleetFactory) -> Fleet:
    """Ten GPU nodes (``node-0001`` ... ``node-0010``) with the operator installed and every
    driver pod Ready."""
    started = fleet_factory(nodes=10)
    wait_for(lambda: len(started.ready_driver_nodes()) == 10, timeout=60,
             what="10 Ready driver pods", observe=started.driver_pods)
    return started


_serial = itertools.count(1)


@pytest.fixture
def workload_namespace(kube: KubeApi, fleet_factory: FleetFactory) -> Iterator[str]:
    """A namespace of its own for Deployments, DaemonSets, Jobs and budgets (the drain's tests
    and the simulator's workload tests); their pods are gone before the fleet (set up before,
    torn down after) stops, so nothing lands on another test's nodes."""
    name = f"workloads-{next(_serial)}-{int(time.monotonic() * 1000) % 100000}"
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
