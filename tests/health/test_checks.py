"""The pure half of the health gates: expectations, substitution escaped for PromQL, the verdict
of one reading, and the node and step timers on a virtual clock (docs/health.md)."""

from __future__ import annotations

import math
import re

import promql_parser
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.health.checks import (
    HEALTH_CHECK_FAILED,
    HealthConfig,
    HealthRecord,
    HealthState,
    ManySamples,
    NodeCheck,
    NoSample,
    PlaceholderError,
    QueryError,
    Reading,
    StepCheck,
    Verdict,
    evaluate,
    node_health,
    node_query,
    nodes_regex,
    parse_expectation,
    pending_node_queries,
    pending_step_queries,
    step_health,
    step_query,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, the virtual clock's start
GPUS = NodeCheck("gpus-available", 'min(mx_gpu_state{Hostname="{{node}}"})',
                 parse_expectation("== 1"), within=300.0)
HOT = NodeCheck("not-hot", 'max(mx_chip_hotspot_temp{Hostname="{{node}}"})',
                parse_expectation("< 90"), within=600.0)
THROTTLE = StepCheck("no-throttling", 'max(mx_clk_thr{Hostname=~"{{nodes}}"}) or vector(0)',
                     parse_expectation("== 0"), hold=120.0)
NO_ANSWERS: list[Reading | None] = [None, NoSample(), ManySamples(8), math.nan,
                                    QueryError(None, "connection refused"),
                                    QueryError(400, "parse error at char 5")]


def matcher_value(query: str, label: str) -> str:
    """The value of the ``label`` matcher as PromQL's parser reads the query."""
    expr = promql_parser.parse(query)
    while not isinstance(expr, promql_parser.VectorSelector):
        expr = expr.lhs if isinstance(expr, promql_parser.BinaryExpr) else expr.expr
    [matcher] = [m for m in expr.matchers.matchers if m.name == label]
    return str(matcher.value)


# -- expectations and verdicts -------------------------------------------------------------------

@pytest.mark.parametrize(("expect", "value", "verdict"), [
    ("== 1", 1.0, Verdict.PASS), ("== 1", 0.0, Verdict.FAIL),
    ("!= 0", 3.0, Verdict.PASS), ("!= 0", 0.0, Verdict.FAIL),
    ("< 90", 89.9, Verdict.PASS), ("< 90", 90.0, Verdict.FAIL),
    ("<= 90", 90.0, Verdict.PASS), ("<= 90", 90.5, Verdict.FAIL),
    ("> 0.5", 0.6, Verdict.PASS), ("> 0.5", 0.5, Verdict.FAIL),
    (">= -1", -1.0, Verdict.PASS), (">= -1", -1.5, Verdict.FAIL),
    ("==1e3", 1000.0, Verdict.PASS), (" <  .5 ", 0.25, Verdict.PASS),
    ("< 90", math.inf, Verdict.FAIL), ("> 90", math.inf, Verdict.PASS),
])
def test_verdict_of_a_sample(expect: str, value: float, verdict: Verdict) -> None:
    assert evaluate(NodeCheck("c", "x", parse_expectation(expect), 60.0), value) is verdict


@pytest.mark.parametrize("reading", NO_ANSWERS, ids=repr)
def test_no_answer_waits(reading: Reading | None) -> None:
    assert evaluate(GPUS, reading) is Verdict.WAITING
    assert evaluate(NodeCheck("c", "x", parse_expectation("!= 0"), 60.0), reading) \
        is Verdict.WAITING  # NaN != 0 is true in IEEE arithmetic: still no pass


@pytest.mark.parametrize("text", ["= 1", "== x", "1", "", "== 1e999", "== nan", "<> 1"])
def test_bad_expectations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_expectation(text)


non_answers = st.one_of(
    st.none(), st.just(NoSample()), st.integers(2, 10_000).map(ManySamples), st.just(math.nan),
    st.builds(QueryError, st.one_of(st.none(), st.integers(100, 599)), st.text(max_size=50)),
)
expectations = st.builds(lambda op, n: parse_expectation(f"{op} {n}"),
                         st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
                         st.integers(-1000, 1000))


@given(expectations, st.lists(non_answers, min_size=1, max_size=6),
       st.floats(0, 1e6), st.floats(0, 1e6))
def test_no_sample_or_error_never_passes(expect: object, readings: list[Reading | None],
                                         within: float, hold: float) -> None:
    assert isinstance(expect, type(GPUS.expect))
    node = NodeCheck("c", 'min(x{Hostname="{{node}}"})', expect, within)
    step = StepCheck("s", 'max(x{Hostname=~"{{nodes}}"})', expect, hold)
    node_record = HealthRecord(T0)
    step_record = HealthRecord(T0)
    for i, reading in enumerate(readings):
        now = T0 + i * 100_000.0
        assert evaluate(node, reading) is Verdict.WAITING
        answers = {} if reading is None else {"c": reading, "s": reading}
        nh = node_health([node], "n1", "2.33.0.9", node_record, answers, now)
        sh = step_health([step], ["n1"], "2.33.0.9", step_record, answers, now)
        assert nh.state is HealthState.WAITING and nh.failure is None
        assert sh.state is HealthState.WAITING and sh.failure is None
        assert not nh.record.passed and not sh.record.passed and not sh.record.holding
        node_record, step_record = nh.record, sh.record


# -- substitution --------------------------------------------------------------------------------

def test_node_is_escaped_inside_a_double_quoted_label_value() -> None:
    node = 'evil"} or vector(1) or x{a="\\'
    query = node_query(GPUS, node, "2.33.0.9")
    assert query == 'min(mx_gpu_state{Hostname="evil\\"} or vector(1) or x{a=\\"\\\\"})'
    assert matcher_value(query, "Hostname") == node


def test_single_quoted_values_escape_the_single_quote() -> None:
    check = NodeCheck("v", "min(x{driver_version='{{version}}', Hostname='{{node}}'})",
                      parse_expectation("== 1"), 60.0)
    query = node_query(check, "it's", "2.33'\n")
    assert matcher_value(query, "Hostname") == "it's"
    assert matcher_value(query, "driver_version") == "2.33'\n"


@given(st.text(min_size=1, max_size=40))
def test_any_node_name_round_trips_through_promql(node: str) -> None:
    assert matcher_value(node_query(GPUS, node, "1"), "Hostname") == node


names = st.text(st.sampled_from("abz09-.|*+?()[]{}^$\\ "), min_size=1, max_size=12)


@given(st.lists(names, min_size=1, max_size=5, unique=True), names)
def test_nodes_regex_matches_exactly_the_steps_nodes(nodes: list[str], other: str) -> None:
    query = step_query(THROTTLE, nodes, "1")
    regex = matcher_value(query, "Hostname")
    assert regex == nodes_regex(nodes)
    for node in nodes:  # Prometheus anchors a label regex at both ends
        assert re.fullmatch(f"(?:{regex})", node)
    assert (re.fullmatch(f"(?:{regex})", other) is not None) == (other in nodes)


def test_nodes_are_an_alternation_with_metacharacters_escaped() -> None:
    assert nodes_regex(["gpu-1.dc", "gpu-2.dc", "gpu-1.dc"]) == r"gpu-1\.dc|gpu-2\.dc"
    assert step_query(THROTTLE, ["gpu-1.dc", "gpu-2"], "v") == \
        'max(mx_clk_thr{Hostname=~"gpu-1\\\\.dc|gpu-2"}) or vector(0)'
    with pytest.raises(ValueError, match="at least one node"):
        nodes_regex([])


@pytest.mark.parametrize(("query", "message"), [
    ('x{a="{{nodes}}"}', "exists only in stepChecks"),
    ('x{a="{{host}}"}', "unknown placeholder"),
    ("x{a={{node}}}", "in no string"),
    ("x{a=`{{node}}`}", "raw"),
    ('x{a="{{node"}', "without a closing"),
])
def test_placeholders_that_cannot_be_substituted(query: str, message: str) -> None:
    with pytest.raises(PlaceholderError, match=message):
        node_query(NodeCheck("c", query, parse_expectation("== 1"), 60.0), "n", "v")


@pytest.mark.parametrize("version", ["2.33.0.9", "2.33.0.9-amd64", "2.33.0.9-arm64"])
def test_version_is_written_as_the_exporter_reports_it(version: str) -> None:
    check = NodeCheck("v", 'count(x{Hostname="{{node}}", driver_version!="{{version}}"})',
                      parse_expectation("== 0"), 60.0)
    assert node_query(check, "n1", version) == \
        'count(x{Hostname="n1", driver_version!="2.33.0.9"})'
    step = StepCheck("s", 'max(x{Hostname=~"{{nodes}}", driver_version="{{version}}"})',
                     parse_expectation("== 0"), 0.0)
    assert step_query(step, ["n1"], version) == 'max(x{Hostname=~"n1", driver_version="2.33.0.9"})'


def test_placeholder_like_text_in_a_comment_is_left_alone() -> None:
    check = NodeCheck("c", 'min(x{a="{{node}}"}) # {{anything}}\n', parse_expectation("== 1"),
                      60.0)
    assert node_query(check, "n1", "v") == 'min(x{a="n1"}) # {{anything}}\n'


# -- node checks on a virtual clock --------------------------------------------------------------

def test_node_check_passes_at_its_first_true_reading_and_stays_passed() -> None:
    first = node_health([GPUS], "n1", "v", HealthRecord(T0), {"gpus-available": 0.0}, T0 + 10)
    assert first.state is HealthState.WAITING and first.failure is None
    assert first.message == ("health check gpus-available waiting since 2026-01-01T00:00:00Z "
                             "(last reading: 0)")
    passed = node_health([GPUS], "n1", "v", first.record, {"gpus-available": 1.0}, T0 + 20)
    assert passed.state is HealthState.PASSED and passed.record.passed == {
        "gpus-available": T0 + 20}
    assert passed.message == ""
    later = node_health([GPUS], "n1", "v", passed.record, {"gpus-available": 0.0}, T0 + 900)
    assert later.state is HealthState.PASSED  # a passed check is not asked again
    assert pending_node_queries([GPUS], "n1", "v", passed.record) == {}


def test_node_check_false_until_within_runs_out_fails_the_node() -> None:
    before = node_health([GPUS], "n1", "v", HealthRecord(T0), {"gpus-available": 0.0},
                         T0 + 299.9)
    assert before.state is HealthState.WAITING and before.failure is None
    failed = node_health([GPUS], "n1", "v", HealthRecord(T0), {"gpus-available": 0.0}, T0 + 300)
    assert failed.state is HealthState.FAILED
    assert failed.failure is not None
    assert (failed.failure.reason, failed.failure.check, failed.failure.node,
            failed.failure.value) == (HEALTH_CHECK_FAILED, "gpus-available", "n1", "0")
    assert failed.failure.query == 'min(mx_gpu_state{Hostname="n1"})'
    assert failed.message == ('health check gpus-available failed on node n1: value 0 (query '
                              'min(mx_gpu_state{Hostname="n1"}))')


@pytest.mark.parametrize("reading", NO_ANSWERS[1:], ids=repr)
def test_node_check_without_an_answer_past_within_waits_and_fails_nothing(
        reading: Reading) -> None:
    health = node_health([GPUS], "n1", "v", HealthRecord(T0), {"gpus-available": reading},
                         T0 + 3600)
    assert health.state is HealthState.WAITING and health.failure is None
    assert health.message.startswith(
        "health check gpus-available waiting since 2026-01-01T00:00:00Z (last reading: ")


def test_node_with_two_checks_is_upgraded_only_when_both_passed() -> None:
    checks = [GPUS, HOT]
    assert pending_node_queries(checks, "n1", "v", HealthRecord(T0)) == {
        "gpus-available": 'min(mx_gpu_state{Hostname="n1"})',
        "not-hot": 'max(mx_chip_hotspot_temp{Hostname="n1"})'}
    one = node_health(checks, "n1", "v", HealthRecord(T0),
                      {"gpus-available": 1.0, "not-hot": 95.0}, T0 + 30)
    assert one.state is HealthState.WAITING
    assert [c.state for c in one.checks] == [HealthState.PASSED, HealthState.WAITING]
    assert pending_node_queries(checks, "n1", "v", one.record) == {
        "not-hot": 'max(mx_chip_hotspot_temp{Hostname="n1"})'}
    both = node_health(checks, "n1", "v", one.record, {"not-hot": 70.0}, T0 + 40)
    assert both.state is HealthState.PASSED
    assert both.record.passed == {"gpus-available": T0 + 30, "not-hot": T0 + 40}


def test_first_failing_check_names_the_failure_when_several_fail() -> None:
    health = node_health([GPUS, HOT], "n1", "v", HealthRecord(T0),
                         {"gpus-available": 0.0, "not-hot": 99.0}, T0 + 601)
    assert health.state is HealthState.FAILED
    assert health.failure is not None and health.failure.check == "gpus-available"
    assert [c.state for c in health.checks] == [HealthState.FAILED, HealthState.FAILED]


def test_node_without_checks_passes() -> None:
    assert node_health([], "n1", "v", HealthRecord(T0), {}, T0).state is HealthState.PASSED


def test_node_timers_resume_from_the_stored_annotation() -> None:
    first = node_health([GPUS, HOT], "n1", "v", HealthRecord(T0), {"not-hot": 50.0}, T0 + 5)
    stored = first.record.to_text()
    assert stored == ('{"passed":{"not-hot":"2026-01-01T00:00:05Z"},'
                      '"started":"2026-01-01T00:00:00Z"}')
    resumed = HealthRecord.from_text(stored, default_started=T0 + 1000)
    assert resumed == first.record
    failed = node_health([GPUS, HOT], "n1", "v", resumed, {"gpus-available": 0.0}, T0 + 300)
    assert failed.state is HealthState.FAILED  # within counts from the stored start


@pytest.mark.parametrize("text", [None, "", "garbage", "[]", '{"started": 5}',
                                  '{"started": "2026-01-01T00:00:00"}',  # no time zone
                                  '{"passed": {"gpus-available": "yesterday"}}'])
def test_garbled_record_passes_nothing(text: str | None) -> None:
    record = HealthRecord.from_text(text, default_started=T0)
    assert record == HealthRecord(T0)
    assert pending_node_queries([GPUS], "n1", "v", record) == {
        "gpus-available": 'min(mx_gpu_state{Hostname="n1"})'}


# -- step checks on a virtual clock --------------------------------------------------------------

NODES = ["n1", "n2"]


def test_step_check_passes_after_holding_for_its_duration() -> None:
    record = HealthRecord(T0)
    at = {}
    for t in (0, 60, 119):
        health = step_health([THROTTLE], NODES, "v", record, {"no-throttling": 0.0}, T0 + t)
        assert health.state is HealthState.WAITING
        record = health.record
        at[t] = health
    assert record.holding == {"no-throttling": T0}
    assert at[60].message == ("health check no-throttling waiting since 2026-01-01T00:00:00Z"
                              " (last reading: 0)")
    done = step_health([THROTTLE], NODES, "v", record, {"no-throttling": 0.0}, T0 + 120)
    assert done.state is HealthState.PASSED
    assert done.record.passed == {"no-throttling": T0 + 120} and done.record.holding == {}
    assert pending_step_queries([THROTTLE], NODES, "v", done.record) == {}


def test_false_step_check_fails_the_batch_at_once_and_resets_its_hold() -> None:
    record = step_health([THROTTLE], NODES, "v", HealthRecord(T0), {"no-throttling": 0.0},
                         T0 + 100).record
    failed = step_health([THROTTLE], NODES, "v", record, {"no-throttling": 2.0}, T0 + 110)
    assert failed.state is HealthState.FAILED and failed.record.holding == {}
    assert failed.failure is not None
    assert (failed.failure.reason, failed.failure.check, failed.failure.value,
            failed.failure.node) == (HEALTH_CHECK_FAILED, "no-throttling", "2", None)
    assert failed.failure.query == 'max(mx_clk_thr{Hostname=~"n1|n2"}) or vector(0)'
    assert failed.message == ('step health check no-throttling failed: value 2 (query '
                              'max(mx_clk_thr{Hostname=~"n1|n2"}) or vector(0))')


@pytest.mark.parametrize("reading", NO_ANSWERS, ids=repr)
def test_no_answer_restarts_the_hold_without_failing(reading: Reading | None) -> None:
    record = step_health([THROTTLE], NODES, "v", HealthRecord(T0), {"no-throttling": 0.0},
                         T0).record
    answers = {} if reading is None else {"no-throttling": reading}
    gap = step_health([THROTTLE], NODES, "v", record, answers, T0 + 60)
    assert gap.state is HealthState.WAITING and gap.failure is None
    assert gap.record.holding == {}
    again = step_health([THROTTLE], NODES, "v", gap.record, {"no-throttling": 0.0}, T0 + 130)
    assert again.state is HealthState.WAITING  # held since T0+130 only, not since T0
    assert again.record.holding == {"no-throttling": T0 + 130}


def test_step_check_without_for_passes_at_the_first_true_reading() -> None:
    check = StepCheck("s", 'max(x{Hostname=~"{{nodes}}"})', parse_expectation("< 1"), 0.0)
    health = step_health([check], NODES, "v", HealthRecord(T0), {"s": 0.0}, T0 + 1)
    assert health.state is HealthState.PASSED and health.record.passed == {"s": T0 + 1}


def test_step_hold_resumes_from_the_stored_status() -> None:
    record = step_health([THROTTLE], NODES, "v", HealthRecord(T0), {"no-throttling": 0.0},
                         T0 + 10).record
    stored = record.as_data()
    assert stored == {"started": "2026-01-01T00:00:00Z",
                      "holding": {"no-throttling": "2026-01-01T00:00:10Z"}}
    resumed = HealthRecord.from_data(stored, default_started=T0 + 999)
    done = step_health([THROTTLE], NODES, "v", resumed, {"no-throttling": 0.0}, T0 + 130)
    assert done.state is HealthState.PASSED


def test_config_from_a_validated_section() -> None:
    config = HealthConfig.from_obj({
        "prometheus": {"url": "http://p:9090", "timeout": "2s"}, "interval": "15s",
        "nodeChecks": [{"name": "a", "query": "min(x)", "expect": ">= 1", "within": "1m30s"}],
        "stepChecks": [{"name": "b", "query": "max(y)", "expect": "== 0", "for": "2m"}],
    })
    assert (config.timeout, config.interval) == (2.0, 15.0)
    assert config.node_checks == (NodeCheck("a", "min(x)", parse_expectation(">= 1"), 90.0),)
    assert config.step_checks == (StepCheck("b", "max(y)", parse_expectation("== 0"), 120.0),)
