"""The planner's pass (``reconciler/rollout/pass_state.py``), enforced: what a pass read
(``Observed``, ``Found``) is frozen, and what it decided (``Decisions``) is written only through
the accumulator's own methods, so a function's signature says what it reads and what it writes.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from reconciler.rollout.health_gate import NO_VERDICTS, NodeVerdicts
from reconciler.rollout.pass_state import Found, Observed
from reconciler.rollout.scan import NodeScan

ROOT = Path(__file__).resolve().parents[2]
ROLLOUT = ROOT / "reconciler" / "rollout"
#: the pass's parts, by the annotation of the parameter that carries them
PARTS = {"Observed", "Found", "Decisions"}
#: methods of Python's containers that change them
MUTATING = {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "sort",
            "reverse", "add", "discard", "update", "setdefault", "difference_update",
            "intersection_update", "symmetric_difference_update"}


def _part_params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
    return {a.arg for a in args
            if (isinstance(a.annotation, ast.Name) and a.annotation.id in PARTS)
            or (isinstance(a.annotation, ast.Constant) and a.annotation.value in PARTS)}


def _field_of(node: ast.expr, params: set[str]) -> str | None:
    """``<param>.<field>...`` (or an item of it), for a parameter that carries a part."""
    names: list[str] = []
    while isinstance(node, ast.Subscript | ast.Attribute):
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        node = node.value
    if names and isinstance(node, ast.Name) and node.id in params:
        return ".".join([node.id, *reversed(names)])
    return None


def direct_writes(source: str, name: str) -> list[str]:
    """Each place in ``source`` that writes a field of a pass part handed to its function, other
    than through the part's methods: an assignment (also augmented, or a ``del``) to the field
    or an item of it, or a container method that changes the field."""
    found: list[tuple[int, str]] = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = _part_params(func)
        if not params:
            continue
        for node in ast.walk(func):
            line = getattr(node, "lineno", 0)
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = [t for target in node.targets for t in (
                    target.elts if isinstance(target, ast.Tuple) else [target])]
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            for target in targets:
                field = _field_of(target, params)
                if field is not None:
                    found.append((line, f"{name}:{line}: {field} written"))
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in MUTATING):
                field = _field_of(node.func.value, params)
                if field is not None:
                    found.append((line, f"{name}:{line}: {field}.{node.func.attr}()"))
    return [text for _, text in sorted(set(found))]


def test_what_a_pass_read_is_frozen() -> None:
    parts: tuple[Any, ...] = (Observed, Found, NodeVerdicts)
    for part in parts:
        assert part.__dataclass_params__.frozen, part
    found = Found("rev", NodeScan())
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.revision = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        NO_VERDICTS.passed = ("node-1",)  # type: ignore[misc]


def test_no_part_of_the_planner_writes_a_field_of_the_pass_it_was_handed() -> None:
    writes = [
        write
        for path in sorted(ROLLOUT.glob("*.py")) if path.name != "pass_state.py"
        for write in direct_writes(path.read_text(), path.name)
    ]
    assert writes == []


def test_the_check_finds_a_direct_write() -> None:
    """The rule above is no empty pass: each kind of direct write is found."""
    source = (
        "def bad(seen: Observed, out: Decisions, found: 'Found', other: list[int]) -> None:\n"
        "    out.total -= 1\n"
        "    out.actions.append(1)\n"
        "    out.holds[0] = {}\n"
        "    found.scan.new_failures.append(1)\n"
        "    seen.snap = None\n"
        "    other.append(1)\n"
        "    out.act(1)\n"
    )
    assert direct_writes(source, "bad.py") == [
        "bad.py:2: out.total written",
        "bad.py:3: out.actions.append()",
        "bad.py:4: out.holds written",
        "bad.py:5: found.scan.new_failures.append()",
        "bad.py:6: seen.snap written",
    ]
