"""Events from successive status snapshots (``reconciler.notify.events``, pure): each kind fires
once (its key is stable while the state lasts), a health failure once per check per step; the
key names the commit that started the rollout, never the head (our gate write-back moves it)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconciler.notify.events import derive_events
from reconciler.policy.notify_config import EVENT_KINDS
from reconciler.views.waits import GitContext
from tests.views.test_read_model import FAILED, GATE, HEALTH, NOW, PROMOTION, REJECTION, snap

CLUSTER = "prod-a"
GIT = GitContext(policy_file="clusters/prod-a/cluster-operator.yaml", pause_line=14)
WINDOW = [{"kind": "window", "until": "2026-11-30T22:00:00Z", "detail": "outside the windows"}]


#: the commit that started the rollout (the caller finds it in Git: reconciler.sync.rollout_start)
START = "a" * 40


def events(previous: dict[str, Any] | None, current: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.kind, e.key) for e in derive_events(CLUSTER, previous, current, now=NOW,
                                                   rollout=START, git=GIT)]


def done(phase: str = "Idling") -> dict[str, Any]:
    data = snap("Completed", phase=phase, index=3)
    return data


HELD = {"held": PROMOTION["held"]}
SRC = START[:12]

#: (case, previous snapshot, current snapshot, (kind, key) expected)
CASES: list[tuple[str, dict[str, Any] | None, dict[str, Any], list[tuple[str, str]]]] = [
    ("gate", snap("StepUpgrade"), snap("StepPaused", conditions=GATE, pause=True),
     [("gate", f"prod-a/{SRC}/gate/2/3")]),
    ("fallback", snap("StepUpgrade"), snap("StepPaused", conditions=FAILED, pause=True),
     [("fallback", f"prod-a/{SRC}/fallback/2/3")]),
    ("health", None, snap("StepUpgrade", health=HEALTH),
     [("health", f"prod-a/{SRC}/health/2/3/gpus-available")]),
    ("rollback", snap("StepUpgrade", phase="Terminating"), done(),
     [("rollback", f"prod-a/{SRC}/rollback/-")]),
    ("completed", snap("StepUpgrade", index=3), done(),
     [("completed", f"prod-a/{SRC}/completed/-")]),
    ("rejected", None, snap("StepUpgrade", rejection=REJECTION),
     [("rejected", f"prod-a/{'b' * 12}/rejected/-")]),
    ("promotion held", None, done() | {"promotion": HELD},
     [("promotion", f"prod-a/{'c' * 12}/promotion/held:2.34.0.1")]),
    ("promotion passed", done() | {"promotion": HELD}, done(),
     [("promotion", f"prod-a/{'c' * 12}/promotion/passed:2.34.0.1")]),
    ("window", snap("StepUpgrade"), snap("StepUpgrade", holds=WINDOW),
     [("window", f"prod-a/{SRC}/window/2/3/2026-11-30T22:00:00Z")]),
]


@pytest.mark.parametrize(("case", "previous", "current", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_each_kind_fires_with_a_stable_key(case: str, previous: dict[str, Any] | None,
                                           current: dict[str, Any],
                                           expected: list[tuple[str, str]]) -> None:
    assert events(previous, current) == expected
    # the same state seen again gives the same key (the ledger makes it once per sink)
    if case not in ("rollback", "completed", "promotion passed"):
        assert events(current, copy.deepcopy(current)) == expected
    else:  # a transition fires once: not again from the state it left behind
        assert events(current, copy.deepcopy(current)) == []


def test_the_table_covers_every_kind() -> None:
    assert {e[0] for c in CASES for e in c[3]} == set(EVENT_KINDS)


def test_transitions_need_a_previous_snapshot() -> None:
    """A notifier that starts sees no completion it did not watch."""
    assert events(None, done()) == []


def test_a_gate_names_the_exact_change_to_merge() -> None:
    [event] = derive_events(CLUSTER, None, snap("StepPaused", conditions=GATE, pause=True),
                            now=NOW, git=GIT)
    assert event.change is not None
    assert (event.change["path"], event.change["line"], event.change["after"]) == (
        "clusters/prod-a/cluster-operator.yaml", 14, "pause: false")
    assert "clusters/prod-a/cluster-operator.yaml:14" in event.text
    assert "`pause: false`" in event.text


def test_health_is_one_event_per_check_per_step_not_per_node() -> None:
    two_nodes = copy.deepcopy(HEALTH)
    step2 = snap("StepUpgrade", health=two_nodes)
    # the same check failing on another node of the same step: the same event
    other = copy.deepcopy(HEALTH)
    other["checks"]["gpus-available"]["node"] = "gpu-9"
    again = snap("StepUpgrade", health=other)
    assert events(step2, again) == events(None, step2)
    # the same check in the next step: a new event
    step3 = snap("StepUpgrade", index=3, health=other)
    assert events(again, step3) == [("health", f"prod-a/{SRC}/health/3/3/gpus-available")]
    # a second check failing: its own event
    both = copy.deepcopy(other)
    both["checks"]["temperature"]["state"] = "Failed"
    assert [k for _, k in events(step3, snap("StepUpgrade", index=3, health=both))] == [
        f"prod-a/{SRC}/health/3/3/gpus-available", f"prod-a/{SRC}/health/3/3/temperature"]


def test_a_rejected_commit_is_not_a_promotion_pass() -> None:
    assert events(done() | {"promotion": HELD}, done() | {"rejection": REJECTION}) == [
        ("rejected", f"prod-a/{'b' * 12}/rejected/-")]


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in ("rejected", "promotion held",
                                                                   "promotion passed")],
                         ids=lambda c: c[0])
def test_a_new_head_keeps_the_key_the_rollout_and_the_event_make_it(
        case: tuple[str, dict[str, Any] | None, dict[str, Any], list[tuple[str, str]]]) -> None:
    """The gate's own ``pause: true`` write-back, the gate release and a settings change are new
    heads (the snapshot's ``sourceCommit``) during one rollout: the key does not move."""
    _, previous, current, expected = case
    head = {"sourceCommit": "f" * 40}
    before = copy.deepcopy(previous) | head if previous is not None else None
    assert events(before, copy.deepcopy(current) | head) == expected
    assert all("f" * 12 not in key for _, key in expected)


def test_without_the_rollouts_commit_the_key_says_unknown_not_the_head() -> None:
    [event] = derive_events(CLUSTER, None, snap("StepPaused", conditions=GATE, pause=True),
                            now=NOW, git=GIT)
    assert event.key == "prod-a/-/gate/2/3"
    assert event.rollout == ""
