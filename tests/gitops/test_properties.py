"""Properties of the pure Git-side decisions, over generated inputs."""

from __future__ import annotations

import io
import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from reconciler.gitops.edits import (
    PAUSE_FIELD,
    PAYLOAD_VERSION_FIELD,
    EditOutcome,
    FieldEdit,
    edit_policy_text,
)
from reconciler.gitops.status_policy import (
    WriterState,
    WriterTiming,
    committed,
    due_at,
    observe,
    snapshot_key,
)

PHASES = ["Idling", "Progressing", "Terminating", "Disabling", "Disabled"]
STATES = ["StepUpgradeInit", "StepUpgrade", "StepPaused", "StepReady", "Completed"]


def snapshot(phase: str, step: int, state: str, ready: int) -> dict[str, Any]:
    return {"upgradeStatus": {"phase": phase, "status": {
        "currentStepIndex": step, "currentStepState": state, "totalUpgradeReadyReplicas": ready}}}


updates = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=20.0),  # gap to the previous update, seconds
        st.sampled_from(PHASES), st.integers(0, 3), st.sampled_from(STATES), st.integers(0, 10),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(updates)
def test_status_commits_are_spaced_distinct_and_end_on_the_latest_state(
        events: list[tuple[float, str, int, str, int]]) -> None:
    timing = WriterTiming(min_interval=5.0, max_delay=30.0)
    state = WriterState()
    now = 0.0
    commits: list[tuple[float, Any]] = []

    def advance_to(until: float, state: WriterState) -> WriterState:
        while (due := due_at(state, timing)) is not None and due <= until:
            commits.append((due, state.pending_key))
            state = committed(state, due)
        return state

    last: dict[str, Any] | None = None
    for gap, phase, step, stage, ready in events:
        now += gap
        state = advance_to(now, state)
        last = snapshot(phase, step, stage, ready)
        state = observe(state, last, now)
    state = advance_to(now + 1000, state)
    keys = [key for _, key in commits]
    assert all(a != b for a, b in itertools.pairwise(keys)), "same state twice in a row"
    for (t1, _), (t2, key) in itertools.pairwise(commits):
        assert key.terminal or key.rejected_commit or t2 - t1 >= timing.min_interval - 1e-9
    if last is not None and commits:
        assert keys[-1] == snapshot_key(last)
    assert state.pending is None


def dump(data: Any, mapping: int, sequence: int, offset: int) -> str:
    yaml = YAML()
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


indents = st.sampled_from([(2, 2, 0), (2, 4, 2), (4, 4, 2), (4, 6, 4), (3, 3, 0)])
scalars = st.one_of(st.integers(-5, 100), st.booleans(), st.sampled_from(["a", "50%", "x y"]))
extra_keys = st.dictionaries(st.sampled_from(["foo", "bar", "maca", "runtime"]),
                             st.one_of(scalars, st.lists(scalars, max_size=3)), max_size=3)


@settings(max_examples=150, deadline=None)
@given(indents, extra_keys, st.booleans(), st.sampled_from(["2.33.0.9", "2.33.0.9-amd64"]),
       st.booleans())
def test_write_backs_change_the_field_and_nothing_else(
        indent: tuple[int, int, int], extra: dict[str, Any], has_pause: bool, version: str,
        restore: bool) -> None:
    policy: dict[str, Any] = {"enableRollout": True,
                              "upgradeSteps": [{"replicas": 1},
                                               {"replicas": "100%", "pauseDuration": 0}]}
    if has_pause:
        policy["pause"] = False
    obj = {"apiVersion": "gpu.metax-tech.com/v1alpha1", "kind": "ClusterOperator",
           "metadata": {"name": "cluster-operator"},
           "spec": {"driver": {"payload": {"name": "driver-image", "version": version},
                               "upgradePolicy": policy}, **extra}}
    text = dump(obj, *indent)
    edit = (FieldEdit(PAYLOAD_VERSION_FIELD, "2.32.0.6", "2.33.0.9") if restore
            else FieldEdit(PAUSE_FIELD, True))
    result = edit_policy_text(text, [edit])
    assert result.outcome is EditOutcome.CHANGED and result.text is not None
    after = YAML(typ="safe").load(result.text)
    expected = YAML(typ="safe").load(text)
    if restore:
        expected["spec"]["driver"]["payload"]["version"] = "2.32.0.6"
    else:
        expected["spec"]["driver"]["upgradePolicy"]["pause"] = True
    assert after == expected
    before_lines, after_lines = text.splitlines(), result.text.splitlines()
    changed = len(set(after_lines) ^ set(before_lines))
    assert changed <= 2 and abs(len(after_lines) - len(before_lines)) <= 1
