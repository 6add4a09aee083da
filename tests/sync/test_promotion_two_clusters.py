"""The issue's end-to-end promotion (docs/configuration.md#promotion): two dev clusters (two control
planes, each a small simulated fleet), one repository (a bare remote) and two ``reconciler run``
daemons, one per cluster folder. lab-1 completes 2.33.0.9; a pull request bumping prod-a before the
soak fails ``reconciler validate --against origin/main`` with ``promotion-gate``; merged anyway, it
is held (prod-a untouched, an Event, the snapshot); a rollback on lab-1 before the soak ends keeps
it held past the soak; once lab-1 completed it again, it is applied by itself when the soak passed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.events import EVENT_NAMESPACE
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from reconciler.timefmt import parse_time_or_none
from tests.policy.commands import validate_bounded
from tests.sync.conftest import NEW, OLD, PAYLOAD, REPO_CONFIG, Person, Remote, git, policy
from tests.sync.daemon import Daemon, wait_port_ready
from tests.sync.helpers import cluster_operator, driver, source_commit, status_file

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
SOAK = 20
LAB = "clusters/lab-1/cluster-operator.yaml"
PROD = "clusters/prod-a/cluster-operator.yaml"
CONFIG = REPO_CONFIG + f"clusters:\n  prod-a:\n    promotion: {{after: lab-1, soak: {SOAK}s}}\n"


def _policy(version: str) -> str:
    return policy(version, first_pause="0")  # no manual gate: a rollout runs to its end


@pytest.fixture(scope="module")
def prod_plane() -> Iterator[ControlPlane]:
    """prod-a's own control plane (lab-1 runs on the session's)."""
    with ControlPlane() as plane:
        yield plane


@pytest.fixture
def prod_kube(prod_plane: ControlPlane) -> Iterator[KubeApi]:
    api = prod_plane.api(pool_size=16)
    yield api
    api.close()


@pytest.fixture
def fleets(kube: KubeApi, prod_kube: KubeApi) -> Iterator[tuple[Fleet, Fleet]]:
    started = [Fleet(api, nodes=2, payload=PAYLOAD, install_seconds=0.2).start()
               for api in (kube, prod_kube)]
    for fleet in started:
        wait_for(lambda f=fleet: len(f.ready_driver_nodes(OLD)) == 2,  # type: ignore[misc]
                 timeout=60, what="2 Ready driver pods")
    yield started[0], started[1]
    for fleet in started:
        fleet.stop(cleanup=True)
        assert not fleet.errors, fleet.errors


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    remote = Remote(tmp_path / "server")
    seeder = Person(remote.url, tmp_path / "seed", name="Sam Seeder")
    seeder.commit("Add lab-1 and prod-a, prod-a after lab-1",
                  {"reconciler.yaml": CONFIG, LAB: _policy(OLD), PROD: _policy(OLD)})
    seeder.push()
    return remote


def _daemon(remote: Remote, cluster: str, kubeconfig: Path, workdir: Path) -> Daemon:
    return Daemon(["--repo", remote.url, "--cluster", cluster, "--kubeconfig", str(kubeconfig),
                   "--fetch-interval", "300ms", "--ready-timeout", "30s",
                   "--webhook-repository", "example/policy"], workdir=workdir, name=cluster)


def _merge(person: Person) -> str:
    """Push the branch's commits to main, rebasing on a race (as people do)."""
    for _ in range(20):
        git(person.dir, "pull", "-q", "--rebase", "origin", "main")
        try:
            git(person.dir, "push", "-q", "origin", "HEAD:main")
        except AssertionError:
            continue
        return git(person.dir, "rev-parse", "HEAD")
    raise AssertionError("could not push")


def _last_rollout(remote: Remote, cluster: str) -> dict[str, Any]:
    return dict((status_file(remote, cluster) or {}).get("lastRollout") or {})


def _completed(remote: Remote, version: str, after: float = 0.0) -> float | None:
    """lab-1's ``finishedAt`` once its snapshot says it completed ``version`` after ``after``."""
    record = _last_rollout(remote, "lab-1")
    finished = parse_time_or_none(record.get("finishedAt"))
    if record.get("version") != version or record.get("result") != "Completed":
        return None
    return finished if finished is not None and finished > after else None


def _wait_completed(remote: Remote, version: str, after: float = 0.0) -> float:
    finished = wait_for(lambda: _completed(remote, version, after), timeout=90,
                        what=f"lab-1 completed {version}",
                        observe=lambda: status_file(remote, "lab-1"))
    assert finished is not None
    return finished


def _held(remote: Remote) -> dict[str, Any] | None:
    held = ((status_file(remote, "prod-a") or {}).get("promotion") or {}).get("held")
    return dict(held) if isinstance(held, dict) else None


