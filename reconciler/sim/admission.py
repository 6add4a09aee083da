"""The admission webhook in the dev cluster (``reconciler dev-cluster up --admission``): our own
server on a loopback port, a CA and serving certificate for 127.0.0.1 issued in the state
directory, and the ``ValidatingWebhookConfiguration`` pointing the API server at it."""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reconciler.admission.certificates import Issued, issue_ca, issue_serving, write_cert_dir
from reconciler.admission.config import CONFIG_NAME, webhook_configuration
from reconciler.admission.server import AdmissionServer, CertificateSource
from reconciler.data import stored_cluster_operator
from reconciler.kube.api import KubeApi, KubeError, resource_path
from reconciler.names import API_VERSION, PLURAL
from reconciler.sim.operator_install import for_server

CONFIG_PATH = resource_path("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations")
FIELD_MANAGER = "gpu-reconciler-dev-cluster"
#: a marker only the webhook's denial carries: step targets that go back (the CRD's schema and
#: CEL rules cannot say it, so the API server passes such an object on to the webhook)
PROBE_RULE = "[steps-increasing]"


def register(api: KubeApi, url: str, ca_bundle_pem: bytes, *, name: str = CONFIG_NAME,
             timeout: float = 30.0) -> None:
    """Registers the webhook at ``url`` and waits until the API server calls it."""
    config = webhook_configuration(url=url, ca_bundle_pem=ca_bundle_pem, name=name)
    api.apply(f"{CONFIG_PATH}/{name}", config, field_manager=FIELD_MANAGER)
    wait_until_called(api, timeout=timeout)


def unregister(api: KubeApi, *, name: str = CONFIG_NAME) -> None:
    api.delete(f"{CONFIG_PATH}/{name}")


def probe(api: KubeApi) -> str:
    """A server-side dry run of a ClusterOperator only the webhook refuses; the denial's text
    (empty when the API server admitted it, i.e. the webhook is not called yet)."""
    body: dict[str, Any] = for_server(api, stored_cluster_operator())  # whole: the CRD takes it
    body["metadata"] = {"name": "admission-probe"}
    body["spec"]["driver"]["upgradePolicy"] = {
        "enableRollout": True, "upgradeSteps": [
            {"replicas": 2, "pauseDuration": 0}, {"replicas": 1, "pauseDuration": 0},
            {"replicas": "100%", "pauseDuration": 0}]}
    try:
        api.request("POST", resource_path(API_VERSION, PLURAL), body=body,
                    query={"dryRun": "All"})
    except KubeError as exc:
        return exc.message or str(exc)
    return ""


def wait_until_called(api: KubeApi, *, timeout: float = 30.0) -> None:
    """The API server loads webhook configurations asynchronously: wait for our denial."""
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        seen = probe(api)
        if PROBE_RULE in seen:
            return
        time.sleep(0.1)
    raise TimeoutError(f"the API server does not call the admission webhook after {timeout:g} s "
                       f"(last answer to the probe: {seen or 'admitted'})")


class DevAdmission:
    """Our webhook server beside a dev control plane, registered with ``failurePolicy: Fail``."""

    def __init__(self, api: KubeApi, directory: Path, *, host: str = "127.0.0.1",
                 port: int = 0, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.cert_dir = directory / "admission"
        now = datetime.datetime.fromtimestamp(clock(), datetime.UTC)
        self.ca: Issued = issue_ca("gpu-reconciler dev-cluster admission CA", now=now)
        write_cert_dir(self.cert_dir, issue_serving(self.ca, [host], now=now))
        self.server = AdmissionServer(host, port, CertificateSource(self.cert_dir))
        self.registered = False

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> DevAdmission:
        self.server.start()
        register(self.api, self.url, self.ca.cert_pem)
        self.registered = True
        return self

    def stop(self) -> None:
        """Unregisters first: with ``failurePolicy: Fail`` a stopped server refuses every
        change (a finalizer removal too)."""
        if self.registered:
            with contextlib.suppress(KubeError):  # the control plane may be going away too
                unregister(self.api)
            self.registered = False
        self.server.stop()
