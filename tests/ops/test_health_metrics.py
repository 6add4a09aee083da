"""The ops server over real HTTP: probes, readiness gating and the metrics scrape."""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import threading
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.ops.health import HealthChecks, OpsServer
from reconciler.ops.http_server import (
    BackgroundHTTPServer,
    ListenAddressError,
    QuietHandler,
    ServerLimits,
    client_key,
    parse_listen_address,
)
from reconciler.ops.metrics import ROLLOUT_PHASES, STEP_STATES, Metrics
from reconciler.sim.waiting import wait_for


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


# --- the shared HTTP server under abuse (the webhook's own cases: tests/trust) ---------------


def raw(address: tuple[str, int], data: bytes, source: str = "127.0.0.1") -> bytes:
    with socket.socket() as s:
        s.settimeout(10)
        s.bind((source, 0))
        s.connect(address)
        with contextlib.suppress(OSError):  # a refusal may come before all of it is sent
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", b"431"),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"414"),
        (b"POST /metrics HTTP/1.0\r\n\r\n", b"501"),
    ],
    ids=["garbage", "101-headers", "long-line", "post"],
)
def test_ops_server_answers_malformed_requests(ops: OpsServer, data: bytes, status: bytes) -> None:
    assert raw(ops.address, data).startswith(b"HTTP/1.0 " + status + b" ")


def test_ops_server_caps_connections_per_client_but_serves_other_addresses(ops: OpsServer) -> None:
    cap = ServerLimits().max_connections_per_client
    held = [socket.create_connection(ops.address, timeout=10) for _ in range(cap)]
    try:
        wait_for(lambda: ops.active_connections == cap, timeout=10, what="accepted and admitted",
                 observe=lambda: ops.active_connections)
        assert raw(ops.address, b"GET /healthz HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 429 ")
        other = raw(ops.address, b"GET /healthz HTTP/1.0\r\n\r\n", source="127.0.0.2")
        assert other.startswith(b"HTTP/1.0 200 ")
    finally:
        for s in held:
            s.close()


class _Broken(QuietHandler):
    def do_GET(self) -> None:
        raise KeyError("a bug in a handler")


def test_unexpected_handler_error_is_answered_500_not_printed(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with BackgroundHTTPServer("127.0.0.1", 0, _Broken, None) as srv:
        response = raw(srv.address, b"GET / HTTP/1.0\r\n\r\n")
    assert response.startswith(b"HTTP/1.0 500 ")
    assert "Traceback" not in capfd.readouterr().err


def test_slow_client_is_cut_at_the_total_deadline_with_408() -> None:
    limits = ServerLimits(request_deadline=0.5)
    data = b"GET /healthz HTTP/1.0\r\nX-Slow: " + b"z" * 100
    srv = BackgroundHTTPServer("127.0.0.1", 0, _Broken, None, limits=limits)
    with srv, socket.create_connection(srv.address, timeout=10) as s:
        sent = 0
        while sent < len(data):  # a byte per 0.1 s: every read is quick, the request is not
            s.send(data[sent : sent + 1])
            sent += 1
            if select.select([s], [], [], 0.1)[0]:
                break
        response = s.recv(65536)
    assert sent < len(data), "cut by the deadline, not when the client was done"
    assert response.startswith(b"HTTP/1.0 408 ")


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("not-an-address", "not-an-address"),
    ],
)
def test_clients_are_counted_by_address_and_ipv6_by_its_64(host: str, key: str) -> None:
    assert client_key(host) == key
