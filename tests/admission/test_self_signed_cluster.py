"""--admission-self-signed against the real API server: two replicas with leader election, one
Secret, one certificate served by both, caBundle kept by the leader, and the next leader
reissuing a certificate that no longer names the host."""

from __future__ import annotations

import base64
import contextlib
import datetime
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from reconciler.admission.certificates import issue_ca, issue_serving
from reconciler.admission.config import webhook_configuration
from reconciler.kube.api import Conflict, KubeApi, KubeError, resource_path
from reconciler.sim.admission import CONFIG_PATH, PROBE_RULE, probe
from reconciler.sim.control_plane import ControlPlane, free_ports
from reconciler.sim.operator_install import install_crd
from reconciler.sim.waiting import wait_for
from tests.admission.test_cluster import _limit_memory

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RECONCILER = [sys.executable, "-m", "reconciler.cli.main"]
NAMESPACE = "admission-self-signed"
CONFIG = "gpu-reconciler-admission-self-signed-test"
SECRET = "gpu-reconciler-admission-tls"


@contextlib.contextmanager
def _replica(plane: ControlPlane, port: int, name: str, tmp_path: Path
             ) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log_path = tmp_path / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*RECONCILER, "run", "--role", "controller", "--kubeconfig", str(plane.kubeconfig),
             "--ops-listen", "off", "--cluster-operator", "admission-test-nobody",
             "--state-dir", str(tmp_path / name),
             "--leader-elect", "--leader-elect-namespace", NAMESPACE,
             "--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "1s",
             "--admission-listen", f"127.0.0.1:{port}", "--admission-self-signed",
             "--admission-webhook-config", CONFIG, "--admission-host", "127.0.0.1",
             "--admission-cert-interval", "1s"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**env, "PYTHONUNBUFFERED": "1", "POD_NAME": name}, preexec_fn=_limit_memory)
    try:
        yield process, log_path
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def _secret(kube: KubeApi) -> dict[str, bytes]:
    data = kube.get(resource_path("v1", "secrets", SECRET, namespace=NAMESPACE))["data"]
    return {k: base64.b64decode(v) for k, v in data.items()}


def _served(port: int, ca_pem: bytes) -> int | None:
    """The serial of the certificate served on ``port`` (verified against ``ca_pem``)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock, \
                context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None
    return x509.load_der_x509_certificate(der).serial_number if der else None


def test_two_replicas_serve_the_leaders_certificate_and_the_next_leader_rotates_it(
        control_plane: ControlPlane, kube: KubeApi, tmp_path: Path) -> None:
    install_crd(kube)
    with contextlib.suppress(Conflict):
        kube.create(resource_path("v1", "namespaces"), {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    port_a, port_b = free_ports(2)
    kube.apply(f"{CONFIG_PATH}/{CONFIG}", webhook_configuration(
        url=f"https://127.0.0.1:{port_a}/validate-clusteroperator", name=CONFIG),
        field_manager="test")
    logs: list[Path] = []

    def observe() -> Any:
        return [p.read_text()[-800:] for p in logs]
    try:
        with _replica(control_plane, port_a, "replica-a", tmp_path) as (a, log_a), \
                _replica(control_plane, port_b, "replica-b", tmp_path) as (b, log_b):
            logs.extend([log_a, log_b])
            wait_for(lambda: _secret_or_none(kube), timeout=60,
                     what="the leader's Secret", observe=observe)
            data = _secret(kube)
            serial = x509.load_pem_x509_certificate(data["tls.crt"]).serial_number
            wait_for(lambda: _served(port_a, data["ca.crt"]) == serial
                     and _served(port_b, data["ca.crt"]) == serial, timeout=30,
                     what="both replicas serving the Secret's certificate", observe=observe)
            config = kube.get(f"{CONFIG_PATH}/{CONFIG}")
            wait_for(lambda: base64.b64decode(kube.get(f"{CONFIG_PATH}/{CONFIG}")["webhooks"][0]
                                              ["clientConfig"].get("caBundle") or "")
                     == data["ca.crt"], timeout=30, what="caBundle set by the leader",
                     observe=lambda: config)
            wait_for(lambda: PROBE_RULE in probe(kube), timeout=30,
                     what="the API server calling the webhook", observe=observe)
            # the leader goes away; the other replica takes over and repairs a bad certificate
            leader = a if "became the leader" in log_a.read_text() else b
            survivor_port = port_b if leader is a else port_a
            kube.apply(f"{CONFIG_PATH}/{CONFIG}", webhook_configuration(
                url=f"https://127.0.0.1:{survivor_port}/validate-clusteroperator",
                ca_bundle_pem=data["ca.crt"], name=CONFIG), field_manager="test")
            os.killpg(leader.pid, signal.SIGTERM)
            assert leader.wait(30) == 0
            now = datetime.datetime.now(datetime.UTC)
            stranger = issue_serving(issue_ca("someone else", now=now), ["other.example"],
                                     now=now)
            kube.patch(resource_path("v1", "secrets", SECRET, namespace=NAMESPACE), {"data": {
                "tls.crt": base64.b64encode(stranger.cert_pem).decode(),
                "tls.key": base64.b64encode(stranger.key_pem).decode()}})
            wait_for(lambda: _secret(kube)["tls.crt"] != stranger.cert_pem, timeout=60,
                     what="the new leader reissuing the certificate", observe=observe)
            fresh = _secret(kube)
            assert fresh["ca.crt"] == data["ca.crt"]  # same CA: caBundle stays valid
            fresh_serial = x509.load_pem_x509_certificate(fresh["tls.crt"]).serial_number
            wait_for(lambda: _served(survivor_port, fresh["ca.crt"]) == fresh_serial,
                     timeout=30, what="the survivor serving the reissued certificate",
                     observe=observe)
            wait_for(lambda: PROBE_RULE in probe(kube), timeout=30,
                     what="the API server still calling the webhook", observe=observe)
    finally:
        kube.delete(f"{CONFIG_PATH}/{CONFIG}")
    for path in logs:
        assert "Traceback" not in path.read_text(), path.read_text()[-3000:]


def _secret_or_none(kube: KubeApi) -> bool:
    try:
        return bool(_secret(kube).get("tls.crt"))
    except KubeError:
        return False
