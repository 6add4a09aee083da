"""The controller process's interpreter settings (``prefer_responsiveness``): a planning pass
over a big fleet must not cost more per node than one over a small fleet (docs/rollout.md#scale)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from reconciler.controller.loop import prefer_responsiveness
from tests.rollout.world import World, policy

ROOT = Path(__file__).resolve().parents[2]


def collections_during(passes: int, world: World) -> dict[int, int]:
    """Garbage collections per generation while planning the same pass ``passes`` times."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        for _ in range(passes):
            world.plan(1, apply=False, write_status=False)
    finally:
        gc.callbacks.remove(count)
    return {generation: seen.count(generation) for generation in (0, 1, 2)}


def measure() -> None:
    """In a fresh interpreter (the settings are process-wide, and what a full collection costs
    depends on all the process holds): 2,000 nodes of 10,000 Ready at once, a pass that
    completes them, starts 2,000 and cordons 2,000 ahead; collections with Python's defaults,
    then with the controller's settings."""
    world = World(10_000, policy(maxParallel=2000, maxUnavailable=2000))
    world.plan(0)
    world.plan(0)
    ready = len(world.ready_all_in_flight())
    actions = len(world.plan(1, apply=False, write_status=False).actions)
    gc.set_threshold(700, 10, 10)  # Python's defaults
    default = collections_during(10, world)
    prefer_responsiveness()
    ours = collections_during(10, world)
    print(json.dumps({"ready": ready, "actions": actions, "default": default, "ours": ours}))


def test_a_ready_wave_pass_at_ten_thousand_nodes_runs_no_full_collection() -> None:
    done = subprocess.run(
        [sys.executable, "-c",
         "from tests.controller.test_process_settings import measure; measure()"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["ready"] == 2000 and found["actions"] >= 6000
    default, ours = found["default"], found["ours"]
    # with the defaults such passes promote their own short-lived objects and force full
    # collections over everything the process holds; the controller's settings let them die
    assert default["2"] >= 1
    assert ours["2"] == 0 and sum(ours.values()) < sum(default.values())