def _events(api: KubeApi, reason: str) -> list[str]:
    items = api.list(resource_path("v1", "events", namespace=EVENT_NAMESPACE))["items"]
    return [e["message"] for e in items if e.get("reason") == reason]


def test_two_clusters_promote_through_git_only_after_the_lab_completed_and_soaked(
    kube: KubeApi, control_plane: ControlPlane, prod_plane: ControlPlane, prod_kube: KubeApi,
    fleets: tuple[Fleet, Fleet], remote: Remote, tmp_path: Path,
) -> None:
    _, prod_fleet = fleets
    seed = remote.head()
    alice = Person(remote.url, tmp_path / "alice", name="Alice Operator")
    daemons = [_daemon(remote, "lab-1", control_plane.kubeconfig, tmp_path),
               _daemon(remote, "prod-a", prod_plane.kubeconfig, tmp_path)]
    try:
        for daemon in daemons:
            wait_port_ready(daemon)
        for api in (kube, prod_kube):
            wait_for(lambda a=api: source_commit(a) == seed,  # type: ignore[misc]
                     timeout=30, what="the seed applied")
        # lab-1 completes 2.33.0.9
        alice.commit(f"Upgrade lab-1 to {NEW}", {LAB: _policy(NEW)})
        _merge(alice)
        first = _wait_completed(remote, NEW)
        # a pull request bumping prod-a before the soak fails validation against main
        git(alice.dir, "checkout", "-q", "-b", "bump-prod")
        alice.commit(f"Upgrade prod-a to {NEW}", {PROD: _policy(NEW)})
        git(alice.dir, "fetch", "-q", "origin")
        checked = validate_bounded(alice.dir, "--against", "origin/main")
        assert checked.returncode == 1, checked.stdout + checked.stderr
        assert "[promotion-gate]" in checked.stdout and "upstream lab-1" in checked.stdout
        # merged anyway: held, prod-a untouched
        merge = _merge(alice)
        events = wait_for(lambda: [m for m in _events(prod_kube, "PromotionHeld")
                                   if merge[:12] in m], timeout=20, what="the held Event")
        assert "held by promotion gate" in events[0]
        held = wait_for(lambda: _held(remote), timeout=20, what="the hold in prod-a's snapshot")
        assert held is not None
        assert held["version"] == NEW and held["upstream"] == "lab-1"
        assert held["commit"] == merge
        assert driver(prod_kube)["payload"]["version"] == OLD
        assert source_commit(prod_kube) != merge
        # a rollback on lab-1 before the soak ends keeps prod-a held past it
        alice.commit(f"Roll lab-1 back to {OLD}", {LAB: _policy(OLD)})
        _merge(alice)
        wait_for(lambda: _last_rollout(remote, "lab-1").get("version") != NEW
                 or (status_file(remote, "lab-1") or {}).get("upgradeStatus", {}).get(
                     "phase") == "Progressing", timeout=20, what="lab-1's rollback in Git",
                 observe=lambda: (cluster_operator(kube).get("status"), driver(kube)))
        assert time.time() < first + SOAK, "the rollback reached Git inside the soak"
        _wait_completed(remote, OLD)
        time.sleep(max(0.0, first + SOAK + 3 - time.time()))
        assert driver(prod_kube)["payload"]["version"] == OLD
        assert source_commit(prod_kube) != merge
        assert sorted(prod_fleet.ready_driver_nodes(OLD)) == prod_fleet.node_names
        assert (_held(remote) or {}).get("version") == NEW
        # lab-1 completes 2.33.0.9 again: applied by itself once the soak passed
        alice.commit(f"Upgrade lab-1 to {NEW} again", {LAB: _policy(NEW)})
        _merge(alice)
        second = _wait_completed(remote, NEW, after=first)
        wait_for(lambda: driver(prod_kube)["payload"]["version"] == NEW, timeout=SOAK + 30,
                 what="the held change applied")
        assert time.time() >= second + SOAK
        # by itself: the newest commit that touched prod-a's folder is still the merge
        assert git(remote.path, "log", "-1", "--format=%H", "main", "--",
                   "clusters/prod-a") == merge
        wait_for(lambda: len(prod_fleet.ready_driver_nodes(NEW)) == 2, timeout=90,
                 what="prod-a upgraded", observe=prod_fleet.driver_pods)
        wait_for(lambda: _held(remote) is None, timeout=20, what="a snapshot without the hold")
    finally:
        # every daemon stopped before any assertion about how
        codes = []
        for daemon in daemons:
            try:
                codes.append((daemon.stop(), daemon))
            except AssertionError as exc:
                codes.append((str(exc), daemon))
        for code, daemon in codes:
            assert code == 0, daemon.log()[-3000:]
