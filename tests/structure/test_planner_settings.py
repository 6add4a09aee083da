"""One way the ``rollout`` section of reconciler.yaml reaches a planner (issue 42): the controller,
``simulate``, ``plan`` and the dashboard each built the planner's settings their own way, and
``plan`` and the page predicted without drain and topology. Now ``PlannerSettings.for_pass`` is
the one place that copies the section's keys; this test finds any other."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from reconciler.policy.rollout_settings import RolloutSettings

ROOT = Path(__file__).resolve().parents[2]
#: the settings a planner takes from the ``rollout`` section
ROLLOUT_FIELDS = frozenset(f.name for f in dataclasses.fields(RolloutSettings))


def _rollout_keywords(path: Path, root: Path = ROOT) -> list[str]:
    """Calls in ``path`` that set the ``rollout`` keys on planner settings by hand:
    ``PlannerSettings(drain=...)``, or a ``replace(settings, ...)`` copying several of them (a
    flag's one key over a ``RolloutSettings`` is not one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = (node.func.id if isinstance(node.func, ast.Name) else
                node.func.attr if isinstance(node.func, ast.Attribute) else "")
        if name not in ("PlannerSettings", "replace"):
            continue
        keys = sorted(str(k.arg) for k in node.keywords if k.arg in ROLLOUT_FIELDS)
        if keys and (name == "PlannerSettings" or len(keys) > 1):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {name}({', '.join(keys)})")
    return found


def test_only_for_pass_puts_the_rollout_section_into_planner_settings() -> None:
    found = [hit.split(":", 2) for path in sorted((ROOT / "reconciler").rglob("*.py"))
             for hit in _rollout_keywords(path)]
    assert [(file, call) for file, _, call in found] == [
        ("reconciler/rollout/model.py",
         " replace(drain, ready_timeout, topology, unavailable_nodes, wait_for)")]


def test_the_check_sees_a_planner_built_by_hand(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("a = PlannerSettings(ready_timeout=1, cordon_ahead=False)\n"
                      "b = dataclasses.replace(base, topology=t, drain=d, cordon_ahead=True)\n"
                      "c = replace(rollout, ready_timeout=3)\n")
    assert _rollout_keywords(sample, tmp_path) == [
        "sample.py:1: PlannerSettings(ready_timeout)", "sample.py:2: replace(drain, topology)"]
