#!/usr/bin/env python3
"""Benchmark of the firmware planner (issue 8): one planning pass over a large fleet in the
middle of a flow, and the size of ``status.firmwareUpgrade`` (the ClusterOperator must stay well
under etcd's 1.5 MiB object limit, since the rollout status shares the object).

    bench/firmware_planner.py [--nodes 10000] [--passes 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import kubernetes  # noqa: F401
except ImportError:  # run with the project's venv when started directly
    venv_python = ROOT / ".venv" / "bin" / "python"
    if venv_python.exists() and Path(sys.executable) != venv_python:
        os.execv(str(venv_python), [str(venv_python), *sys.argv])
    raise
sys.path.insert(0, str(ROOT))

from reconciler.firmware.model import FirmwareRequest  # noqa: E402
from tests.firmware.world import World  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    world = World.of(args.nodes)
    world.request = FirmwareRequest("PreferCloud", False, "0" * 40)
    world.settle()
    world.report()
    names = sorted(world.nodes)
    for name in names[: len(names) // 3]:
        world.reboot(name)
    world.settle()
    for name in names[len(names) // 3: len(names) // 2]:
        world.reboot(name, come_back=False)
    world.settle()
    timings = []
    for _ in range(args.passes):
        started = time.perf_counter()
        world.plan()
        timings.append(time.perf_counter() - started)
    size = len(json.dumps(world.status, separators=(",", ":")))
    rows = [
        (f"planner pass, {args.nodes} nodes mid-flow (median ms)", 500.0,
         statistics.median(timings) * 1000),
        (f"status.firmwareUpgrade, {args.nodes} nodes (KiB)", 1024.0, size / 1024),
    ]
    print(f"{'figure':<52} {'goal':>10} {'measured':>10} {'ratio':>7}")
    for figure, goal, measured in rows:
        print(f"{figure:<52} {goal:>10.1f} {measured:>10.1f} {measured / goal:>7.2f}")


if __name__ == "__main__":
    main()
