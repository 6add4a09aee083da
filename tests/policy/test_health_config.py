"""``health:`` in reconciler.yaml (docs/health.md): the documented example is valid at the top level
and per cluster; each mistake is one located error (line and column of the value)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.config.validation import validate_repo_config
from reconciler.health.checks import HealthConfig
from tests.policy.commands import validate_bounded

SPEC_EXAMPLE = """\
health:
  prometheus: {url: http://prometheus.monitoring:9090}
  nodeChecks:                     # per node, once its new driver pod is Ready
    - name: gpus-available
      query: 'min(mx_gpu_state{Hostname="{{node}}"})'
      expect: '== 1'              # operator and number; the query must return one sample
      within: 5m                  # not passed within this long after Ready: the node failed
  stepChecks:                     # for the step's nodes, after they all passed, before StepReady
    - name: no-throttling
      query: 'max(mx_clk_thr{Hostname=~"{{nodes}}"}) or vector(0)'
      expect: '== 0'
      for: 2m                     # must hold continuously this long
"""


def check(section: str, query: str, expect: str = "'== 1'", extra: str = "") -> str:
    """A config with one check of ``section`` (nodeChecks or stepChecks) at lines 3-5."""
    return (f"health:\n  prometheus: {{url: 'http://127.0.0.1:9090'}}\n  {section}:\n"
            f"    - name: c\n      query: {query}\n      expect: {expect}\n{extra}")


def test_spec_example_is_valid_and_parses_into_the_config() -> None:
    result = validate_repo_config(SPEC_EXAMPLE, "reconciler.yaml")
    assert result.ok, result.findings
    assert result.findings == []
    config = HealthConfig.from_obj(result.obj["health"])
    assert config.prometheus_url == "http://prometheus.monitoring:9090"
    assert [(c.name, str(c.expect), c.within) for c in config.node_checks] == [
        ("gpus-available", "== 1", 300.0)]
    assert [(c.name, str(c.expect), c.hold) for c in config.step_checks] == [
        ("no-throttling", "== 0", 120.0)]
    assert (config.timeout, config.interval) == (5.0, 10.0)


def test_spec_example_is_valid_in_a_cluster_section() -> None:
    nested = "clusters:\n  prod-100:\n" + "".join(
        "    " + line + "\n" for line in SPEC_EXAMPLE.splitlines())
    result = validate_repo_config(nested, "reconciler.yaml")
    assert result.ok, result.findings


def test_defaults_of_within_for_timeout_and_interval() -> None:
    text = check("nodeChecks", "'min(x)'") + "  stepChecks: [{name: s, query: 'max(y)', " \
        "expect: '< 90'}]\n"
    result = validate_repo_config(text, "reconciler.yaml")
    assert result.ok, result.findings
    config = HealthConfig.from_obj(result.obj["health"])
    assert config.node_checks[0].within == 300.0 and config.step_checks[0].hold == 0.0


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    rule: str
    line: int
    column: int
    message: str  # a fragment of the message


NODE = "nodeChecks"
STEP = "stepChecks"
CASES = [
    # expect: operator and number
    *[Case(f"expect-{bad}", check(NODE, "'min(x)'", f"'{bad}'"), "health-expect", 6, 15,
           "expected an operator (==, !=, <, <=, >, >=) and a number")
      for bad in ("= 1", "=== 1", "== one", "1", "== ", "~= 1", "== 1 2", "=> 1", "== 1%",
                  "== nan", "== inf", "== 0x10")],
    Case("expect-too-large", check(NODE, "'min(x)'", "'> 1e400'"), "health-expect", 6, 15,
         "too large"),
    Case("expect-not-a-string", check(NODE, "'min(x)'", "1"), "schema-type", 6, 15,
         "expected string"),
    # durations
    Case("within-bad-unit", check(NODE, "'min(x)'", extra="      within: 5 minutes\n"),
         "schema-pattern", 7, 15, "a duration like '30s'"),
    Case("within-zero", check(NODE, "'min(x)'", extra="      within: 0s\n"), "health-duration",
         7, 15, "must be longer than 0"),
    Case("within-huge", check(NODE, "'min(x)'", extra="      within: 99999999h\n"),
         "health-duration", 7, 15, "at most 168h"),
    Case("for-bad", check(STEP, "'max(x)'", extra="      for: -2m\n"), "schema-pattern", 7, 12,
         "a duration"),
    Case("for-in-a-node-check", check(NODE, "'min(x)'", extra="      for: 2m\n"),
         "unknown-field", 7, 7, "unknown field 'for'"),
    Case("within-in-a-step-check", check(STEP, "'max(x)'", extra="      within: 2m\n"),
         "unknown-field", 7, 7, "unknown field 'within'"),
    Case("timeout-zero", "health:\n  prometheus: {url: 'http://p:9090', timeout: 0ms}\n",
         "health-duration", 2, 47, "must be longer than 0"),
    Case("interval-bad", "health:\n  prometheus: {url: 'http://p:9090'}\n  interval: 10\n",
         "schema-type", 3, 13, "expected a duration"),
    # names
    Case("duplicate-name-node-and-step",
         check(NODE, "'min(x)'") + "  stepChecks:\n    - {name: c, query: 'max(y)', "
         "expect: '== 0'}\n", "health-duplicate-check", 8, 14,
         "'c' is already used by health.nodeChecks[0] (line 4)"),
    Case("name-not-a-dns-name", check(NODE, "'min(x)'").replace("name: c", "name: GPUs OK"),
         "schema-pattern", 4, 13, "lowercase DNS name"),
    # placeholders
    Case("unknown-placeholder", check(NODE, "'min(x{Hostname=\"{{host}}\"})'"),
         "health-placeholder", 5, 14, "unknown placeholder '{{host}}'"),
    Case("placeholder-with-spaces", check(NODE, "'min(x{Hostname=\"{{ node }}\"})'"),
         "health-placeholder", 5, 14, "unknown placeholder '{{ node }}'"),
    Case("nodes-in-a-node-check", check(NODE, "'min(x{Hostname=~\"{{nodes}}\"})'"),
         "health-placeholder", 5, 14, "'{{nodes}}' exists only in stepChecks"),
    Case("node-in-a-step-check", check(STEP, "'max(x{Hostname=\"{{node}}\"})'"),
         "health-placeholder", 5, 14, "'{{node}}' exists only in nodeChecks"),
    Case("placeholder-outside-a-string", check(NODE, "'min(x{Hostname={{node}}})'"),
         "health-placeholder", 5, 14, "'{{node}}' is in no string"),
    Case("placeholder-in-a-raw-string", check(NODE, "'min(x{Hostname=`{{node}}`})'"),
         "health-placeholder", 5, 14, "raw `...` string"),
    Case("unclosed-placeholder", check(NODE, "'min(x{Hostname=\"{{node\"})'"),
         "health-placeholder", 5, 14, "'{{' without a closing '}}'"),
    # PromQL after substitution
    Case("unbalanced-parenthesis", check(NODE, "'min(mx_gpu_state{Hostname=\"{{node}}\"}'"),
         "health-promql", 5, 14, "not valid PromQL: unclosed left parenthesis"),
    Case("unbalanced-brace", check(NODE, "'min(mx_gpu_state{Hostname=\"{{node}}\")'"),
         "health-promql", 5, 14, "not valid PromQL"),
    Case("unterminated-string", check(NODE, "'min(mx_gpu_state{Hostname=\"{{node}})'"),
         "health-promql", 5, 14, "not valid PromQL"),
    Case("unknown-function", check(NODE, "'minimum(mx_gpu_state)'"), "health-promql", 5, 14,
         "unknown function"),
    Case("bad-regex", check(STEP, "'max(x{Hostname=~\"(\"})'"), "health-promql", 5, 14,
         "regex"),
    Case("dangling-operator", check(NODE, "'min(x) +'"), "health-promql", 5, 14,
         "not valid PromQL"),
    Case("range-vector", check(NODE, "'mx_gpu_state{Hostname=\"{{node}}\"}[5m]'"),
         "health-promql", 5, 14, "returns a range vector"),
    Case("string-result", check(NODE, "'\"{{version}}\"'"), "health-promql", 5, 14,
         "returns a string"),
    Case("nested-too-deep", check(NODE, "'" + "(" * 70 + "1" + ")" * 70 + "'"),
         "health-promql", 5, 14, "nested more than 64 deep"),
    # Prometheus URL and unknown keys
    Case("url-not-http", "health:\n  prometheus: {url: 'ftp://p:9090'}\n",
         "health-prometheus-url", 2, 21, "expected an http:// or https:// URL, got 'ftp://p"),
    Case("url-no-scheme", "health:\n  prometheus: {url: 'prometheus:9090'}\n",
         "health-prometheus-url", 2, 21, "http:// or https://"),
    Case("url-no-host", "health:\n  prometheus: {url: 'http://'}\n",
         "health-prometheus-url", 2, 21, "no host"),
    Case("url-bad-port", "health:\n  prometheus: {url: 'http://p:99999'}\n",
         "health-prometheus-url", 2, 21, "not a valid URL"),
    Case("url-with-query", "health:\n  prometheus: {url: 'http://p:9090/?x=1'}\n",
         "health-prometheus-url", 2, 21, "without '?'"),
    Case("prometheus-missing", "health:\n  nodeChecks: []\n", "required-field", 1, 1,
         "missing required field 'prometheus'"),
    Case("unknown-key-in-health", "health:\n  prometheus: {url: 'http://p'}\n  checks: []\n",
         "unknown-field", 3, 3, "unknown field 'checks'"),
    Case("unknown-key-in-prometheus", "health:\n  prometheus: {url: 'http://p', user: a}\n",
         "unknown-field", 2, 33, "unknown field 'user'"),
    Case("unknown-key-in-a-check", check(NODE, "'min(x)'", extra="      severity: high\n"),
         "unknown-field", 7, 7, "unknown field 'severity'"),
    Case("missing-expect", "health:\n  prometheus: {url: 'http://p'}\n  nodeChecks:\n"
         "    - {name: a, query: 'min(x)'}\n", "required-field", 4, 7,
         "missing required field 'expect'"),
    Case("cluster-section-bad-expect",
         "clusters:\n  prod-100:\n    health:\n      prometheus: {url: 'http://p'}\n"
         "      stepChecks: [{name: s, query: 'max(x)', expect: '=< 0'}]\n",
         "health-expect", 5, 55, "clusters.prod-100.health.stepChecks[0].expect"),
    Case("cluster-section-unknown-key", "clusters:\n  prod-100:\n    healthz: {}\n",
         "unknown-field", 3, 5, "unknown field 'healthz'"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_mistake_is_one_located_error(case: Case) -> None:
    result = validate_repo_config(case.text, "reconciler.yaml")
    errors = [(f.rule, f.line, f.column) for f in result.errors]
    assert errors == [(case.rule, case.line, case.column)], result.errors
    assert case.message in result.errors[0].message, result.errors[0].message


def test_url_with_credentials_is_refused_without_echoing_them() -> None:
    result = validate_repo_config(
        "health:\n  prometheus: {url: 'https://admin:s3cret@p:9090'}\n", "reconciler.yaml")
    [error] = result.errors
    assert (error.rule, error.line, error.column) == ("health-prometheus-url", 2, 21)
    assert "credentials" in error.message and "s3cret" not in error.message


def test_every_mistake_of_a_section_is_reported_not_only_the_first() -> None:
    text = check(NODE, "'min(x{Hostname=\"{{host}}\", a=\"{{nodes}}\"})'", "'= 1'")
    result = validate_repo_config(text, "reconciler.yaml")
    assert sorted((f.rule, f.line) for f in result.errors) == [
        ("health-expect", 6), ("health-placeholder", 5), ("health-placeholder", 5)]


def test_validate_command_reports_health_errors_with_file_line_column(tmp_path: Path) -> None:
    (tmp_path / "reconciler.yaml").write_text(check(NODE, "'min(x{Hostname=\"{{node}}\"}'"))
    result = validate_bounded(tmp_path, "reconciler.yaml")
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(
        "reconciler.yaml:5:14: error: health.nodeChecks[0].query: not valid PromQL"), result.stdout


def test_validate_ends_on_hostile_queries(tmp_path: Path) -> None:
    checks = "".join(
        f"    - {{name: c{i}, query: '{q}', expect: '== 1'}}\n" for i, q in enumerate([
            "(" * 2040 + "1" + ")" * 2040,  # deep nesting at the schema's length limit
            "x" + " + x" * 1000,
            "{{" * 2000,
            "x{a=\"" + "\\\\" * 2000 + "\"}",
        ]))
    big = "y" * 10_000  # over the schema's length: reported there, never parsed
    text = (f"health:\n  prometheus: {{url: 'http://p'}}\n  nodeChecks:\n{checks}"
            f"    - {{name: big, query: '{big}', expect: '== 1'}}\n")
    (tmp_path / "reconciler.yaml").write_text(text)
    result = validate_bounded(tmp_path, "reconciler.yaml", timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("reconciler.yaml:4:25: error: health.nodeChecks[0].query: "
                               "brackets nested more than 64 deep"), lines
    assert any(line.startswith("reconciler.yaml:6:25: error: health.nodeChecks[2].query: "
                               "'{{' without") for line in lines), lines
    assert any(line.startswith("reconciler.yaml:8:")
               and "[schema-max-length]" in line for line in lines), lines
    assert not any(":5:" in line or ":7:" in line for line in lines[:-1]), lines


def test_every_example_of_docs_health_md_is_valid() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "health.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, flags=re.DOTALL)
    assert len(blocks) >= 5
    header = "health:\n  prometheus: {url: 'http://127.0.0.1:9090'}\n"
    for block in blocks:
        if block.startswith("health:"):
            text = block
        elif block.startswith("    - name:"):
            kind = "stepChecks" if "{{nodes}}" in block else "nodeChecks"
            text = f"{header}  {kind}:\n{block}"
        else:
            text = header + block
        result = validate_repo_config(text, "reconciler.yaml")
        assert result.ok and not result.findings, (block, result.findings)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=80),
       st.sampled_from(["nodeChecks", "stepChecks"]))
def test_any_query_text_gives_findings_never_an_exception(query: str, kind: str) -> None:
    text = check(kind, json.dumps(query))  # a JSON string is a YAML double-quoted scalar
    result = validate_repo_config(text, "reconciler.yaml")
    assert all(f.line >= 1 and f.column >= 1 for f in result.findings)
    if result.errors:
        assert result.errors[0].pointer.startswith("/health/"), result.errors
