"""The metrics as Prometheus reads them, checked by Prometheus' own promtool (Debian's
`prometheus` package, installed by scripts/install): the /metrics scrape with every family
populated, the alert rules in deploy/monitoring/ and their unit tests, and the Grafana
dashboard's queries, which may only read metrics the reconciler exports."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from reconciler.ops.health import HealthChecks, OpsServer
from reconciler.ops.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
ALERT_TESTS = MONITORING / "alerts_test.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

# PromQL words that are not metric names (functions are recognised by the "(" after them)
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan"}


def promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, timeout=60,
                          check=False, cwd=ROOT)


def populate(m: Metrics) -> None:
    """Every family with samples, through the calls the daemon makes."""
    m.set_rollout_phase("prod-a", "Progressing")
    m.set_rollout_step("prod-a", 2, "StepUpgrade", steps=3)
    m.set_rollout_conditions("prod-a", {"Progressing", "BatchFailed"})
    m.set_awaiting_person("prod-a", {"fallback": 1_790_000_000.0})
    m.set_nodes("prod-a", {"upgraded": 5, "in_flight": 2, "pending": 13})
    m.observe_merge_to_apply("prod-a", 0.4)
    m.observe_merge_to_apply("prod-a", 700.0)  # past the last bucket: +Inf only
    m.count_node_failure("prod-a", "driver-pod-failed")
    m.count_rollback("prod-a", "FailureThresholdReached")
    m.count_health_check("gpus-available", "pass")
    m.count_health_check("gpus-available", "fail")
    m.set_sync_rejected("prod-a", True)
    m.count_sync_rejection("prod-a", "PolicyRejected")
    m.count_status_commit("status")
    m.count_git_error("push")
    m.count_webhook_request("triggered")
    m.count_commit_verification("trusted")
    m.set_leader("gpu-reconciler/gpu-reconciler", True)
    m.count_forge_status_post("github", "posted")


@pytest.fixture
def ops() -> Iterator[OpsServer]:
    with OpsServer("127.0.0.1", 0, checks=HealthChecks(), metrics=Metrics()) as srv:
        yield srv


def scrape(srv: OpsServer) -> bytes:
    c = http.client.HTTPConnection(*srv.address, timeout=5)
    c.request("GET", "/metrics")
    r = c.getresponse()
    body = r.read()
    c.close()
    assert r.status == 200
    return body


def exported_sample_names() -> set[str]:
    m = Metrics()
    populate(m)
    return {sample.name for family in text_string_to_metric_families(m.exposition().decode())
            for sample in family.samples}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"(?<![\w$.])([a-zA-Z_:][\w:]*)\b(?!\s*\()", text):
        if match.group(1).lower() not in _KEYWORDS:
            names.add(match.group(1))
    return names


def rule_expressions() -> dict[str, str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    found: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            found.extend(target["expr"] for target in panel.get("targets", ()))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            inner = re.fullmatch(r"label_values\((\w+), *\w+\)", query)
            assert inner, f"variable {variable['name']}: {query}"
            found.append(inner.group(1))
    return found


def test_metrics_scrape_with_every_family_populated_passes_promtool_check_metrics(
    ops: OpsServer,
) -> None:
    populate(ops.metrics)
    empty = [family.name for family in ops.metrics.registry.collect() if not family.samples]
    assert empty == [], f"families without samples escape the check: {empty}"
    body = scrape(ops)
    checked = promtool("check", "metrics", stdin=body)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, b"")


def test_promtool_check_metrics_does_find_lint_problems() -> None:
    """The check above can fail: a counter without _total and a metric without help."""
    bad = (b"# HELP gpu_reconciler_things Things.\n# TYPE gpu_reconciler_things counter\n"
           b"gpu_reconciler_things 1\n# TYPE gpu_reconciler_nohelp gauge\n"
           b"gpu_reconciler_nohelp 1\n")
    checked = promtool("check", "metrics", stdin=bad)
    assert checked.returncode != 0
    output = (checked.stdout + checked.stderr).decode()
    assert "counter metrics should have \"_total\" suffix" in output
    assert "no help text" in output


def test_alert_rules_pass_promtool_check_rules() -> None:
    checked = promtool("check", "rules", "--lint=all", "--lint-fatal", str(ALERTS))
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()
    assert b"SUCCESS: 5 rules found" in checked.stdout


def test_each_alert_fires_on_its_case_and_not_on_look_alikes() -> None:
    """promtool test rules: alerts_test.yaml's series per alert (timing, labels, text)."""
    tested = promtool("test", "rules", str(ALERT_TESTS))
    assert tested.returncode == 0, (tested.stdout + tested.stderr).decode()
    cases = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    fired = {case["alertname"] for test in cases for case in test["alert_rule_test"]
             if case["exp_alerts"]}
    assert fired == set(rule_expressions()) == {
        "GpuRolloutStuck", "GpuRolloutFallback", "GpuPolicySyncRejected", "GpuStatusPushFailing",
        "GpuRolloutAwaitingPerson"}


def test_alert_rules_read_only_exported_metrics() -> None:
    exported = exported_sample_names()
    for alert, expr in rule_expressions().items():
        names = metric_names(expr)
        assert names, alert
        assert names <= exported, f"{alert} reads {names - exported}, not exported"


def test_dashboard_queries_read_only_exported_metrics_and_parse(tmp_path: Path) -> None:
    exported = exported_sample_names()
    expressions = dashboard_expressions()
    used: set[str] = set()
    for expr in expressions:
        names = metric_names(expr)
        assert names, expr
        assert names <= exported, f"{expr!r} reads {names - exported}, not exported"
        used |= names
    # every family of the reconciler is on the dashboard
    families = {family.name for family in Metrics().registry.collect()}
    shown = {name for name in used for family in families
             if name == family or name.startswith(family + "_")}
    missing = {f for f in families if not any(n == f or n.startswith(f + "_") for n in shown)}
    assert missing == set()
    # and each query is PromQL Prometheus parses: as recording rules, Grafana's variables set
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query{i}",
         "expr": expr.replace("$__rate_interval", "5m").replace("$cluster", ".*")}
        for i, expr in enumerate(expressions)]}]}
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()


def test_metric_name_extraction_sees_names_not_labels_functions_or_keywords() -> None:
    expr = ('histogram_quantile(0.99, sum by (cluster, le) (rate(a_seconds_bucket{cluster=~"x",'
            'le!="+Inf"}[5m]))) > 0 and on (cluster) max by (cluster) (b_total) or c unless '
            'bool d offset 5m')
    assert metric_names(expr) == {"a_seconds_bucket", "b_total", "c", "d"}
