"""Property tests: generated valid policies pass; one mutation makes them fail at its pointer."""

from __future__ import annotations

import copy
import io
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from reconciler.policy.document import INT64_MAX, INT64_MIN
from reconciler.policy.validation import validate_document

INT32_MAX = 2**31 - 1
POLICY = "/spec/driver/upgradePolicy"


def percent(low: int = 1) -> st.SearchStrategy[str]:
    return st.integers(low, 100).map(lambda n: f"{n}%")


@st.composite
def steps(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Strictly increasing targets of one kind, ending with '100%'."""
    use_percent = draw(st.booleans())
    if use_percent:
        values = sorted(draw(st.sets(st.integers(1, 99), max_size=5)))
        targets: list[int | str] = [f"{v}%" for v in values]
    else:
        targets = sorted(draw(st.sets(st.integers(1, INT64_MAX), max_size=5)))
    targets.append("100%")
    built: list[dict[str, Any]] = []
    for target in targets:
        step: dict[str, Any] = {"replicas": target}
        if draw(st.booleans()):  # left out: a person confirms the step
            step["pauseDuration"] = draw(st.integers(0, INT64_MAX))
        if draw(st.booleans()):  # left out: 0
            step["toleration"] = draw(st.one_of(st.integers(0, INT64_MAX), percent(0)))
        built.append(step)
    return built


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    policy: dict[str, Any] = {"enableRollout": draw(st.booleans())}
    if policy["enableRollout"] or draw(st.booleans()):
        policy["upgradeSteps"] = draw(steps())
    optional = {
        "pause": st.booleans(),
        # every integer of the int64 range the field allows is valid
        # (docs/policy.md#how-the-numbers-resolve)
        "maxParallel": st.one_of(st.integers(1, INT64_MAX), percent(1)),
        "maxUnavailable": st.one_of(st.integers(0, INT64_MAX), percent(0)),
        "maxFailureThreshold": st.integers(1, INT32_MAX),  # the CRD's format int32
        "fallback": st.sampled_from(["rollback", "pause"]),
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            policy[name] = draw(strategy)
    return {
        "apiVersion": "gpu.metax-tech.com/v1alpha1",
        "kind": "ClusterOperator",
        "metadata": {"name": draw(st.sampled_from(["cluster-operator", "lab-10", "a.b"]))},
        "spec": {"driver": {
            "payload": {"name": "driver-image", "registry": "registry.example.com/metax",
                        "version": draw(st.sampled_from(["2.32.0.6", "2.33.0.9-amd64"]))},
            "upgradePolicy": policy,
        }},
    }


def dump(obj: Any, flow: bool) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = flow
    stream = io.StringIO()
    yaml.dump(obj, stream)
    return stream.getvalue()


@settings(max_examples=150, deadline=None)
@given(obj=policies(), flow=st.booleans())
def test_generated_valid_policies_pass(obj: dict[str, Any], flow: bool) -> None:
    result = validate_document(dump(obj, flow), "gen.yaml")
    assert result.errors == []
    assert result.obj == obj


#: Beyond int64 in either direction: an error at the value, whatever the field's own bounds.
BEYOND_INT64 = st.one_of(st.integers(min_value=INT64_MAX + 1), st.integers(max_value=INT64_MIN - 1))
# Each mutation: (field, bad values, rule expected). Fields are pointers relative to the policy.
BAD_VALUES: dict[str, tuple[st.SearchStrategy[Any], set[str]]] = {
    "enableRollout": (st.sampled_from(["true", "false", "yes", "no", "on", "off", 1, 0, None]),
                      {"schema-type"}),
    "pause": (st.sampled_from(["true", "false", "yes", "off", 1, None, []]), {"schema-type"}),
    "maxParallel": (st.one_of(st.integers(-100, 0), BEYOND_INT64, st.sampled_from(
        ["0%", "101%", "50 %", "-10%", "100", "1.5%", 1.5, True, None])),
        {"schema-minimum", "percent-range", "percent-format", "schema-type", "integer-range"}),
    "maxUnavailable": (st.one_of(st.integers(-100, -1), BEYOND_INT64, st.sampled_from(
        ["101%", "10 %", "ten", 0.5, False])),
        {"schema-minimum", "percent-range", "percent-format", "schema-type", "integer-range"}),
    "maxFailureThreshold": (st.one_of(st.integers(-5, 0), st.integers(INT32_MAX + 1, INT64_MAX),
                                      BEYOND_INT64, st.sampled_from(["3", 3.0, "10%", True])),
                            {"schema-minimum", "schema-maximum", "schema-type",
                             "integer-range"}),
    "fallback": (st.one_of(st.sampled_from(["Rollback", "Pause", "abort", "", 1]),
                           st.text(min_size=1).filter(lambda s: s not in ("rollback", "pause"))),
                 {"schema-enum", "schema-type"}),
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=policies(), data=st.data())
def test_single_mutation_fails_at_its_pointer(obj: dict[str, Any], data: st.DataObject) -> None:
    mutated = copy.deepcopy(obj)
    policy = mutated["spec"]["driver"]["upgradePolicy"]
    kind = data.draw(st.sampled_from([*BAD_VALUES, "unknown-key", "step-replicas",
                                      "step-pause", "step-toleration", "last-step"]))
    if kind in BAD_VALUES:
        strategy, rules = BAD_VALUES[kind]
        policy[kind] = data.draw(strategy)
        pointer = f"{POLICY}/{kind}"
    elif kind == "unknown-key":
        name = data.draw(st.sampled_from(["maxParalel", "strategy", "Pause", "max_parallel"]))
        policy[name] = 1
        pointer, rules = f"{POLICY}/{name}", {"unknown-field"}
    else:
        policy.setdefault("upgradeSteps", [{"replicas": "100%", "pauseDuration": 0}])
        index = data.draw(st.integers(0, len(policy["upgradeSteps"]) - 1))
        if kind == "last-step":
            index = len(policy["upgradeSteps"]) - 1
            policy["upgradeSteps"][index]["replicas"] = data.draw(
                st.one_of(st.integers(10_001, 20_000), st.just("99%")))
            pointer, rules = f"{POLICY}/upgradeSteps/{index}/replicas", {"last-step-100",
                                                                         "steps-increasing"}
        elif kind == "step-replicas":
            policy["upgradeSteps"][index]["replicas"] = data.draw(
                st.sampled_from([0, -1, "0%", "200%", "x%", "5", 2.5, None]))
            pointer = f"{POLICY}/upgradeSteps/{index}/replicas"
            rules = {"schema-minimum", "percent-range", "percent-format", "schema-type"}
        elif kind == "step-toleration":
            policy["upgradeSteps"][index]["toleration"] = data.draw(
                st.sampled_from([-1, "101%", "x", "5", 1.5, None, True]))
            pointer = f"{POLICY}/upgradeSteps/{index}/toleration"
            rules = {"schema-minimum", "percent-range", "percent-format", "schema-type"}
        else:
            policy["upgradeSteps"][index]["pauseDuration"] = data.draw(
                st.sampled_from([-1, "10s", {}, {"a": 1}, None, 1.5, []]))
            pointer = f"{POLICY}/upgradeSteps/{index}/pauseDuration"
            rules = {"schema-minimum", "schema-type"}
    result = validate_document(dump(mutated, flow=data.draw(st.booleans())), "mut.yaml")
    assert not result.ok
    assert {(f.pointer, f.rule) for f in result.errors} & {(pointer, r) for r in rules}, (
        pointer, [(f.pointer, f.rule, f.message) for f in result.errors])
    # nothing else in the file is blamed
    assert {f.pointer for f in result.errors} == {pointer}


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(st.binary(max_size=400), st.text(max_size=400)))
def test_arbitrary_input_never_raises(data: bytes | str) -> None:
    result = validate_document(data, "fuzz.yaml")
    for finding in result.findings:
        assert finding.line >= 1 and finding.column >= 1
        assert finding.severity in ("error", "warning", "info") and finding.message


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_damaged_policy_never_raises(data: st.DataObject) -> None:
    """Random edits of a real policy: deleted, inserted or replaced characters."""
    from tests.policy.texts import SEED_100

    text = SEED_100
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 5))
        insert = data.draw(st.text(alphabet=" \t\n:-[]{}#&*!|>'\"%@`,?0aZ", max_size=4))
        text = text[:at] + insert + text[at + cut:]
    result = validate_document(text, "damaged.yaml")
    lines = text.count("\n") + 2
    assert all(1 <= f.line <= lines for f in result.findings)
