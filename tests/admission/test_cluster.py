"""The webhook with the real API server as its client: ``reconciler run --admission-listen`` in
a child process (under an address-space limit), registered the way the dev cluster registers it
(failurePolicy Fail), and the seed's own ``kubectl patch`` commands run with the kubectl of the
server's release (Debian's for 1.20.2)."""

from __future__ import annotations

import contextlib
import datetime
import http.client
import itertools
import json
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.admission.certificates import Issued, issue_ca, issue_serving, write_cert_dir
from reconciler.admission.config import WEBHOOK_NAME
from reconciler.admission.server import PATH
from reconciler.kube.api import KubeApi, KubeError
from reconciler.kube.objects import cluster_operator_path
from reconciler.sim.admission import PROBE_RULE, probe, register, unregister, wait_until_called
from reconciler.sim.control_plane import ControlPlane, free_ports
from reconciler.sim.crd import CEL_MINOR
from reconciler.sim.operator_install import install_crd, release_minor, server_version
from reconciler.sim.waiting import wait_for
from tests.admission.review_cases import (
    OLD_VERSION,
    REGISTRY,
    admission_review,
    cluster_operator,
    policy,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RECONCILER = [sys.executable, "-m", "reconciler.cli.main"]
ADDRESS_SPACE = 4 * 1024 ** 3
DENIED = f'admission webhook "{WEBHOOK_NAME}" denied the request: '
UNREACHABLE = f'failed calling webhook "{WEBHOOK_NAME}"'
_NAMES = itertools.count(1)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


class Daemon:
    """``reconciler run`` serving only what these tests need: the rollout controller role pointed
    at an object that does not exist (it never acts) and the admission webhook."""

    def __init__(self, plane: ControlPlane, workdir: Path) -> None:
        self.plane = plane
        self.cert_dir = workdir / "certs"
        self.ca = issue_ca("admission test CA", now=_now())
        self.rotate(self.ca)
        self.port = free_ports(1)[0]
        self.log_path = workdir / "daemon.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{PATH}"

    def rotate(self, ca: Issued) -> Issued:
        serving = issue_serving(ca, ["127.0.0.1"], now=_now())
        write_cert_dir(self.cert_dir, serving)
        return serving

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*RECONCILER, "run", "--role", "controller",
                 "--kubeconfig", str(self.plane.kubeconfig), "--ops-listen", "off",
                 "--cluster-operator", "admission-test-nobody",
                 "--admission-listen", f"127.0.0.1:{self.port}",
                 "--admission-cert-dir", str(self.cert_dir)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**env, "PYTHONUNBUFFERED": "1"}, preexec_fn=_limit_memory)
        wait_for(self._listening, timeout=60, what="the admission webhook listening",
                 observe=lambda: self.log_path.read_text()[-2000:])

    def _listening(self) -> bool:
        assert self.process is not None and self.process.poll() is None, (
            self.log_path.read_text()[-3000:])
        with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", self.port), timeout=1):
            return True
        return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        code = self.process.returncode
        self.process = None
        return code


