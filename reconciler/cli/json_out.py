"""``json.dumps(value, indent=2)`` to the byte, written as it is made.

The standard library's encoder with ``indent`` runs in Python and keeps every piece of the
text until the end: at 100,000 simulated nodes (``reconciler simulate --format json``) that is
seconds and a few hundred MiB of small strings. This one renders the long lists an element at
a time, writes them in batches, and handles the scalars with the C string encoder. Same
rules: ``ensure_ascii``, ``NaN``/``Infinity`` allowed, tuples as lists, keys that are not
strings converted as ``json`` converts them.
"""

from __future__ import annotations

import json.encoder
from collections.abc import Callable
from typing import Any

_string: Callable[[str], str] = json.encoder.encode_basestring_ascii
_INFINITY = float("inf")
#: elements rendered per write
_BATCH = 2000


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INFINITY:
        return "Infinity"
    if value == -_INFINITY:
        return "-Infinity"
    return float.__repr__(value)


def _key(key: object) -> str:
    if isinstance(key, str):
        return _string(key)
    if key is None or isinstance(key, int | float):  # bool is an int
        return _string(_text(key, 0))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _text(value: Any, level: int) -> str:
    """One value at ``level`` (its closing bracket's indent), as ``json.dumps`` writes it."""
    if isinstance(value, str):
        return _string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value)
    deeper = level + 1
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        inner = "\n" + "  " * deeper
        return ("[" + inner
                + ("," + inner).join([_string(v) if type(v) is str else _text(v, deeper)
                                      for v in value])
                + "\n" + "  " * level + "]")
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = "\n" + "  " * deeper
        # strings (most keys and values) straight to the C encoder
        return ("{" + inner
                + ("," + inner).join([
                    (_string(k) if type(k) is str else _key(k)) + ": "
                    + (_string(v) if type(v) is str else _text(v, deeper))
                    for k, v in value.items()])
                + "\n" + "  " * level + "}")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _rows(values: list[Any] | tuple[Any, ...]) -> list[str]:
    """The elements of a long list at level 2. Its objects (a simulation's nodes and events)
    share their keys: each set of keys is rendered once, as the text before each value."""
    heads: dict[tuple[Any, ...], list[str]] = {}
    rows: list[str] = []
    for value in values:
        if type(value) is not dict or not value:
            rows.append(_text(value, 2))
            continue
        keys = tuple(value)
        before = heads.get(keys)
        if before is None:
            texts = [_key(k) + ": " for k in keys]
            before = heads[keys] = (["{\n      " + texts[0]]
                                    + [",\n      " + t for t in texts[1:]])
        rows.append("".join([head + (_string(v) if type(v) is str else _text(v, 3))
                             for head, v in zip(before, value.values(), strict=True)])
                    + "\n    }")
    return rows


def write_json(value: Any, write: Callable[[str], object]) -> None:
    """Write ``json.dumps(value, indent=2)``: a top-level object member by member, a long list
    in it a batch of elements at a time."""
    if not isinstance(value, dict) or not value:
        write(_text(value, 0))
        return
    write("{")
    first = True
    for key, member in value.items():
        write(("\n  " if first else ",\n  ") + _key(key) + ": ")
        first = False
        if isinstance(member, list | tuple) and len(member) > _BATCH:
            write("[")
            for start in range(0, len(member), _BATCH):
                part = member[start:start + _BATCH]
                write(("\n    " if start == 0 else ",\n    ") + ",\n    ".join(_rows(part)))
            write("\n  ]")
        else:
            write(_text(member, 1))
    write("\n}")
