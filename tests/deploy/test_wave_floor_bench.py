"""bench/wave_floor.py's arithmetic: the first wave of each step of the benchmark's policy, and
the floor of wall time / minimum those waves' last new pods Running put under any rollout."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.deploy.bench_scripts import BENCH, load_bench


def test_each_step_starts_half_its_batch_at_once() -> None:
    floor = load_bench("wave_floor")
    # steps 5%, 30%, 60%, 100% of 10,000: batches 500, 2,500, 3,000, 4,000; maxParallel 50%
    assert floor.first_waves(10000) == [250, 1250, 1500, 2000]
    assert floor.first_waves(2000) == [50, 250, 300, 400]


def test_a_one_node_step_is_a_wave_of_one() -> None:
    floor = load_bench("wave_floor")
    spec = {"enableRollout": True, "maxParallel": "50%", "maxUnavailable": "10%",
            "upgradeSteps": [{"replicas": 1, "pauseDuration": 0},
                             {"replicas": "100%", "pauseDuration": 0}]}
    assert floor.first_waves(20, spec) == [1, 10]


def test_the_floor_adds_each_steps_last_running_to_the_minimum() -> None:
    floor = load_bench("wave_floor")
    assert floor.floor_over_minimum([6.0, 28.0, 34.0, 44.0], 960.0) == pytest.approx(
        1 + 112 / 960)
    assert floor.floor_over_minimum([], 960.0) == 1.0


@pytest.mark.parametrize("argument", [["--probe-seconds", "inf"], ["--settle-seconds", "-1"],
                                      ["--install-seconds", "nan"], ["--nodes", "5"]])
def test_an_argument_out_of_range_is_refused_before_any_cluster_starts(
        argument: list[str]) -> None:
    done = subprocess.run([sys.executable, str(BENCH / "wave_floor.py"), *argument],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "finite and not negative" in done.stderr
