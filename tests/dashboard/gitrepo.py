"""A policy repository with a cluster's history: a version change, a gate paused by the
reconciler, released by a person, paused again."""

from __future__ import annotations

import subprocess
from pathlib import Path

NEW = "2.33.0.9"


def git(repo: Path, *args: str, author: str = "Ana Merger <ana@example.org>") -> None:
    name, _, email = author.partition(" <")
    env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email.rstrip(">"),
           "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email.rstrip(">"),
           "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


POLICY = """\
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
spec:
  driver:
    payload: {{registry: registry.local, name: driver-image, version: {version}}}
    upgradePolicy:
      enableRollout: true
      pause: {pause}
"""


def policy_repo(tmp: Path, cluster: str, *, subject: str = "policy: roll out 2.33.0.9") -> Path:
    """A policy repository whose cluster file went 2.32 -> 2.33, paused at a gate, released by
    a person, and paused again (what the write-back of the next gate leaves)."""
    repo = tmp / "policy"
    folder = repo / "clusters" / cluster
    folder.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    path = folder / "cluster-operator.yaml"
    for version, pause, message, who in [
        ("2.32.0.5", "false", "policy: start", "Ana Merger <ana@example.org>"),
        (NEW, "false", subject, "Ana Merger <ana@example.org>"),
        (NEW, "true", "policy(x): pause the rollout at step 1/3: manual gate\n\n"
                      "Reconciler-Commit: true\nReconciler-Change-Id: c1",
         "gpu-gitops-reconciler <r@localhost>"),
        (NEW, "false", "release step 2", "Bo Releaser <bo@example.org>"),
        (NEW, "true", "policy(x): pause the rollout at step 2/3: manual gate\n\n"
                      "Reconciler-Commit: true\nReconciler-Change-Id: c2",
         "gpu-gitops-reconciler <r@localhost>"),
    ]:
        path.write_text(POLICY.format(version=version, pause=pause))
        git(repo, "add", "-A", author=who)
        git(repo, "commit", "-q", "-m", message, author=who)
    return repo
