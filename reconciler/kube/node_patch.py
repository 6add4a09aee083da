"""One node's consecutive schedulability and annotation actions as one merge patch: recording a
node's state and cordoning it is then one atomic write (a crash cannot leave a cordon without
its record, or the reverse). Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reconciler.planning import AnnotateNode, Cordon, Uncordon


def node_patch(actions: Iterable[AnnotateNode | Cordon | Uncordon]) -> dict[str, Any]:
    """The merge patch of ``actions`` on one node, later ones winning (an annotation's None
    removes it)."""
    patch: dict[str, Any] = {}
    for action in actions:
        if isinstance(action, AnnotateNode):
            patch.setdefault("metadata", {}).setdefault("annotations", {}).update(
                action.annotations)
        else:
            patch.setdefault("spec", {})["unschedulable"] = isinstance(action, Cordon)
    return patch
