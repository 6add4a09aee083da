"""The HTTPS listener on its own: TLS from a directory (reloaded when it changes), status codes
for bodies that are not reviews, bounds, and that it keeps answering after hostile input."""

from __future__ import annotations

import datetime
import http.client
import json
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reconciler.admission.certificates import (
    CERT_FILE,
    KEY_FILE,
    Issued,
    issue_ca,
    issue_serving,
    write_cert_dir,
)
from reconciler.admission.server import (
    PATH,
    AdmissionServer,
    CertificateError,
    CertificateSource,
    Limits,
)
from reconciler.sim.waiting import wait_for
from tests.admission.review_cases import admission_review, cluster_operator, policy

NOW = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)


@dataclass
class Served:
    server: AdmissionServer
    ca: Issued
    cert_dir: Path

    def client(self, ca: Issued | None = None, timeout: float = 10) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cadata=(ca or self.ca).cert_pem.decode())
        return http.client.HTTPSConnection("127.0.0.1", self.server.port, context=context,
                                           timeout=timeout)

    def post(self, body: bytes, content_type: str = "application/json",
             conn: http.client.HTTPSConnection | None = None) -> tuple[int, bytes]:
        conn = conn or self.client()
        conn.request("POST", PATH, body=body, headers={"Content-Type": content_type})
        response = conn.getresponse()
        return response.status, response.read()


def _issue(cert_dir: Path) -> Issued:
    ca = issue_ca("test admission CA", now=NOW)
    write_cert_dir(cert_dir, issue_serving(ca, ["127.0.0.1"], now=NOW))
    return ca


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    cert_dir = tmp_path / "certs"
    ca = _issue(cert_dir)
    server = AdmissionServer("127.0.0.1", 0, CertificateSource(cert_dir),
                             limits=Limits(max_connections=8, read_timeout=1.0,
                                           idle_timeout=5.0, handshake_timeout=2.0)).start()
    try:
        yield Served(server, ca, cert_dir)
    finally:
        server.stop()


def _review_bytes(**kwargs: Any) -> bytes:
    return json.dumps(admission_review("CREATE", cluster_operator(**kwargs),
                                       uid="uid-1")).encode()


def test_a_review_is_answered_with_its_uid(served: Served) -> None:
    status, body = served.post(_review_bytes())
    assert status == 200
    answer = json.loads(body)
    assert answer["response"] == {"uid": "uid-1", "allowed": True}


