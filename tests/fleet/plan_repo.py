"""A policy repository of five clusters in a real Git repository, for ``reconciler plan``.

``lab`` completed 2.33.0.9 (its snapshot says so, "finished" in 2030 so that the soak of
``beta``, which promotes after it, has not passed whenever the test runs); ``alpha`` measured
20 nodes and 30 s per install in its last rollout; ``beta`` has only ``totalUpgradeReplicas``;
``gamma`` has no snapshot; ``fw`` is a firmware cluster.
"""

from __future__ import annotations

from pathlib import Path

from tests.policy.commands import git
from tests.policy.texts import SEED_10

OLD, NEW = "2.32.0.6", "2.33.0.9"
LAB_FINISHED = "2030-01-01T00:00:00Z"
BETA_HELD_UNTIL = "2030-01-02T00:00:00Z"  # LAB_FINISHED + the 24h soak

CONFIG = """\
clustersDir: clusters
rollout:
  readyTimeout: 10m
clusters:
  beta:
    promotion: {after: lab, soak: 24h, mode: hold}
"""

def policy_text(version: str, rollout: str = "true") -> str:
    """The seed's 10-node scenario (steps 2, 5, 8, 100%: a gate, then 10 s pauses) with a
    firmware policy, at ``version``. The gate is written as the vendor's CRD has it:
    ``pauseDuration`` left out (the manual's ``{}``)."""
    return SEED_10.replace("version: 2.33.0.9", f"version: {version}").replace(
        "    upgradePolicy:\n", "    fwUpgradePolicy: Never\n    upgradePolicy:\n").replace(
        "enableRollout: true", f"enableRollout: {rollout}").replace(
        "          pauseDuration: {}\n", "")


SNAPSHOT = """\
cluster: {cluster}
observedAt: "2026-11-30T00:00:00Z"
upgradeStatus:
  phase: Idling
  status: {{currentStepIndex: 3, currentStepState: Completed, totalUpgradeReplicas: {total}}}
{extra}spec:
  driver:
    payload: {{registry: registry.example.com/metax, name: driver-image, version: {version}}}
"""


def policy_path(cluster: str) -> str:
    return f"clusters/{cluster}/cluster-operator.yaml"


def make_repository(tmp_path: Path) -> Path:
    """The repository with everything committed on ``main`` and a branch ``change`` checked
    out (the pull request's working tree)."""
    root = tmp_path / "repo"
    (root / "status").mkdir(parents=True)
    (root / "reconciler.yaml").write_text(CONFIG)
    for cluster in ("lab", "alpha", "beta", "gamma", "fw"):
        (root / "clusters" / cluster).mkdir(parents=True)
        version = NEW if cluster == "lab" else OLD
        rollout = "false" if cluster == "fw" else "true"
        (root / policy_path(cluster)).write_text(policy_text(version, rollout))
    snapshots = {
        "lab": (NEW, 4, f"lastRollout: {{version: {NEW}, result: Completed, finishedAt: "
                        f'"{LAB_FINISHED}"}}\n'),
        "alpha": (OLD, 20, "fleet: {nodes: 20, installSeconds: 30}\n"),
        "beta": (OLD, 8, ""),
        "fw": (OLD, 0, ""),
    }
    for cluster, (version, total, extra) in snapshots.items():
        (root / "status" / f"{cluster}.yaml").write_text(SNAPSHOT.format(
            cluster=cluster, version=version, total=total, extra=extra))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "five clusters")
    git(root, "checkout", "-q", "-b", "change")
    return root


def edit(root: Path, path: str, old: str, new: str) -> None:
    file = root / path
    text = file.read_text()
    assert old in text, (path, old)
    file.write_text(text.replace(old, new, 1))


def bump(root: Path, cluster: str, version: str = NEW) -> None:
    edit(root, policy_path(cluster), f"version: {OLD}", f"version: {version}")
