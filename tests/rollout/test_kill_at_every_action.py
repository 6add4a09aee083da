"""A controller killed after any prefix of any pass's actions, its status write lost, resumes to
the same end (docs/rollout.md#restart-safety-in-short).

Each scenario is a whole small rollout (5 nodes; the canary, then 3, then all; the canary step
behind a gate) played to its end once as the reference. Then, for every pass of it and every
point of that pass a kill model allows, the rollout is played again with the controller killed
there: those actions landed, the pass's status was never written, and the restarted controller
plans from the status before it. Every such run must end as the reference did: the same phase,
conditions and (but for a rollback, whose counters depend on when it caught the rollout)
counters; every node settled (schedulable, no move or cordon ahead recorded, on the new
revision, or back on the old one after a rollback); no driver pod deleted more often per node
and revision; no workload evicted twice; a person asked to confirm exactly the gates and
fallbacks of the reference.

Three kill models: ``prefix``, the executor's order (the actions in order, stopped after any of
them, the whole pass included); ``per_node``, the dispatcher's (the nodes side by side, any
combination of them stopped after a prefix of their own actions, the cluster-wide actions behind
a lost one not handed out); ``own_record``, every action landed and the pass's own record (the
``rollout-state`` annotation, written first) too, but not the CRD's status fields
(docs/rollout.md#where-the-state-lives). The statuses of several passes are never lost at once: a
pass that starts a step waits for its status write before the next one acts.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from reconciler.names import ANN_FAILURE_TOLERATED
from reconciler.policy.rollout_settings import DrainSettings
from reconciler.rollout.model import PlannerSettings

from .crash_world import CrashWorld, Model, sweep
from .world import NEW_REV, OLD_REV, policy, steps

N = 5
CANARY = ("node-0001",)
#: the canary behind a gate, then 3 nodes, then the rest
STEPS = steps((1, None), (3, 0), ("100%", 0))
#: every step behind a gate
GATED = steps((1, None), (3, None), ("100%", None))
#: as STEPS, the second step tolerating one failure (docs/rollout.md#failures-tolerated-in-a-step)
TOLERATING = [*steps((1, None)), {"replicas": 3, "pauseDuration": 0, "toleration": 1},
              *steps(("100%", 0))]


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    world: Callable[[], CrashWorld]
    #: what the reference run shows, so that the scenario exercises what it is named for:
    #: (step index, condition) per confirmation by a person
    confirmed: tuple[tuple[int, str], ...] = ((1, "ManualGate"),)
    #: nodes whose driver pod was deleted twice for the new revision (a retry)
    retried: frozenset[str] = frozenset()
    #: workload pods evicted
    evicted: int = 0
    rolls_back: bool = False
    #: nodes a step's toleration leaves failed and cordoned at the end
    left_behind: frozenset[str] = frozenset()


def rollout(
    settings: PlannerSettings,
    *,
    upgrade_steps: list[dict[str, Any]] = STEPS,
    threshold: int = 1,
    fallback: str = "pause",
    fail_once: tuple[str, ...] = (),
    never_ready: tuple[str, ...] = (),
    busy: tuple[str, ...] = (),
) -> CrashWorld:
    raw = policy(upgradeSteps=upgrade_steps, maxParallel=2, maxFailureThreshold=threshold,
                 fallback=fallback)
    return CrashWorld(N, raw, canary=CANARY, settings=settings, fail_once=fail_once,
                      never_ready=never_ready, busy=busy, budget=5 if busy else None)


RETRYING = PlannerSettings(cordon_ahead=True, retry_backoff=20)

SCENARIOS = [
    Scenario("plain", partial(rollout, PlannerSettings(cordon_ahead=False))),
    Scenario("cordon_ahead", partial(rollout, PlannerSettings(cordon_ahead=True))),
    Scenario(
        "gates",
        partial(rollout, PlannerSettings(cordon_ahead=True), upgrade_steps=GATED),
        confirmed=((1, "ManualGate"), (2, "ManualGate"), (3, "ManualGate")),
    ),
    Scenario(
        "drain",
        partial(rollout, PlannerSettings(cordon_ahead=True, drain=DrainSettings()),
                busy=("node-0002", "node-0003", "node-0005")),
        evicted=3,
    ),
    # node-0003 fails once: the fallback pauses, a person resumes, its retry succeeds
    Scenario(
        "failure_pause",
        partial(rollout, RETRYING, fail_once=("node-0003",)),
        confirmed=((1, "ManualGate"), (2, "BatchFailed")),
        retried=frozenset({"node-0003"}),
    ),
    # one failure of two allowed: retried after the back-off, no pause
    Scenario(
        "failure_threshold2",
        partial(rollout, RETRYING, threshold=2, fail_once=("node-0003",)),
        retried=frozenset({"node-0003"}),
    ),
    Scenario(
        "rollback",
        partial(rollout, RETRYING, fallback="rollback", fail_once=("node-0004",)),
        rolls_back=True,
    ),
    Scenario(
        "rollback_drain",
        partial(rollout, dataclasses.replace(RETRYING, drain=DrainSettings()),
                fallback="rollback", fail_once=("node-0004",), busy=("node-0002", "node-0005")),
        evicted=2,
        rolls_back=True,
    ),
    # node-0003 fails in step 2, which tolerates one failure: left behind, the rollout completes
    # (maxFailureThreshold 1 would fall back at a counted failure)
    Scenario(
        "toleration",
        partial(rollout, RETRYING, upgrade_steps=TOLERATING, fail_once=("node-0003",)),
        left_behind=frozenset({"node-0003"}),
    ),
    # node-0003 fails in step 2 (tolerated), node-0005 in step 3, which tolerates none: the
    # fallback pauses, a person resumes, its retry succeeds. (Two failures in one step are not
    # swept: which one is tolerated is the one that fails first, and a kill that delays a start
    # changes that order; tests/rollout/test_toleration.py holds one pass's order.)
    Scenario(
        "toleration_then_fallback",
        partial(rollout, RETRYING, upgrade_steps=TOLERATING,
                fail_once=("node-0003", "node-0005")),
        confirmed=((1, "ManualGate"), (3, "BatchFailed")),
        retried=frozenset({"node-0005"}),
        left_behind=frozenset({"node-0003"}),
    ),
    # node-0003's first new pod never turns Ready: failed at its ready timeout, then retried
    Scenario(
        "ready_timeout_threshold2",
        partial(rollout, dataclasses.replace(RETRYING, ready_timeout=25), threshold=2,
                never_ready=("node-0003",)),
        retried=frozenset({"node-0003"}),
    ),
]


@pytest.mark.parametrize("model", ["prefix", "per_node", "own_record"])
@pytest.mark.parametrize("case", SCENARIOS, ids=lambda s: s.name)
def test_a_killed_pass_resumes_to_the_same_end(case: Scenario, model: Model) -> None:
    result = sweep(case.world, model, OLD_REV if case.rolls_back else NEW_REV, case.left_behind)

    ref = result.reference
    assert ref.rolled_back == case.rolls_back, ref.conditions
    assert tuple(ref.confirmations) == case.confirmed
    twice = {node for (node, rev), count in ref.deletions.items() if rev == NEW_REV and count == 2}
    assert twice == case.retried, ref.deletions
    assert sum(ref.evictions.values()) == case.evicted, ref.evictions
    tolerated = {name for name, node in ref.nodes.items()
                 if ANN_FAILURE_TOLERATED in dict(node.annotations)}
    assert tolerated == case.left_behind
    assert ("FailuresTolerated" in ref.conditions) == bool(case.left_behind), ref.conditions
    assert result.runs > 0

    shown = "\n".join(result.problems[:40])
    assert not result.problems, f"{len(result.problems)} problems in {result.runs} runs:\n{shown}"
