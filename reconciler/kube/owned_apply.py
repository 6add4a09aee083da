"""Server-side apply that keeps what the field manager already owns.

A server-side apply declares the manager's whole intent: a field the manager owned before and
leaves out of the new body is removed from the object when no other manager owns it too. The
controllers apply one concern at a time (``pause`` at a gate, the payload ``version`` on rollback,
``fwUpgradePolicy`` and its done annotation after firmware), all under one manager, so a pause
applied after a rollback would otherwise delete the restored version, and a rollout pause would
delete the firmware's result. Each apply therefore carries the live values of every field the
manager owns under the same roots, read fresh and guarded by the object's ``resourceVersion``: a
change that lands between the read and the apply is a conflict and the read is done again, so a
person's newer value is never overwritten with an older one.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.kube.api import JSON, Conflict, KubeApi

#: the parts of an object a controller's apply may carry (metadata's other fields are the
#: server's: name, uid, resourceVersion, managedFields)
ROOTS: tuple[tuple[str, ...], ...] = (("spec",), ("metadata", "annotations"),
                                      ("metadata", "labels"))

_ATTEMPTS = 5


def owned_values(obj: Mapping[str, Any], manager: str,
                 roots: Iterable[tuple[str, ...]] = ROOTS) -> JSON:
    """The part of ``obj`` under ``roots`` that ``manager`` owns (its Apply entries of
    ``metadata.managedFields``, FieldsV1), as a body fragment with the live values. A list, or a
    field owned as a whole, is carried whole."""
    result: JSON = {}
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    for entry in entries:
        if (entry.get("manager") != manager or entry.get("operation") != "Apply"
                or entry.get("fieldsType", "FieldsV1") != "FieldsV1"):
            continue
        fields = entry.get("fieldsV1") or {}
        for root in roots:
            node: Any = fields
            live: Any = obj
            for name in root:
                node = node.get(f"f:{name}") if isinstance(node, Mapping) else None
                live = live.get(name) if isinstance(live, Mapping) else None
                if node is None or live is None:
                    break
            else:
                fragment = _owned(node, live)
                if fragment is not None:
                    _merge(result, _nest(root, fragment))
    return result


def _owned(node: Mapping[str, Any], live: Any) -> Any:
    """The live value of the owned fields below ``node`` (None: nothing owned there)."""
    children = {k[2:]: v for k, v in node.items() if k.startswith("f:")}
    if not children or any(not (k.startswith("f:") or k == ".") for k in node):
        return copy.deepcopy(live)
    if not isinstance(live, Mapping):
        return None
    fragment: JSON = {}
    for name, child in children.items():
        if name in live and isinstance(child, Mapping):
            value = _owned(child, live[name])
            if value is not None:
                fragment[name] = value
    return fragment or None


def _nest(path: tuple[str, ...], value: Any) -> JSON:
    for name in reversed(path):
        value = {name: value}
    result: JSON = value
    return result


def _merge(into: JSON, extra: Mapping[str, Any]) -> None:
    """``extra`` laid under ``into``: ``into`` wins where both set a leaf."""
    for key, value in extra.items():
        mine = into.get(key)
        if isinstance(mine, dict) and isinstance(value, Mapping):
            _merge(mine, value)
        elif key not in into:
            into[key] = copy.deepcopy(value)


def apply_keeping_owned(api: KubeApi, path: str, body: Mapping[str, Any], *,
                        manager: str) -> JSON:
    """Server-side apply of ``body`` under ``manager`` (forced, as the controllers' changes are
    decisions), with the manager's other owned fields kept at their live values."""
    for attempt in range(_ATTEMPTS):
        live = api.get(path)
        full = copy.deepcopy(dict(body))
        _merge(full, owned_values(live, manager))
        full.setdefault("metadata", {})["resourceVersion"] = (
            live.get("metadata") or {}).get("resourceVersion")
        try:
            return api.apply(path, full, field_manager=manager, force=True)
        except Conflict:
            if attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