@pytest.fixture(scope="module")
def daemon(control_plane: ControlPlane, kube: KubeApi,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    install_crd(kube)
    served = Daemon(control_plane, tmp_path_factory.mktemp("admission"))
    served.start()
    try:
        register(kube, served.url, served.ca.cert_pem)
        yield served
    finally:
        with contextlib.suppress(KubeError):
            unregister(kube)  # before stopping: failurePolicy Fail would block every change
        code = served.stop()
        text = served.log_path.read_text()
        assert code == 0, text[-3000:]
        assert "Traceback" not in text, text[-3000:]


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    assert plane.binaries.kubectl is not None  # scripts/install installs one
    return subprocess.run([plane.binaries.kubectl, "--kubeconfig", str(plane.kubeconfig), *args],
                          input=stdin, capture_output=True, text=True, timeout=60, check=False)


def _patch(plane: ControlPlane, name: str, ops: list[dict[str, Any]]
           ) -> subprocess.CompletedProcess[str]:
    return kubectl(plane, "patch", f"clusteroperators.gpu.metax-tech.com/{name}", "--type=json",
                   "-p", json.dumps(ops))


def _replace(path: str, value: Any) -> dict[str, Any]:
    return {"op": "replace", "path": path, "value": value}


@pytest.fixture
def co(kube: KubeApi, daemon: Daemon) -> Iterator[str]:
    """A valid ClusterOperator (created through the webhook), deleted afterwards."""
    name = f"adm-{next(_NAMES)}"
    kube.create(cluster_operator_path(), cluster_operator(name, version=OLD_VERSION))
    try:
        yield name
    finally:
        kube.delete(cluster_operator_path(name))


def _spec(kube: KubeApi, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = kube.get(cluster_operator_path(name))["spec"]
    return spec


def _set_phase(kube: KubeApi, name: str, phase: str) -> None:
    """What the rollout controller writes, through the status subresource."""
    kube.patch(cluster_operator_path(name, subresource="status"), {"status": {"upgradeStatus": {
        "phase": phase, "upgrading": phase != "Idling",
        # a string in the vendor's CRD: the driver spec as JSON
        "lastCoDriverSpec": json.dumps({"payload": {
            "name": "driver-image", "registry": REGISTRY, "version": OLD_VERSION,
            "pullPolicy": "IfNotPresent"}})}}})


@pytest.mark.compat
def test_enable_rollout_given_the_string_false_is_refused_by_the_crds_schema(
        control_plane: ControlPlane, co: str, kube: KubeApi) -> None:
    # the seed's command with /spec added: the CRD types the field, so the API server's schema
    # validation answers before any webhook is called
    result = _patch(control_plane, co, [_replace("/spec/driver/upgradePolicy/enableRollout",
                                                 "false")])
    assert result.returncode != 0
    assert "spec.driver.upgradePolicy.enableRollout" in result.stderr
    assert 'Invalid value: "string"' in result.stderr and "boolean" in result.stderr
    assert DENIED not in result.stderr
    assert _spec(kube, co)["driver"]["upgradePolicy"]["enableRollout"] is True


@pytest.mark.compat
def test_steps_no_crd_schema_can_check_are_refused_with_our_message(
        control_plane: ControlPlane, co: str, kube: KubeApi) -> None:
    # Strictly increasing targets compare one step with the one before: no CEL rule of the CRD
    # says that within its cost budget, so the webhook answers on every release.
    before = _spec(kube, co)
    result = _patch(control_plane, co, [_replace("/spec/driver/upgradePolicy/upgradeSteps", [
        {"replicas": 3, "pauseDuration": 0}, {"replicas": 2, "pauseDuration": 0},
        {"replicas": "100%", "pauseDuration": 0}])])
    assert result.returncode != 0
    assert DENIED + "/spec/driver/upgradePolicy/upgradeSteps/" in result.stderr
    assert "/spec/driver/upgradePolicy/upgradeSteps/1/replicas" in result.stderr
    assert "step targets must strictly increase" in result.stderr
    assert "[steps-increasing]" in result.stderr
    assert _spec(kube, co) == before


@pytest.mark.compat
def test_a_last_step_short_of_100_percent_is_refused_by_the_crd_or_else_by_our_webhook(
        control_plane: ControlPlane, co: str, kube: KubeApi) -> None:
    # From 1.25 on the CRD's CEL rule answers before any webhook is called; 1.20's CRD has no
    # such rule and the webhook gives the same finding.
    before = _spec(kube, co)
    result = _patch(control_plane, co, [_replace("/spec/driver/upgradePolicy/upgradeSteps", [
        {"replicas": 1, "pauseDuration": 0}, {"replicas": "50%", "pauseDuration": 0}])])
    assert result.returncode != 0
    assert "the last step must be '100%'" in result.stderr
    if release_minor(server_version(kube)) >= CEL_MINOR:
        assert "spec.driver.upgradePolicy.upgradeSteps: Invalid value" in result.stderr
        assert DENIED not in result.stderr
    else:
        assert DENIED + "/spec/driver/upgradePolicy/upgradeSteps/" in result.stderr
        assert "[last-step-100]" in result.stderr
    assert _spec(kube, co) == before


@pytest.mark.compat
def test_max_parallel_changed_while_progressing_is_refused_naming_spec_4_2s_reason(
        control_plane: ControlPlane, co: str, kube: KubeApi) -> None:
    _set_phase(kube, co, "Progressing")
    result = _patch(control_plane, co, [_replace("/spec/driver/upgradePolicy/maxParallel", 2)])
    assert result.returncode != 0
    assert DENIED + "/spec/driver/upgradePolicy/maxParallel: " in result.stderr
    assert "cannot change while the rollout is Progressing" in result.stderr
    assert "Only upgradePolicy.enableRollout and upgradePolicy.pause may change" in result.stderr
    assert "[transition-locked-field]" in result.stderr
    assert _spec(kube, co)["driver"]["upgradePolicy"]["maxParallel"] == "100%"


@pytest.mark.compat
def test_pause_true_during_a_rollout_is_allowed(
        control_plane: ControlPlane, co: str, kube: KubeApi) -> None:
    _set_phase(kube, co, "Progressing")
    result = _patch(control_plane, co, [_replace("/spec/driver/upgradePolicy/pause", True)])
    assert result.returncode == 0, result.stderr
    assert _spec(kube, co)["driver"]["upgradePolicy"]["pause"] is True


def test_the_rollbacks_payload_write_is_allowed_mid_rollout(
        control_plane: ControlPlane, kube: KubeApi, daemon: Daemon) -> None:
    name = "adm-rollback-payload"
    kube.create(cluster_operator_path(), cluster_operator(name))  # on the new version
    try:
        _set_phase(kube, name, "Disabling")
        result = _patch(control_plane, name, [_replace("/spec/driver/payload/version",
                                                       "2.34.0.1")])
        assert result.returncode != 0 and "[transition-locked-field]" in result.stderr
        body = {"apiVersion": "gpu.metax-tech.com/v1alpha1", "kind": "ClusterOperator",
                "metadata": {"name": name}, "spec": {"driver": {"payload": {
                    "name": "driver-image", "registry": REGISTRY, "version": OLD_VERSION,
                    "pullPolicy": "IfNotPresent"}}}}
        kube.apply(cluster_operator_path(name), body, field_manager="gpu-rollout-controller")
        assert _spec(kube, name)["driver"]["payload"]["version"] == OLD_VERSION
    finally:
        kube.delete(cluster_operator_path(name))


def test_a_new_valid_spec_while_idle_is_allowed(
        control_plane: ControlPlane, co: str, kube: KubeApi) -> None:
    _set_phase(kube, co, "Idling")
    result = _patch(control_plane, co, [
        _replace("/spec/driver/payload/version", "2.33.0.9-amd64"),
        _replace("/spec/driver/upgradePolicy/maxParallel", 2),
        _replace("/spec/driver/upgradePolicy/upgradeSteps",
                 [{"replicas": 2}, {"replicas": "100%", "pauseDuration": 0}])])
    assert result.returncode == 0, result.stderr
    assert _spec(kube, co)["driver"]["payload"]["version"] == "2.33.0.9-amd64"


@pytest.mark.compat
def test_a_create_with_a_bad_step_list_is_refused(
        control_plane: ControlPlane, kube: KubeApi, daemon: Daemon) -> None:
    # Each step goes back (no CRD rule can say so); the last one is 100%, so the CRD's own CEL
    # rule passes it on to the webhook on every release.
    obj = cluster_operator("adm-bad-create", upgrade_policy=policy(upgradeSteps=[
        {"replicas": "50%", "pauseDuration": 0}, {"replicas": "20%", "pauseDuration": 0},
        {"replicas": 3, "pauseDuration": 0}, {"replicas": 2, "pauseDuration": 0},
        {"replicas": "100%", "pauseDuration": 0}]))
    result = kubectl(control_plane, "create", "-f", "-", stdin=json.dumps(obj))
    assert result.returncode != 0
    assert DENIED in result.stderr
    for index in (1, 3):
        assert f"/spec/driver/upgradePolicy/upgradeSteps/{index}/replicas" in result.stderr
    with pytest.raises(KubeError) as missing:
        kube.get(cluster_operator_path("adm-bad-create"))
    assert missing.value.status == 404


def test_fail_closed_when_the_daemon_is_stopped_but_status_writes_work(
        control_plane: ControlPlane, co: str, kube: KubeApi, daemon: Daemon) -> None:
    assert daemon.stop() == 0
    try:
        result = _patch(control_plane, co, [_replace("/spec/driver/upgradePolicy/pause", True)])
        assert result.returncode != 0
        assert UNREACHABLE in result.stderr, result.stderr
        assert _spec(kube, co)["driver"]["upgradePolicy"]["pause"] is False
        _set_phase(kube, co, "Progressing")  # the status subresource is not intercepted
        status = kube.get(cluster_operator_path(co))["status"]["upgradeStatus"]
        assert status["phase"] == "Progressing"
    finally:
        daemon.start()
    wait_until_called(kube)
    result = _patch(control_plane, co, [_replace("/spec/driver/upgradePolicy/pause", True)])
    assert result.returncode == 0, result.stderr


def _served_serial(daemon: Daemon, ca: Issued) -> int:
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=5) as sock, \
            context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    from cryptography import x509

    return x509.load_der_x509_certificate(der).serial_number


def test_a_rotated_certificate_is_served_without_a_restart(
        kube: KubeApi, daemon: Daemon) -> None:
    assert daemon.process is not None
    pid = daemon.process.pid
    before = _served_serial(daemon, daemon.ca)
    leaf = daemon.rotate(daemon.ca)  # cert-manager renews the leaf, the CA stays
    assert _served_serial(daemon, daemon.ca) == leaf.certificate.serial_number != before
    assert PROBE_RULE in probe(kube)
    # a new CA: the bundle carries both while the leaf moves over (the CA injector's way)
    new_ca = issue_ca("admission test CA 2", now=_now())
    register(kube, daemon.url, daemon.ca.cert_pem + new_ca.cert_pem)
    leaf = daemon.rotate(new_ca)
    assert _served_serial(daemon, new_ca) == leaf.certificate.serial_number
    for _ in range(3):
        assert PROBE_RULE in probe(kube)
    register(kube, daemon.url, new_ca.cert_pem)  # the old CA leaves the bundle
    daemon.ca = new_ca
    assert PROBE_RULE in probe(kube)
    assert daemon.process is not None and daemon.process.pid == pid  # never restarted


def _post(daemon: Daemon, body: bytes, content_type: str = "application/json"
          ) -> tuple[int, bytes]:
    context = ssl.create_default_context(cadata=daemon.ca.cert_pem.decode())
    conn = http.client.HTTPSConnection("127.0.0.1", daemon.port, context=context, timeout=30)
    try:
        conn.request("POST", PATH, body=body, headers={"Content-Type": content_type})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _huge(daemon: Daemon) -> tuple[int, bytes]:
    context = ssl.create_default_context(cadata=daemon.ca.cert_pem.decode())
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=30) as sock, \
            context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        tls.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {1 << 40}\r\n\r\n".encode())
        reply = b""
        while chunk := tls.recv(4096):
            reply += chunk
    return int(reply.split(b" ", 2)[1]), reply


