"""The simulate corpus: `reconciler simulate --format json` outputs recorded before the planner
was restructured (issue "One read model, the planner in parts"), replayed by
`test_simulate_corpus.py` so a restructuring that changes any prediction fails.

Record again only for an intended change of behaviour:
    .venv/bin/python -m tests.rollout.simulate_corpus --record
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from reconciler.cli.main import cli
from tests.health import test_simulate_health

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
CORPUS = DATA / "simulate_corpus"
EXAMPLES = ROOT / "examples-repo"
SEED_10 = DATA / "seed-10-nodes.yaml"
SEED_100 = DATA / "seed-100-nodes.yaml"
LAB = EXAMPLES / "clusters/lab-10/cluster-operator.yaml"
STAGING = EXAMPLES / "clusters/staging-50/cluster-operator.yaml"
PROD = EXAMPLES / "clusters/prod-100/cluster-operator.yaml"
FW = EXAMPLES / "clusters/fw-lab-4/cluster-operator.yaml"
REPO_CONFIG = EXAMPLES / "reconciler.yaml"

# the health tests' section, with a readyTimeout of its own
HEALTH = test_simulate_health.HEALTH + "rollout:\n  readyTimeout: 5m\n"

# Files the cases name by key; written to CORPUS/inputs by --record, read from there by the test.
INPUTS: dict[str, str] = {
    "health.yaml": HEALTH,
    "faults-imagepull.yaml": "faults:\n  - {node: node-0003, fault: imagepull}\n",
    "faults-crashloop.yaml": "faults:\n  - {node: node-0007, fault: crashloop}\n",
    "faults-mixed.yaml": (
        "faults:\n"
        "  - {node: node-0002, fault: never-ready}\n"
        "  - {node: node-0005, fault: node-notready}\n"
        "  - {node: node-0009, fault: gpu-unavailable}\n"
        "  - {node: node-0011, fault: gpu-throttling}\n"
        "  - {node: node-0013, fault: crashloop}\n"
    ),
    "faults-late.yaml": (
        "faults:\n"
        "  - {node: node-0002, fault: never-ready}\n"
        "  - {node: node-0009, fault: gpu-unavailable}\n"
        "  - {node: node-0011, fault: gpu-throttling}\n"
        "  - {node: node-0013, fault: crashloop}\n"
    ),
    "faults-many.yaml": "faults:\n" + "".join(
        f"  - {{node: node-{i:04d}, fault: imagepull}}\n" for i in (3, 4, 6, 8, 10, 12, 14)),
}


def _variant(source: Path, name: str, *edits: tuple[str, str]) -> str:
    text = source.read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, (name, old)
        text = text.replace(old, new)
    # a gate as the vendor's CRD writes it: pauseDuration left out (the manual's {})
    text = re.sub(r"(?m)^ *pauseDuration: \{\}.*\n", "", text)
    INPUTS[name] = text
    return name


SEED_ROLLBACK = _variant(SEED_10, "seed-10-rollback.yaml",
                         ("fallback: pause", "fallback: rollback"))
SEED_STRICT = _variant(SEED_10, "seed-10-strict.yaml",
                       ("maxFailureThreshold: 3", "maxFailureThreshold: 1"))
PROD_ROLLBACK = _variant(PROD, "prod-100-rollback.yaml", ("fallback: pause", "fallback: rollback"),
                         ("maxFailureThreshold: 5", "maxFailureThreshold: 2"))
PROD_PAUSED = _variant(PROD, "prod-100-paused.yaml", ("  pause: false", "  pause: true"))
# docs/rollout.md#failures-tolerated-in-a-step: step 2 (3 nodes: node-0003..5) tolerates 1
# failure, step 3 (3 nodes) 50% of them (2)
SEED_TOLERATING = _variant(SEED_10, "seed-10-toleration.yaml",
                           ("      - replicas: 5\n",
                            "      - replicas: 5\n        toleration: 1\n"),
                           ("      - replicas: 8\n",
                            "      - replicas: 8\n        toleration: 50%\n"))
INPUTS["faults-step2-twice.yaml"] = (
    "faults:\n  - {node: node-0003, fault: imagepull}\n  - {node: node-0004, fault: crashloop}\n")
INPUTS["faults-steps-2-3.yaml"] = (
    "faults:\n  - {node: node-0004, fault: crashloop}\n"
    "  - {node: node-0006, fault: never-ready}\n  - {node: node-0008, fault: imagepull}\n")


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]


def _p(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _i(name: str) -> str:
    return "@" + name  # an input of the corpus


CASES: tuple[Case, ...] = (
    Case("seed10-confirm", (_p(SEED_10), "--nodes", "10", "--from-version", "2.32.0.6",
                            "--auto-confirm", "30")),
    Case("seed10-gate", (_p(SEED_10), "--nodes", "10", "--from-version", "2.32.0.6")),
    Case("seed10-no-cordon-ahead", (_p(SEED_10), "--nodes", "10", "--from-version", "2.32.0.6",
                                    "--auto-confirm", "5", "--no-cordon-ahead")),
    Case("seed10-imagepull", (_p(SEED_10), "--nodes", "10", "--from-version", "2.32.0.6",
                              "--auto-confirm", "30", "--faults", _i("faults-imagepull.yaml"))),
    Case("seed10-strict-mixed", (_i(SEED_STRICT), "--nodes", "16", "--from-version",
                                 "2.32.0.6", "--auto-confirm", "30", "--faults",
                                 _i("faults-mixed.yaml"), "--ready-timeout", "120")),
    Case("seed10-late-faults", (_p(SEED_10), "--nodes", "16", "--from-version", "2.32.0.6",
                                "--auto-confirm", "30", "--faults", _i("faults-late.yaml"),
                                "--ready-timeout", "120")),
    Case("seed10-rollback-crash", (_i(SEED_ROLLBACK), "--nodes", "10", "--from-version",
                                   "2.32.0.6", "--install-seconds", "120", "--auto-confirm",
                                   "60", "--faults", _i("faults-crashloop.yaml"))),
    Case("seed10-rollback-many", (_i(SEED_ROLLBACK), "--nodes", "16", "--from-version",
                                  "2.32.0.6", "--install-seconds", "45", "--auto-confirm", "10",
                                  "--faults", _i("faults-many.yaml"))),
    # one failure in step 2, two in step 3: each within its step's toleration, the rollout
    # completes with the three left behind
    Case("seed10-toleration", (_i(SEED_TOLERATING), "--nodes", "10", "--from-version",
                               "2.32.0.6", "--auto-confirm", "30", "--ready-timeout", "120",
                               "--faults", _i("faults-steps-2-3.yaml"))),
    # two failures in step 2, which tolerates one: the other counts, is retried and fails
    # again until maxFailureThreshold 3: the fallback pauses
    Case("seed10-toleration-exceeded", (_i(SEED_TOLERATING), "--nodes", "10", "--from-version",
                                        "2.32.0.6", "--auto-confirm", "30", "--faults",
                                        _i("faults-step2-twice.yaml"))),
    Case("seed10-health", (_p(SEED_10), "--nodes", "10", "--from-version", "2.32.0.6",
                           "--auto-confirm", "30", "--repo-config", _i("health.yaml"))),
    Case("seed10-health-late-faults", (_p(SEED_10), "--nodes", "16", "--from-version",
                                       "2.32.0.6", "--auto-confirm", "30", "--repo-config",
                                       _i("health.yaml"), "--faults", _i("faults-late.yaml"),
                                       "--scrape-delay", "5")),
    Case("seed10-health-faults", (_i(SEED_STRICT), "--nodes", "16", "--from-version", "2.32.0.6",
                                  "--auto-confirm", "30", "--repo-config", _i("health.yaml"),
                                  "--faults", _i("faults-mixed.yaml"), "--scrape-delay", "5")),
    Case("seed100", (_p(SEED_100), "--nodes", "100", "--from-version", "2.32.0.6",
                     "--auto-confirm", "60", "--install-seconds", "90")),
    Case("seed100-37", (_p(SEED_100), "--nodes", "37", "--from-version", "2.32.0.6",
                        "--auto-confirm", "1", "--install-seconds", "7")),
    Case("lab10", (_p(LAB), "--nodes", "10", "--from-version", "2.31.0.1", "--auto-confirm",
                   "20", "--install-seconds", "3")),
    Case("lab10-same-version", (_p(LAB), "--nodes", "10", "--from-version", "2.33.0.9")),
    Case("staging50", (_p(STAGING), "--nodes", "50", "--from-version", "2.31.0.1",
                       "--auto-confirm", "120")),
    Case("staging50-repo-config", (_p(STAGING), "--nodes", "50", "--from-version", "2.31.0.1",
                                   "--auto-confirm", "120", "--repo-config", _p(REPO_CONFIG),
                                   "--cluster", "staging-50")),
    Case("prod100", (_p(PROD), "--nodes", "100", "--from-version", "2.31.0.1", "--auto-confirm",
                     "60", "--install-seconds", "120")),
    Case("prod100-windows", (_p(PROD), "--nodes", "100", "--from-version", "2.31.0.1",
                             "--auto-confirm", "60", "--install-seconds", "120",
                             "--repo-config", _p(REPO_CONFIG), "--cluster", "prod-100",
                             "--start", "2026-12-01T18:00:00+08:00")),
    Case("prod100-windows-freeze", (_p(PROD), "--nodes", "100", "--from-version", "2.31.0.1",
                                    "--auto-confirm", "600", "--install-seconds", "900",
                                    "--repo-config", _p(REPO_CONFIG), "--cluster", "prod-100",
                                    "--start", "2026-12-23T23:00:00+08:00")),
    Case("prod100-rollback", (_i(PROD_ROLLBACK), "--nodes", "100", "--from-version", "2.31.0.1",
                              "--auto-confirm", "60", "--faults", _i("faults-many.yaml"))),
    Case("prod100-paused", (_i(PROD_PAUSED), "--nodes", "100", "--from-version", "2.31.0.1",
                            "--auto-confirm", "60", "--until", "3600")),
    Case("prod100-until", (_p(PROD), "--nodes", "100", "--from-version", "2.31.0.1",
                           "--auto-confirm", "60", "--until", "900")),
    Case("prod600", (_p(PROD), "--nodes", "600", "--from-version", "2.31.0.1",
                      "--auto-confirm", "60", "--install-seconds", "120")),
    Case("fw-lab4", (_p(FW), "--nodes", "4", "--from-version", "2.31.0.1", "--auto-confirm",
                     "10")),
)


def resolve(args: tuple[str, ...], inputs: Path) -> list[str]:
    out = []
    for arg in args:
        if arg.startswith("@"):
            out.append(str(inputs / arg[1:]))
        elif arg.startswith(("tests/", "examples-repo/")):
            out.append(str(ROOT / arg))
        else:
            out.append(arg)
    return out


def run(case: Case) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, ["simulate", *resolve(case.args, CORPUS / "inputs"), "--format", "json"],
        catch_exceptions=False,
    )
    return result.exit_code, result.stdout


def record() -> None:
    inputs = CORPUS / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    for name, text in INPUTS.items():
        (inputs / name).write_text(text, encoding="utf-8")
    for case in CASES:
        code, stdout = run(case)
        body = {"exit_code": code, "output": json.loads(stdout) if stdout.strip() else None}
        (CORPUS / f"{case.name}.json").write_text(
            json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(case.name, code, len(stdout))


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    record()
