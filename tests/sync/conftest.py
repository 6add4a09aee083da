"""Real Git remotes (bare repositories over file://, ``git daemon`` on loopback), the real
control plane, the simulated fleet, and the sync role, in process or as ``reconciler run``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.policy.payload import Payload
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from reconciler.sync.loop import ClusterSync
from tests.gitops.conftest import GitDaemon, Person, Remote, git, git_identity
from tests.loops import started_loops

__all__ = ["GitDaemon", "Person", "Remote", "git", "git_identity"]

OLD = "2.32.0.6"
NEW = "2.33.0.9"
REGISTRY = "cr.metax-tech.com/public-library"
PAYLOAD = Payload(registry=REGISTRY, name="driver-image", version=OLD)
CLUSTER = "prod-a"
POLICY_PATH = f"clusters/{CLUSTER}/cluster-operator.yaml"

REPO_CONFIG = """\
# reconciler settings for this repository
sync:
  fetchInterval: 30s
  statusMinInterval: 300ms
"""


def policy(version: str = OLD, *, pause: bool = False, max_parallel: str = '"100%"',
           first_pause: str | None = None, enable: bool = True) -> str:
    """The 10-node scenario's policy file, as a person writes it (comments included). The
    canary's gate is a step without pauseDuration (the vendor's CRD types it as an integer);
    ``first_pause`` gives it one instead."""
    canary = ("        - replicas: 1    # no pauseDuration: a person confirms the canary\n"
              if first_pause is None else
              f"        - replicas: 1\n          pauseDuration: {first_pause}\n")
    return f"""\
# GPU driver policy for {CLUSTER}: one canary behind a manual gate, then the rest.
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
spec:
  driver:
    payload:
      name: driver-image
      registry: {REGISTRY}
      version: {version}   # the driver the fleet should run
      pullPolicy: IfNotPresent
    upgradePolicy:
      enableRollout: {str(enable).lower()}
      pause: {str(pause).lower()}
      upgradeSteps:
{canary}        - replicas: "50%"
          pauseDuration: 0
        - replicas: "100%"
          pauseDuration: 0
      maxParallel: {max_parallel}
      maxFailureThreshold: 2
      fallback: pause
"""


@pytest.fixture
def policy_remote(tmp_path: Path) -> Remote:
    remote = Remote(tmp_path / "server")
    seeder = Person(remote.url, tmp_path / "seed", name="Sam Seeder")
    seeder.commit("Add the prod-a policy", {
        "reconciler.yaml": REPO_CONFIG,
        POLICY_PATH: policy(),
    })
    seeder.push()
    return remote


@pytest.fixture
def alice(policy_remote: Remote, tmp_path: Path) -> Person:
    return Person(policy_remote.url, tmp_path / "alice", name="Alice Operator")


@pytest.fixture
def fleet10(fleet_factory: Callable[..., Fleet]) -> Fleet:
    started = fleet_factory(nodes=10, payload=PAYLOAD, install_seconds=0.2)
    wait_for(lambda: len(started.ready_driver_nodes()) == 10, timeout=60,
             what="10 Ready driver pods", observe=started.driver_pods)
    return started


SyncFactory = Callable[..., ClusterSync]


@pytest.fixture
def make_sync(kube: KubeApi, tmp_path: Path) -> Iterator[SyncFactory]:
    """``make_sync(url, **options)`` starts the sync role in this process; stopped after."""
    def make(url: str, **options: Any) -> ClusterSync:
        options.setdefault("cluster", CLUSTER)
        options.setdefault("state_dir", tmp_path / "state")
        options.setdefault("fetch_interval", 30.0)
        return ClusterSync(kube, url, **options).start()

    with started_loops(make) as start:
        yield start


@pytest.fixture
def controller(kube: KubeApi) -> Iterator[RolloutController]:
    ctl = RolloutController(
        kube, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
        settings=PlannerSettings(ready_timeout=20, retry_backoff=0.5, retry_backoff_max=2),
    ).start()
    assert ctl.wait_synced(30)
    yield ctl
    ctl.stop()
