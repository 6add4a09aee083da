"""The health gates' Prometheus adapter: answers of ``/api/v1/query`` mapped once into readings
(canned JSON), one request per call and bounded in time (loopback servers), and the real
Prometheus scraping a real fleet."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from reconciler.health.checks import ManySamples, NoSample, QueryError, Reading
from reconciler.health.prometheus import MAX_ANSWER, PrometheusClient, map_answer
from reconciler.sim.waiting import wait_for
from tests.conftest import FleetFactory
from tests.health.conftest import PrometheusFactory


def vector(*values: str) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"Hostname": f"node-{i}"}, "value": [1767225600.5, v]}
        for i, v in enumerate(values)]}}).encode()


@pytest.mark.parametrize(("status", "body", "reading"), [
    (200, vector("1"), 1.0),
    (200, vector("0.25"), 0.25),
    (200, vector("+Inf"), math.inf),
    (200, vector("-Inf"), -math.inf),
    (200, vector(), NoSample()),
    (200, vector("1", "0"), ManySamples(2)),
    (200, b'{"status":"success","data":{"resultType":"scalar","result":[1767225600,"0"]}}',
     0.0),
    (400, b'{"status":"error","errorType":"bad_data","error":"invalid parameter \\"query\\": '
          b'1:5: parse error: unclosed left parenthesis"}',
     QueryError(400, 'bad_data: invalid parameter "query": 1:5: parse error: unclosed left '
                     'parenthesis')),
    (422, b'{"status":"error","errorType":"execution","error":"query processing would load '
          b'too many samples"}',
     QueryError(422, "execution: query processing would load too many samples")),
    (503, b'{"status":"error","errorType":"timeout","error":"query timed out"}',
     QueryError(503, "timeout: query timed out")),
    (502, b"<html>Bad Gateway</html>",
     QueryError(502, "not a Prometheus API answer: '<html>Bad Gateway</html>'")),
    (200, b"", QueryError(200, "not a Prometheus API answer: ''")),
    (200, b"[1]", QueryError(200, "not a Prometheus API answer: '[1]'")),
    (200, b'{"status":"error"}', QueryError(200, "query failed: '{\"status\":\"error\"}'")),
    (200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
     QueryError(200, "the query returned a matrix, not one sample")),
    (200, b'{"status":"success","data":{"resultType":"string","result":[1,"x"]}}',
     QueryError(200, "the query returned a string, not one sample")),
    (200, b'{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"one"]}]}}',
     QueryError(200, "unreadable sample value: '[1, \"one\"]'")),
    (200, b'{"status":"success","data":{"resultType":"vector","result":[{"value":[1,2]}]}}',
     QueryError(200, "unreadable sample value: '[1, 2]'")),
    (200, b'{"status":"success","data":{"resultType":"vector","result":["x"]}}',
     QueryError(200, "unreadable sample value: 'null'")),
    (200, b'{"status":"success","data":{"resultType":"vector"}}',
     QueryError(200, "unexpected result: '{\"status\":\"success\",\"data\":"
                     "{\"resultType\":\"vector\"}}'")),
], ids=lambda v: v if isinstance(v, int) else None)
def test_answers_map_to_readings(status: int, body: bytes, reading: Reading) -> None:
    assert map_answer(status, body) == reading


@pytest.mark.parametrize("body", [b"[" * 200_000, b'{"a":' * 200_000, b"\xff\xfe", b"\x00" * 10])
def test_hostile_answers_are_query_errors_not_exceptions(body: bytes) -> None:
    reading = map_answer(200, body)
    assert isinstance(reading, QueryError) and reading.status == 200
    assert reading.message.startswith("not a Prometheus API answer: ")
    assert len(reading.message) < 300


def test_nan_sample_is_a_value_that_the_verdict_treats_as_no_answer() -> None:
    reading = map_answer(200, vector("NaN"))
    assert isinstance(reading, float) and math.isnan(reading)


class _Server:
    """A loopback HTTP server whose handler is ``behaviour(handler)``; counts requests."""

    def __init__(self, behaviour: object) -> None:
        outer = self
        self.requests: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                behaviour(self)  # type: ignore[operator]

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[object]:
    servers: list[_Server] = []

    def make(behaviour: object) -> _Server:
        servers.append(_Server(behaviour))
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


def _reply(status: int, body: bytes, headers: dict[str, str] | None = None) -> object:
    def behaviour(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return behaviour


def test_one_request_sends_the_query_and_its_timeout(serve: object) -> None:
    server = serve(_reply(200, vector("1")))  # type: ignore[operator]
    reading = PrometheusClient(server.url + "/", timeout=2.5).query('min(x{a="b"})')
    assert reading == 1.0
    assert server.requests == ["/api/v1/query?query=min%28x%7Ba%3D%22b%22%7D%29&timeout=2.5s"]


def test_an_error_answer_is_one_request_without_retries(serve: object) -> None:
    server = serve(_reply(503, b'{"status":"error","errorType":"unavailable",'  # type: ignore[operator]
                               b'"error":"starting"}'))
    assert PrometheusClient(server.url).query("up") == QueryError(503, "unavailable: starting")
    assert len(server.requests) == 1


def test_a_redirect_is_not_followed(serve: object) -> None:
    server = serve(_reply(302, b"", {"Location": "/elsewhere"}))  # type: ignore[operator]
    reading = PrometheusClient(server.url).query("up")
    assert isinstance(reading, QueryError) and reading.status == 302
    assert len(server.requests) == 1


def test_an_answer_over_the_size_limit_is_refused(serve: object) -> None:
    server = serve(_reply(200, b" " * (MAX_ANSWER + 1)))  # type: ignore[operator]
    assert PrometheusClient(server.url).query("up") == QueryError(
        None, f"answer larger than {MAX_ANSWER} bytes")


def test_a_server_that_never_answers_is_a_query_error_within_the_timeout() -> None:
    with socket.socket() as listener:  # accepts connections (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        reading = PrometheusClient(url, timeout=0.5).query("up")
        elapsed = time.monotonic() - started
    assert reading == QueryError(None, "no answer within 0.5s")
    assert elapsed < 5, elapsed


def test_a_slow_drip_answer_is_cut_at_the_deadline(serve: object) -> None:
    def drip(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "1000000")
        handler.end_headers()
        for _ in range(200):
            handler.wfile.write(b" " * 70_000)
            handler.wfile.flush()
            time.sleep(0.05)

    server = serve(drip)  # type: ignore[operator]
    clock = iter(range(100)).__next__  # a virtual clock: one second per read
    reading = PrometheusClient(server.url, timeout=3, clock=lambda: float(clock())).query("up")
    assert reading == QueryError(None, "no complete answer within 3s")


@pytest.mark.parametrize(("answer", "status", "message"), [
    (b"HELLO\r\n\r\n", None, "no usable answer from "),  # not HTTP
    (b"", None, "no usable answer from "),  # closed without a word
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{\"status\"", 200,
     "not a Prometheus API answer: "),  # cut short
])
def test_a_broken_http_answer_is_a_query_error(answer: bytes, status: int | None,
                                               message: str) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"

        def answer_once() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(answer)

        thread = threading.Thread(target=answer_once, daemon=True)
        thread.start()
        reading = PrometheusClient(url, timeout=5).query("up")
        thread.join(5)
    assert isinstance(reading, QueryError) and reading.status == status, reading
    assert reading.message.startswith(message), reading


def test_a_closed_port_is_connection_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: refused
        reading = PrometheusClient(f"http://127.0.0.1:{port}", timeout=2).query("up")
    assert reading == QueryError(None, f"cannot reach http://127.0.0.1:{port}: "
                                       "connection refused")


@pytest.mark.cluster
def test_adapter_reads_a_real_prometheus_scraping_a_real_fleet(
    fleet_factory: FleetFactory, prometheus_for: PrometheusFactory
) -> None:
    fleet = fleet_factory(nodes=2)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 2, timeout=60,
             what="2 Ready driver pods", observe=fleet.driver_pods)
    prometheus = prometheus_for(fleet)
    client = PrometheusClient(prometheus.url, timeout=5)
    query = 'min(mx_gpu_state{Hostname="node-0001"})'
    wait_for(lambda: client.query(query) == 1.0, timeout=30, what="node-0001's GPUs scraped",
             observe=lambda: client.query(query))
    assert client.query('mx_gpu_state{Hostname="node-0001"}') == ManySamples(8)
    assert client.query('mx_gpu_state{Hostname="node-9999"}') == NoSample()
    assert client.query("max(mx_clk_thr) or vector(0)") == 0.0

    bad = client.query('min(mx_gpu_state{Hostname="node-0001"}')
    assert isinstance(bad, QueryError) and bad.status == 400
    assert bad.message.startswith("bad_data: invalid parameter \"query\": "), bad.message
    assert "unclosed left parenthesis" in bad.message, bad.message

    prometheus.stop()
    started = time.monotonic()
    down = client.query(query)
    assert down == QueryError(None, f"cannot reach {prometheus.url}: connection refused")
    assert time.monotonic() - started < 5
