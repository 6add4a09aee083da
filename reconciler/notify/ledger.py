"""Where the events already sent are remembered (docs/notifications.md): an annotation of the
``ClusterOperator``, so a restart or a new leader finds it (the state folder is per replica).

``{"<sink>": ["<event key>", ...]}`` as JSON, the newest ``KEEP`` keys per sink, applied with
a field manager of the notifier's own: the sync role's applies carry its whole intent (the
commit's body) under its manager, so an annotation under that manager would be removed by the
next apply of a commit."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from reconciler.kube.api import KubeApi, NotFound
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.owned_apply import apply_keeping_owned
from reconciler.names import API_VERSION, KIND, NOTIFIED_ANNOTATION, NOTIFY_FIELD_MANAGER

log = logging.getLogger(__name__)

#: the keys remembered per sink (the oldest are forgotten; their rollouts are long over)
KEEP = 100


class SentLedger(Protocol):
    def load(self) -> dict[str, list[str]]:
        """What was sent, per sink; raises on a read that failed (nothing is sent then)."""
        ...

    def record(self, sent: Mapping[str, list[str]]) -> None:
        """Write ``sent`` down."""
        ...


def parse_sent(text: object) -> dict[str, list[str]]:
    """The annotation's value (anything unreadable: nothing sent)."""
    try:
        data: Any = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(sink): [str(k) for k in keys] for sink, keys in data.items()
            if isinstance(keys, list)}


def remember(sent: dict[str, list[str]], sink: str, key: str) -> None:
    keys = sent.setdefault(sink, [])
    if key not in keys:
        keys.append(key)
    del keys[:-KEEP]


class AnnotationLedger:
    """The annotation on the cluster's ClusterOperator."""

    def __init__(self, api: KubeApi, cluster_operator: str) -> None:
        self.api = api
        self.name = cluster_operator
        self._lock = threading.Lock()

    def load(self) -> dict[str, list[str]]:
        try:
            obj = self.api.get(cluster_operator_path(self.name))
        except NotFound:
            return {}
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        return parse_sent(annotations.get(NOTIFIED_ANNOTATION))

    def record(self, sent: Mapping[str, list[str]]) -> None:
        body = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": self.name, "annotations": {
                    NOTIFIED_ANNOTATION: json.dumps(sent, sort_keys=True,
                                                    separators=(",", ":"))}}}
        with self._lock:
            apply_keeping_owned(self.api, cluster_operator_path(self.name), body,
                                manager=NOTIFY_FIELD_MANAGER)
