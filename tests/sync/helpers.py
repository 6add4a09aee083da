"""Reading what the tests look at: the ClusterOperator, the remote's log and files."""

from __future__ import annotations

from typing import Any

from ruamel.yaml import YAML

from reconciler.kube.api import JSON, KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME, SOURCE_COMMIT_ANNOTATION
from reconciler.sim.waiting import wait_for
from reconciler.stored_status import upgrade_status_of
from reconciler.sync.loop import ClusterSync
from tests.gitops.conftest import Person, Remote, git


def cluster_operator(kube: KubeApi) -> JSON:
    return kube.get(cluster_operator_path(CLUSTER_OPERATOR_NAME))


def driver(kube: KubeApi) -> JSON:
    return dict((cluster_operator(kube).get("spec") or {}).get("driver") or {})


def upgrade_status(kube: KubeApi) -> JSON:
    """``upgradeStatus`` as the program reads it (``reconciler.stored_status``)."""
    return upgrade_status_of(cluster_operator(kube))


def step_state(kube: KubeApi) -> tuple[Any, Any, Any]:
    status = upgrade_status(kube)
    inner = status.get("status") or {}
    return status.get("phase"), inner.get("currentStepIndex"), inner.get("currentStepState")


def source_commit(kube: KubeApi) -> str | None:
    annotations = (cluster_operator(kube).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(SOURCE_COMMIT_ANNOTATION)
    return str(value) if value else None


def subjects(remote: Remote, *args: str) -> list[str]:
    """The remote main branch's commit subjects, oldest first, as ``author: subject``."""
    out = git(remote.path, "log", "--reverse", "--format=%an: %s", "main", *args)
    return out.splitlines()


def status_file(remote: Remote, cluster: str = "prod-a") -> dict[str, Any] | None:
    try:
        text = remote.show(f"main:status/{cluster}.yaml")
    except AssertionError:
        return None
    data = YAML(typ="safe").load(text)
    return data if isinstance(data, dict) else None


def file_at_head(remote: Remote, path: str) -> str:
    return remote.show(f"main:{path}")


def release_gate_to_the_end(kube: KubeApi, person: Person, sync: ClusterSync, path: str,
                            text: str) -> str:
    """``person`` merges ``text`` (the policy with ``pause: false``) into ``path``; returns the
    commit once the rollout completed."""
    person.pull()
    resume = person.commit_and_push("Release the rest of prod-a", {path: text})
    sync.trigger()
    wait_for(lambda: step_state(kube) == ("Idling", 3, "Completed"), timeout=90,
             what="the rollout completed", observe=lambda: step_state(kube))
    return resume
