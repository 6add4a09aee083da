"""``reconciler validate --against REF`` reports rule ``promotion-gate`` for a payload change the
promotion gate does not allow yet (docs/configuration.md#maintenance-windows), reading the
upstream's status snapshot at REF."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from reconciler.timefmt import format_seconds
from tests.policy.commands import git, reported, validate_bounded
from tests.policy.texts import EXAMPLES

PROD = "clusters/prod-100/cluster-operator.yaml"
LAB_SNAPSHOT = """\
cluster: lab-10
observedAt: "{finished}"
upgradeStatus:
  phase: {phase}
  lastAppliedSpec: {{payload: {{version: {runs}}}}}
  status: {{currentStepIndex: 4, currentStepState: Completed}}
lastRollout: {{version: 2.33.0.9, result: {result}, finishedAt: "{finished}"}}
spec:
  driver:
    payload: {{registry: registry.example.com/metax, name: driver-image, version: {runs}}}
"""


def repository(tmp_path: Path, *, soak: str, ago: float, result: str = "Completed",
               runs: str = "2.33.0.9", phase: str = "Idling") -> tuple[Path, float]:
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES, root)
    config = root / "reconciler.yaml"
    base = config.read_text().split("\nclusters:\n", 1)[0]  # the example's own chain goes
    config.write_text(base + f"\nclusters:\n  prod-100:\n    promotion: {{after: lab-10, soak: "
                      f"{soak}}}\n")
    finished = float(int(time.time() - ago))
    (root / "status/lab-10.yaml").write_text(LAB_SNAPSHOT.format(
        finished=format_seconds(finished), result=result, runs=runs, phase=phase))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "lab-10 completed 2.33.0.9")
    git(root, "checkout", "-q", "-b", "bump-prod")
    prod = root / PROD
    # the example's files carry the vendor's arch-suffixed versions; the snapshot above names
    # the same version without the suffix (one version, promotion.py)
    prod.write_text(prod.read_text().replace("version: 2.32.0.6-amd64",
                                             "version: 2.33.0.9-amd64", 1))
    return root, finished


def version_line(root: Path) -> int:
    lines = (root / PROD).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if "version: 2.33.0.9-amd64" in line)


def test_a_bump_before_the_soak_fails_naming_the_upstream_state_and_the_earliest_time(
        tmp_path: Path) -> None:
    root, finished = repository(tmp_path, soak="24h", ago=3600)
    done = validate_bounded(root, "--against", "main")
    assert done.returncode == 1, done.stdout + done.stderr
    (error,) = reported(done.stdout)
    assert error.startswith(f"{PROD}:{version_line(root)}:16: error: promotion gate: "
                            "2.33.0.9-amd64 cannot reach this cluster yet: upstream lab-10 "
                            f"completed 2.33.0.9-amd64 at {format_seconds(finished)}")
    assert f"it can pass at {format_seconds(finished + 24 * 3600)} at the earliest" in error
    assert error.endswith("[promotion-gate]")
    # without --against the gate is not judged (no snapshot at a ref)
    assert validate_bounded(root).returncode == 0


def test_a_bump_after_the_soak_passes(tmp_path: Path) -> None:
    root, _ = repository(tmp_path, soak="1h", ago=7200)
    done = validate_bounded(root, "--against", "main")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("state", "said"), [
    ({"result": "RolledBack", "runs": "2.32.0.6"}, "upstream lab-10 rolled 2.33.0.9-amd64 back"),
    ({"phase": "Progressing", "runs": "2.34.0.1"}, "upstream lab-10 is rolling out 2.34.0.1"),
])
def test_an_upstream_that_did_not_keep_the_version_holds_it(
        tmp_path: Path, state: dict[str, str], said: str) -> None:
    root, _ = repository(tmp_path, soak="1h", ago=7200, **state)
    done = validate_bounded(root, "--against", "main")
    # (a Progressing upstream also locks lab-10's own file against the snapshot: not this test's)
    (error,) = [line for line in reported(done.stdout) if line.startswith(PROD)]
    assert done.returncode == 1 and said in error and error.endswith("[promotion-gate]"), error
    assert "at the earliest" not in error


def test_the_pull_request_cannot_vouch_for_its_own_upstream(tmp_path: Path) -> None:
    root, _ = repository(tmp_path, soak="1h", ago=7200, result="RolledBack", runs="2.32.0.6")
    lab = root / "status/lab-10.yaml"
    lab.write_text(lab.read_text().replace("RolledBack", "Completed"))  # edited in the PR
    done = validate_bounded(root, "--against", "main")
    (error,) = reported(done.stdout)
    assert done.returncode == 1 and "rolled 2.33.0.9-amd64 back" in error, done.stdout


def test_a_change_that_keeps_the_version_is_not_gated(tmp_path: Path) -> None:
    root, _ = repository(tmp_path, soak="24h", ago=60)
    git(root, "checkout", "-q", "--", PROD)
    prod = root / PROD
    changed = prod.read_text().replace("maxParallel: 50%", "maxParallel: 20%", 1)
    assert changed != prod.read_text()
    prod.write_text(changed)
    done = validate_bounded(root, "--against", "main", "clusters/prod-100")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_example_chain_holds_staging_while_lab_still_rolls_out(tmp_path: Path) -> None:
    root = tmp_path / "examples"
    shutil.copytree(EXAMPLES, root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the example repository")
    staging = root / "clusters/staging-50/cluster-operator.yaml"
    staging.write_text(staging.read_text().replace("version: 2.32.0.6-amd64",
                                                   "version: 2.33.0.9-amd64", 1))
    done = validate_bounded(root, "--against", "main")
    assert done.returncode == 1
    assert reported(done.stdout) == [
        "clusters/staging-50/cluster-operator.yaml:22:16: error: promotion gate: 2.33.0.9-amd64 "
        "cannot reach this cluster yet: upstream lab-10 is rolling out 2.33.0.9-amd64 "
        "(Progressing); 2.33.0.9-amd64 passes only after it completed there [promotion-gate]"]
