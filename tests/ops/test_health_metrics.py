"""The ops server over real HTTP: probes, readiness gating and the metrics scrape."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.ops.health import HealthChecks, OpsServer
from reconciler.ops.http_server import ListenAddressError, parse_listen_address
from reconciler.ops.metrics import ROLLOUT_PHASES, STEP_STATES, Metrics


@pytest.fixture
def ops() -> Iterator[OpsServer]:
    with OpsServer("127.0.0.1", 0, checks=HealthChecks(), metrics=Metrics()) as srv:
        yield srv


def get(srv: OpsServer, path: str) -> tuple[int, str, str]:
    c = http.client.HTTPConnection(*srv.address, timeout=5)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read().decode()
    c.close()
    return r.status, r.getheader("Content-Type") or "", body


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_healthz_is_ok_while_serving(ops: OpsServer) -> None:
    status, _, body = get(ops, "/healthz")
    assert status == 200
    assert body.endswith("ok\n")


def test_liveness_check_failure_fails_healthz(ops: OpsServer) -> None:
    stuck = threading.Event()
    ops.checks.add_liveness("sync-loop", lambda: not stuck.is_set())
    assert get(ops, "/healthz")[0] == 200
    stuck.set()
    status, _, body = get(ops, "/healthz")
    assert status == 503
    assert "[-]sync-loop failed" in body


def test_readyz_is_false_until_caches_are_synced(ops: OpsServer) -> None:
    status, _, body = get(ops, "/readyz")
    assert status == 503
    assert "no readiness check registered" in body
    ops.checks.set_ready("caches", False)
    status, _, body = get(ops, "/readyz")
    assert (status, "[-]caches not ready" in body) == (503, True)
    ops.checks.set_ready("caches", True)
    status, _, body = get(ops, "/readyz")
    assert status == 200
    assert "[+]caches ok" in body


def test_readyz_fails_when_any_check_fails_or_raises(ops: OpsServer) -> None:
    ops.checks.set_ready("caches", True)

    def broken() -> bool:
        raise RuntimeError("informer gone")

    ops.checks.add_readiness("informer", broken)
    status, _, body = get(ops, "/readyz")
    assert status == 503
    assert "[-]informer error: RuntimeError: informer gone" in body
    assert "[+]caches ok" in body


def test_readyz_fails_once_shutdown_begins(ops: OpsServer) -> None:
    ops.checks.set_ready("caches", True)
    assert get(ops, "/readyz")[0] == 200
    ops.checks.shutting_down()
    status, _, body = get(ops, "/readyz")
    assert status == 503
    assert "[-]shutdown shutting down" in body
    assert get(ops, "/healthz")[0] == 200  # still alive: no restart while draining


def test_unknown_path_is_404(ops: OpsServer) -> None:
    assert get(ops, "/nope")[0] == 404


def test_metrics_scrape_shows_rollout_series(ops: OpsServer) -> None:
    m = ops.metrics
    m.set_rollout_phase("prod-a", "Progressing")
    m.set_rollout_step("prod-a", 2, "StepUpgrade", steps=3)
    m.set_nodes("prod-a", {"upgraded": 5, "in_flight": 2, "pending": 13})
    m.observe_merge_to_apply("prod-a", 0.4)
    m.observe_merge_to_apply("prod-a", 3.0)
    m.count_node_failure("prod-a", "ImagePullBackOff")
    m.count_status_commit("status")
    m.count_status_commit("pause")
    m.count_git_error("push")
    m.count_rollback("prod-a", "FailureThresholdReached")
    m.count_commit_verification("unsigned")
    status, content_type, text = get(ops, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=")
    s = samples(text)
    phase = "gpu_reconciler_rollout_phase"
    assert s[(phase, (("cluster", "prod-a"), ("phase", "Progressing")))] == 1
    for other in set(ROLLOUT_PHASES) - {"Progressing"}:
        assert s[(phase, (("cluster", "prod-a"), ("phase", other)))] == 0
    assert s[("gpu_reconciler_rollout_step", (("cluster", "prod-a"),))] == 2
    assert s[("gpu_reconciler_rollout_steps", (("cluster", "prod-a"),))] == 3
    state = "gpu_reconciler_rollout_step_state"
    assert s[(state, (("cluster", "prod-a"), ("state", "StepUpgrade")))] == 1
    assert sum(s[(state, (("cluster", "prod-a"), ("state", v)))] for v in STEP_STATES) == 1
    nodes = "gpu_reconciler_nodes"
    assert s[(nodes, (("cluster", "prod-a"), ("state", "in_flight")))] == 2
    assert s[(nodes, (("cluster", "prod-a"), ("state", "failed")))] == 0
    hist = "gpu_reconciler_merge_to_apply_seconds"
    assert s[(hist + "_count", (("cluster", "prod-a"),))] == 2
    assert s[(hist + "_bucket", (("cluster", "prod-a"), ("le", "1.0")))] == 1
    failures = "gpu_reconciler_node_failures_total"
    assert s[(failures, (("cluster", "prod-a"), ("reason", "ImagePullBackOff")))] == 1
    assert s[("gpu_reconciler_status_commits_total", (("kind", "pause"),))] == 1
    assert s[("gpu_reconciler_git_errors_total", (("operation", "push"),))] == 1
    assert s[("gpu_reconciler_webhook_requests_total", (("outcome", "triggered"),))] == 0
    rollbacks = "gpu_reconciler_rollbacks_total"
    assert s[(rollbacks, (("cluster", "prod-a"), ("reason", "FailureThresholdReached")))] == 1
    verifications = "gpu_reconciler_commit_verifications_total"
    assert s[(verifications, (("verdict", "unsigned"),))] == 1


def test_phase_change_moves_the_one(ops: OpsServer) -> None:
    m = ops.metrics
    m.set_rollout_phase("c", "Progressing")
    m.set_rollout_phase("c", "Terminating")
    s = samples(get(ops, "/metrics")[2])
    assert s[("gpu_reconciler_rollout_phase", (("cluster", "c"), ("phase", "Terminating")))] == 1
    assert s[("gpu_reconciler_rollout_phase", (("cluster", "c"), ("phase", "Progressing")))] == 0


def test_two_metrics_objects_do_not_collide() -> None:
    a, b = Metrics(), Metrics()
    a.count_git_error("fetch")
    assert a.registry.get_sample_value("gpu_reconciler_git_errors_total",
                                       {"operation": "fetch"}) == 1
    assert b.registry.get_sample_value("gpu_reconciler_git_errors_total",
                                       {"operation": "fetch"}) == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        (":9090", ("0.0.0.0", 9090)),
        ("[::1]:8443", ("::1", 8443)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
    ],
)
def test_parse_listen_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["8080", "host:", "host:http", "h:70000"])
def test_parse_listen_address_errors(text: str) -> None:
    with pytest.raises(ListenAddressError, match="listen address"):
        parse_listen_address(text)