def test_a_denial_comes_back_as_200_with_the_findings(served: Served) -> None:
    bad = policy(upgradeSteps=[{"replicas": 1, "pauseDuration": 0}])
    status, body = served.post(_review_bytes(upgrade_policy=bad))
    assert status == 200
    response = json.loads(body)["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].endswith("[last-step-100]")


def test_keep_alive_serves_several_reviews_on_one_connection(served: Served) -> None:
    conn = served.client()
    for _ in range(3):
        assert served.post(_review_bytes(), conn=conn)[0] == 200
    conn.close()


@pytest.mark.parametrize(("content_type", "body", "words"), [
    ("text/plain", None, "expected Content-Type application/json"),
    ("application/json", b'{"apiVersion": "admission.k8s.io/v1", "kind": "Admiss',
     "not JSON (truncated?)"),
    ("application/json", b"\xff\xfe{}", "not UTF-8 JSON"),
    ("application/json", b'{"apiVersion": "v1", "kind": "Pod", "metadata": {}}',
     "got kind 'Pod'"),
    ("application/json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("application/json", b"", "not JSON"),
])
def test_a_body_that_is_not_an_admission_review_gets_400(
        served: Served, content_type: str, body: bytes | None, words: str) -> None:
    status, text = served.post(body if body is not None else _review_bytes(), content_type)
    assert status == 400
    assert words in text.decode()
    assert served.post(_review_bytes())[0] == 200  # still answering


def test_a_missing_old_object_on_update_is_a_denial_that_says_so(served: Served) -> None:
    body = json.dumps(admission_review("UPDATE", cluster_operator(), uid="u2")).encode()
    status, text = served.post(body)
    assert status == 200
    response = json.loads(text)["response"]
    assert response["allowed"] is False
    assert "oldObject is missing on UPDATE" in response["status"]["message"]


def _raw_tls(served: Served) -> ssl.SSLSocket:
    context = ssl.create_default_context(cadata=served.ca.cert_pem.decode())
    sock = socket.create_connection(("127.0.0.1", served.server.port), timeout=10)
    return context.wrap_socket(sock, server_hostname="127.0.0.1")


def _read_all(sock: ssl.SSLSocket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_body_over_8_mib_gets_413_before_it_is_sent(served: Served) -> None:
    sock = _raw_tls(served)
    sock.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {8 * 1024 * 1024 + 1}\r\n\r\n".encode())
    reply = _read_all(sock)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b"exceeds the limit of 8388608 bytes" in reply


def test_a_body_just_under_the_limit_is_read_and_judged(served: Served) -> None:
    obj = cluster_operator()
    envelope = len(json.dumps(admission_review("CREATE", obj, uid="b")))
    obj["metadata"]["annotations"] = {"big": "x" * (8 * 1024 * 1024 - envelope - 4096)}
    status, text = served.post(json.dumps(admission_review("CREATE", obj, uid="b")).encode())
    assert status == 200
    assert json.loads(text)["response"]["allowed"] is True


@pytest.mark.parametrize(("headers", "code"), [
    ("Transfer-Encoding: chunked\r\n", 411),
    ("", 411),
    ("Content-Length: -5\r\n", 400),
    ("Content-Length: 12abc\r\n", 400),
])
def test_a_body_without_a_usable_length_is_refused(
        served: Served, headers: str, code: int) -> None:
    sock = _raw_tls(served)
    sock.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"{headers}\r\n".encode())
    reply = _read_all(sock)
    sock.close()
    assert reply.startswith(f"HTTP/1.1 {code} ".encode()), reply[:200]


def test_a_body_that_trickles_past_the_read_deadline_gets_408(served: Served) -> None:
    sock = _raw_tls(served)
    sock.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Content-Length: 1000\r\n\r\n{".encode())
    started = time.monotonic()
    for _ in range(8):  # a byte every 0.2 s keeps each read alive, not the whole body
        time.sleep(0.2)
        try:
            sock.sendall(b" ")
        except OSError:
            break
    reply = _read_all(sock)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert time.monotonic() - started < 5


def test_headers_that_trickle_past_the_deadline_lose_the_connection(served: Served) -> None:
    sock = _raw_tls(served)
    started = time.monotonic()
    sock.sendall(f"POST {PATH} HTTP/1.1\r\n".encode())
    closed = False
    for index in range(20):  # a header line every 0.1 s: each read is quick, the whole is not
        time.sleep(0.1)
        try:
            sock.sendall(f"X-{index}: y\r\n".encode())
        except OSError:
            closed = True
            break
    reply = b"" if closed else _read_all(sock)
    sock.close()
    assert not reply.startswith(b"HTTP/1.1 200")
    assert time.monotonic() - started < 3.5  # read_timeout 1 s; not cut: 2 s + idle 5 s
    assert served.post(_review_bytes())[0] == 200


def test_an_idle_kept_alive_connection_may_wait_longer_than_the_read_deadline(
        served: Served) -> None:
    conn = served.client()
    assert served.post(_review_bytes(), conn=conn)[0] == 200
    time.sleep(1.5)  # over read_timeout (1 s), under idle_timeout (5 s)
    assert served.post(_review_bytes(), conn=conn)[0] == 200


@pytest.mark.parametrize(("method", "path", "code"), [
    ("GET", PATH, 405), ("PUT", PATH, 405), ("POST", "/validate", 404), ("POST", "/", 404),
])
def test_other_paths_and_methods(served: Served, method: str, path: str, code: int) -> None:
    conn = served.client()
    conn.request(method, path, body=_review_bytes(), headers={"Content-Type": "application/json"})
    assert conn.getresponse().status == code


def test_plain_http_and_broken_handshakes_do_not_stop_the_listener(served: Served) -> None:
    for payload in (b"POST / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x00\x05hello", b""):
        sock = socket.create_connection(("127.0.0.1", served.server.port), timeout=5)
        sock.sendall(payload)
        sock.close()
    assert served.post(_review_bytes())[0] == 200


def test_connections_over_the_limit_are_closed_and_the_rest_served(served: Served) -> None:
    idle = [_raw_tls(served) for _ in range(8)]
    wait_for(lambda: served.server.active_connections == 8, timeout=10,
             what="8 connections holding the slots",
             observe=lambda: served.server.active_connections)
    extra = socket.create_connection(("127.0.0.1", served.server.port), timeout=5)
    assert extra.recv(10) == b""  # closed at once, before any handshake
    extra.close()
    for sock in idle:
        sock.close()
    wait_for(lambda: served.server.active_connections == 0, timeout=10,
             what="the slots given back", observe=lambda: served.server.active_connections)
    assert served.post(_review_bytes())[0] == 200
    assert served.server.rejected_connections >= 1


def _served_cert(served: Served, ca: Issued) -> bytes:
    sock = socket.create_connection(("127.0.0.1", served.server.port), timeout=5)
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_a_new_certificate_in_the_directory_is_served_without_a_restart(
        served: Served) -> None:
    from cryptography.hazmat.primitives.serialization import Encoding

    before = _served_cert(served, served.ca)
    old_connection = served.client()
    assert served.post(_review_bytes(), conn=old_connection)[0] == 200
    new_ca = _issue(served.cert_dir)
    after = _served_cert(served, new_ca)
    assert after != before
    new_cert = (served.cert_dir / CERT_FILE).read_bytes()
    from cryptography import x509

    assert after == x509.load_pem_x509_certificate(new_cert).public_bytes(Encoding.DER)
    with pytest.raises(ssl.SSLCertVerificationError):
        _served_cert(served, served.ca)  # the old CA no longer verifies new connections
    assert served.post(_review_bytes(), conn=old_connection)[0] == 200  # kept connections live
    assert served.post(_review_bytes(), conn=served.client(new_ca))[0] == 200


@pytest.mark.parametrize("damage", ["garbage", "mismatched key", "missing key"])
def test_a_certificate_that_does_not_load_keeps_the_previous_one(
        served: Served, damage: str) -> None:
    if damage == "garbage":
        (served.cert_dir / CERT_FILE).write_bytes(b"-----BEGIN CERTIFICATE-----\nnope\n")
    elif damage == "mismatched key":
        other = issue_serving(issue_ca("other", now=NOW), ["127.0.0.1"], now=NOW)
        (served.cert_dir / KEY_FILE).write_bytes(other.key_pem)
    else:
        (served.cert_dir / KEY_FILE).unlink()
    for _ in range(2):
        assert served.post(_review_bytes())[0] == 200
    _issue(served.cert_dir)  # repaired: the next connection loads it
    loads = served.server.certs.loads
    with pytest.raises(ssl.SSLCertVerificationError):
        _served_cert(served, served.ca)
    assert served.server.certs.loads == loads + 1


def test_a_directory_without_a_certificate_fails_at_start(tmp_path: Path) -> None:
    with pytest.raises(CertificateError, match=r"no tls\.crt and tls\.key"):
        AdmissionServer("127.0.0.1", 0, CertificateSource(tmp_path))
    (tmp_path / CERT_FILE).write_text("not a certificate")
    (tmp_path / KEY_FILE).write_text("not a key")
    with pytest.raises(CertificateError, match="cannot load"):
        AdmissionServer("127.0.0.1", 0, CertificateSource(tmp_path))


def test_the_serving_certificate_names_its_hosts_and_chains_to_the_ca() -> None:
    from cryptography import x509

    ca = issue_ca("ca", now=NOW)
    serving = issue_serving(ca, ["127.0.0.1", "gpu-reconciler.gpu-reconciler.svc"], now=NOW)
    cert = serving.certificate
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["gpu-reconciler.gpu-reconciler.svc"]
    assert cert.issuer == ca.certificate.subject
    cert.verify_directly_issued_by(ca.certificate)
    with pytest.raises(ValueError, match="at least one host"):
        issue_serving(ca, [], now=NOW)
