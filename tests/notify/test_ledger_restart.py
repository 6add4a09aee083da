"""Each event once per sink across a restart: what was sent is in an annotation of the
ClusterOperator on a real API server, under the notifier's own field manager, and a new
notifier that reads it sends nothing again; a later apply of the sync role's manager keeps it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import (
    API_VERSION,
    KIND,
    NOTIFIED_ANNOTATION,
    NOTIFY_FIELD_MANAGER,
    SYNC_FIELD_MANAGER,
)
from reconciler.notify.ledger import AnnotationLedger, parse_sent
from reconciler.notify.notifier import Notifier
from reconciler.policy.notify_config import NotifySink
from reconciler.sim.operator_install import DEFAULT_PAYLOAD, INSTALLER, install_crd
from reconciler.sim.operator_install import cluster_operator as install_cluster_operator
from reconciler.sim.waiting import wait_for
from tests.notify.receivers import receiver
from tests.notify.test_sinks import GIT, WALL, gate

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster_operator(kube: KubeApi) -> Iterator[str]:
    install_crd(kube)
    name = f"notify-{uuid.uuid4().hex[:8]}"
    # installed whole, as the vendor's chart does (its CRD admits nothing less); then the sync
    # role's apply of a commit's body
    kube.apply(cluster_operator_path(name),
               install_cluster_operator(DEFAULT_PAYLOAD, name=name, release=False),
               field_manager=INSTALLER)
    kube.apply(cluster_operator_path(name),
               {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name},
                "spec": {"driver": {"upgradePolicy": {"pause": False}}}},
               field_manager=SYNC_FIELD_MANAGER)
    yield name
    kube.delete(cluster_operator_path(name))


def test_a_new_notifier_reading_the_annotation_sends_nothing_again(
        kube: KubeApi, cluster_operator: str, tmp_path: Path) -> None:
    with receiver() as slack:
        url_file = tmp_path / "slack-url"
        url_file.write_text(slack.url)
        sinks = (NotifySink("team", "slack", url_file=str(url_file)),)

        def start() -> Notifier:
            return Notifier("prod-a", sinks=lambda: sinks, wall=lambda: WALL,
                            ledger=AnnotationLedger(kube, cluster_operator), git=lambda: GIT,
                            object_name=cluster_operator)

        first = start()
        try:
            [event] = first.observe(gate())
            wait_for(lambda: first.delivered == 1, timeout=20, what="the gate sent")
            assert first.wait_idle(10)
        finally:
            first.stop()
        obj = kube.get(cluster_operator_path(cluster_operator))
        assert parse_sent(obj["metadata"]["annotations"][NOTIFIED_ANNOTATION]) == {
            "team": [event.key]}
        managers = {e["manager"] for e in obj["metadata"]["managedFields"]
                    if "f:annotations" in (e.get("fieldsV1") or {}).get("f:metadata", {})}
        assert managers == {NOTIFY_FIELD_MANAGER}

        # the sync role applies a commit's whole body under its manager: the record stays
        kube.apply(cluster_operator_path(cluster_operator),
                   {"apiVersion": API_VERSION, "kind": KIND,
                    "metadata": {"name": cluster_operator},
                    "spec": {"driver": {"upgradePolicy": {"pause": True}}}},
                   field_manager=SYNC_FIELD_MANAGER)

        second = start()  # a restart, or another replica that became the leader
        try:
            assert second.observe(gate()) == [event]
            assert second.wait_idle(10)
            assert len(slack.got) == 1
        finally:
            second.stop()