def test_bad_input_to_the_endpoint_gets_a_clear_4xx_or_a_denial_never_a_crash(
        kube: KubeApi, daemon: Daemon) -> None:
    review = json.dumps(admission_review("CREATE", cluster_operator())).encode()
    update = json.dumps(admission_review("UPDATE", cluster_operator(), uid="no-old")).encode()
    pod = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}).encode()
    cases = [
        (lambda: _post(daemon, review, "application/x-www-form-urlencoded"), 400,
         "expected Content-Type application/json"),
        (lambda: _post(daemon, review[: len(review) // 2]), 400, "not JSON (truncated?)"),
        (lambda: _huge(daemon), 413, "exceeds the limit of 8388608 bytes"),
        (lambda: _post(daemon, pod), 400, "not an AdmissionReview: expected kind"),
        (lambda: _post(daemon, b"[" * 200_000), 400, "nested too deeply"),
        (lambda: _post(daemon, update), 200, "request.oldObject is missing on UPDATE"),
    ]
    for send, code, words in cases:
        status, text = send()
        assert (status, words in text.decode("utf-8", "replace")) == (code, True), text[:300]
        assert daemon.alive()
    answer = json.loads(_post(daemon, update)[1])["response"]
    assert answer["uid"] == "no-old" and answer["allowed"] is False
    assert PROBE_RULE in probe(kube)  # the API server is still answered


def test_the_dev_cluster_registration_is_fail_closed_and_matches_only_the_resource(
        kube: KubeApi, daemon: Daemon) -> None:
    config = kube.get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                      "gpu-reconciler-admission")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["timeoutSeconds"] == 5
    assert hook["clientConfig"]["url"] == daemon.url
    assert hook["rules"] == [{"apiGroups": ["gpu.metax-tech.com"], "apiVersions": ["*"],
                              "operations": ["CREATE", "UPDATE"],
                              "resources": ["clusteroperators"], "scope": "Cluster"}]



@contextlib.contextmanager
def _controller(plane: ControlPlane, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The rollout controller of ``cluster-operator`` (no webhook of its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*RECONCILER, "run", "--role", "controller", "--kubeconfig", str(plane.kubeconfig),
             "--ops-listen", "off", "--ready-timeout", "60s"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**env, "PYTHONUNBUFFERED": "1"}, preexec_fn=_limit_memory)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def test_enable_rollout_false_mid_rollout_is_allowed_and_the_rollback_runs_to_its_end(
        control_plane: ControlPlane, kube: KubeApi, daemon: Daemon, fleet: Any,
        tmp_path: Path) -> None:
    """Every spec write of the controller (pause: true at the gate, the payload set back while
    the stored phase still says Progressing) passes the webhook, and so does the person's
    enableRollout: false."""
    from reconciler.kube.objects import CLUSTER_OPERATOR_NAME
    from reconciler.sim.operator_install import DEFAULT_PAYLOAD

    path = cluster_operator_path(CLUSTER_OPERATOR_NAME)
    old_version, new_version = DEFAULT_PAYLOAD.version, "2.33.0.9"
    log_path = tmp_path / "controller.log"

    def inner() -> dict[str, Any]:
        upgrade = (kube.get(path).get("status") or {}).get("upgradeStatus") or {}
        return {"phase": upgrade.get("phase"), **(upgrade.get("status") or {})}

    with _controller(control_plane, log_path) as process:
        wait_for(lambda: inner()["phase"], timeout=60, what="the controller's first status",
                 observe=lambda: log_path.read_text()[-2000:])
        gated = policy(enableRollout=True, maxParallel=2,
                       upgradeSteps=[{"replicas": 2},  # no pauseDuration: a manual gate
                                     {"replicas": "100%", "pauseDuration": 0}])
        kube.patch(path, {"spec": {"driver": {"payload": {"version": new_version},
                                              "upgradePolicy": gated}}})
        wait_for(lambda: kube.get(path)["spec"]["driver"]["upgradePolicy"]["pause"] is True,
                 timeout=90, what="the controller's pause: true at the gate",
                 observe=lambda: (inner(), log_path.read_text()[-2000:]))
        assert inner()["phase"] == "Progressing"
        assert len(fleet.ready_driver_nodes(new_version)) == 2
        result = _patch(control_plane, CLUSTER_OPERATOR_NAME,
                        [_replace("/spec/driver/upgradePolicy/enableRollout", False)])
        assert result.returncode == 0, result.stderr
        wait_for(lambda: inner()["phase"] == "Disabled"
                 and inner().get("currentStepState") == "Completed",
                 timeout=120, what="the forced rollback finished",
                 observe=lambda: (inner(), log_path.read_text()[-2000:]))
        spec = kube.get(path)["spec"]["driver"]
        assert spec["payload"]["version"] == old_version  # the controller's own write passed
        assert sorted(fleet.ready_driver_nodes(old_version)) == fleet.node_names
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(30) == 0
    text = log_path.read_text()
    assert "denied the request" not in text and "failed calling webhook" not in text, text[-3000:]
