"""Field paths into Kubernetes-style objects (``("spec", "driver", "payload", "version")``).

The bottom layer: imports nothing else from ``reconciler``. One way to read (``resolve``), set
(``ensure``) and delete (``remove``) a field of a nested mapping, so no module walks
``.get("x") or {}`` chains of its own. A missing field is the ``MISSING`` sentinel, never None:
``pause: null`` in a policy and no ``pause`` key at all are different things.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

#: a field of an object, from its top-level key down
FieldPath = tuple[str, ...]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: the field is absent
MISSING: Any = _Missing()


def resolve(obj: Any, path: Sequence[str], default: Any = MISSING) -> Any:
    """The value at ``path``; ``default`` (``MISSING`` unless given) when a key on the way is
    absent or a value on the way is not a mapping."""
    node = obj
    for name in path:
        if not isinstance(node, Mapping) or name not in node:
            return default
        node = node[name]
    return node


def section(obj: Any, path: Sequence[str]) -> Mapping[str, Any]:
    """The mapping at ``path``; an empty one when it is absent, null or not a mapping."""
    value = resolve(obj, path, None)
    return value if isinstance(value, Mapping) else {}


def items(obj: Any, path: Sequence[str]) -> tuple[Any, ...]:
    """The list at ``path`` as a tuple; empty when it is absent, null or not a list."""
    value = resolve(obj, path, None)
    return tuple(value) if isinstance(value, list | tuple) else ()


def ensure(obj: MutableMapping[str, Any], path: Sequence[str], value: Any) -> None:
    """Set ``path`` of ``obj`` to ``value`` in place, making the mappings on the way plain
    dicts (created where missing); ``MISSING`` removes the field instead (the way is still
    made, so a removal and a set leave the same mappings behind)."""
    node = obj
    for name in path[:-1]:
        child = node.get(name)
        if not isinstance(child, dict):
            child = dict(child) if isinstance(child, Mapping) else {}
            node[name] = child
        node = child
    if value is MISSING:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


def remove(obj: MutableMapping[str, Any], path: Sequence[str]) -> None:
    """Delete ``path`` from ``obj`` in place when it is there; creates nothing."""
    node: Any = obj
    for name in path[:-1]:
        node = node.get(name)
        if not isinstance(node, MutableMapping):
            return
    node.pop(path[-1], None)
