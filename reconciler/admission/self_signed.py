"""``--admission-self-signed``: the daemon issues its own CA and serving certificate
(docs/admission.md).

They live in one Secret (``tls.crt``, ``tls.key``, ``ca.crt``, ``ca.key``), so every replica
serves the same pair and a restart finds it. Only the leader issues and rotates: a missing or
unreadable pair, a certificate that no longer names the hosts or is not signed by the CA, or one
within a third of its validity of expiring gets a new one; a CA within a year of expiring is
replaced, the old one staying in ``ca-previous.crt`` (and in ``caBundle``) until it expires, so
connections verified against either keep working meanwhile. The leader also keeps ``caBundle`` of
the ValidatingWebhookConfiguration current. Every replica copies the Secret's pair into its
certificate directory, which the listener reloads per connection (``CertificateSource``).

:func:`plan_secret` is the decision (Secret data + hosts + now in, new data or None out);
:class:`SelfSignedCertificates` the thin loop around it.
"""

from __future__ import annotations

import base64
import datetime
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from reconciler.admission.certificates import (
    CERT_FILE,
    KEY_FILE,
    Issued,
    issue_ca,
    issue_serving,
    write_cert_dir,
)
from reconciler.clock import wall
from reconciler.kube.api import Conflict, KubeApi, KubeError, NotFound, resource_path

log = logging.getLogger("reconciler.admission")

CA_CERT, CA_KEY, PREVIOUS_CA = "ca.crt", "ca.key", "ca-previous.crt"
CA_VALIDITY = datetime.timedelta(days=3650)
CA_RENEW_BEFORE = datetime.timedelta(days=365)
SERVING_VALIDITY = datetime.timedelta(days=90)
SERVING_RENEW_BEFORE = SERVING_VALIDITY / 3
CONFIG_PATH = resource_path("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations")


def _certificate(pem: bytes | None) -> x509.Certificate | None:
    if not pem:
        return None
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None


def _names(cert: x509.Certificate) -> list[str]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return sorted([str(ip) for ip in names.get_values_for_type(x509.IPAddress)]
                  + names.get_values_for_type(x509.DNSName))


def plan_secret(data: Mapping[str, bytes], hosts: list[str],
                now: datetime.datetime) -> dict[str, bytes] | None:
    """The Secret's new data, or None when what it holds is still good."""
    ca_cert = _certificate(data.get(CA_CERT))
    new = dict(data)
    if (ca_cert is None or not data.get(CA_KEY)
            or ca_cert.not_valid_after_utc - now < CA_RENEW_BEFORE):
        ca = issue_ca("gpu-reconciler admission CA", now=now, valid=CA_VALIDITY)
        if ca_cert is not None and ca_cert.not_valid_after_utc > now:
            new[PREVIOUS_CA] = data[CA_CERT]
        new[CA_CERT], new[CA_KEY] = ca.cert_pem, ca.key_pem
    else:
        ca = Issued(data[CA_CERT], data[CA_KEY])
        previous = _certificate(data.get(PREVIOUS_CA))
        if PREVIOUS_CA in data and (previous is None or previous.not_valid_after_utc <= now):
            del new[PREVIOUS_CA]
    serving = _certificate(data.get(CERT_FILE))
    ca_changed = new[CA_CERT] != data.get(CA_CERT)
    if (serving is None or not data.get(KEY_FILE) or ca_changed
            or _names(serving) != sorted(hosts)
            or serving.not_valid_after_utc - now < SERVING_RENEW_BEFORE
            or not _signed_by(serving, ca)):
        issued = issue_serving(ca, hosts, now=now, valid=SERVING_VALIDITY)
        new[CERT_FILE], new[KEY_FILE] = issued.cert_pem, issued.key_pem
    return new if new != dict(data) else None


def _signed_by(cert: x509.Certificate, ca: Issued) -> bool:
    try:
        cert.verify_directly_issued_by(ca.certificate)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def ca_bundle(data: Mapping[str, bytes]) -> bytes:
    """``caBundle``: the CA, and the previous one while it is still valid."""
    return data.get(CA_CERT, b"") + data.get(PREVIOUS_CA, b"")


class SelfSignedCertificates:
    """The Secret kept current by the leader, copied into ``cert_dir`` by every replica."""

    def __init__(self, api: KubeApi, *, namespace: str, secret: str, webhook_config: str,
                 hosts: list[str], cert_dir: Path, is_leader: Callable[[], bool],
                 on_ready: Callable[[], None], clock: Callable[[], float] = wall,
                 interval: float = 30.0) -> None:
        self.api = api
        self.path = resource_path("v1", "secrets", secret, namespace=namespace)
        self.collection = resource_path("v1", "secrets", namespace=namespace)
        self.namespace, self.secret = namespace, secret
        self.config_path = f"{CONFIG_PATH}/{webhook_config}"
        self.hosts = hosts
        self.cert_dir = cert_dir
        self.is_leader = is_leader
        self.on_ready = on_ready
        self.clock = clock
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._written: tuple[bytes, bytes] | None = None
        self._version = ""
        self._ready = False

    def start(self) -> SelfSignedCertificates:
        self._thread = threading.Thread(target=self._loop, name="admission-certificates",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except KubeError as exc:
                log.warning("admission certificates: %s; retrying in %.0f s", exc,
                            self.interval if self._ready else 2)
            except Exception:
                log.exception("admission certificates: sync failed")
            self._stop.wait(self.interval if self._ready else 2.0)

    def sync_once(self) -> None:
        data = self._read()
        if self.is_leader():
            data = self._issue(data)
            self._keep_ca_bundle(data)
        if data is not None and data.get(CERT_FILE) and data.get(KEY_FILE):
            pair = (data[CERT_FILE], data[KEY_FILE])
            if pair != self._written:
                write_cert_dir(self.cert_dir, Issued(*pair))
                self._written = pair
            if not self._ready:
                self._ready = True
                self.on_ready()

    def _read(self) -> dict[str, bytes] | None:
        try:
            secret = self.api.get(self.path)
        except NotFound:
            return None
        self._version = str((secret.get("metadata") or {}).get("resourceVersion") or "")
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    def _issue(self, data: dict[str, bytes] | None) -> dict[str, bytes] | None:
        now = datetime.datetime.fromtimestamp(self.clock(), datetime.UTC)
        new = plan_secret(data or {}, self.hosts, now)
        if new is None:
            return data
        encoded = {k: base64.b64encode(v).decode("ascii") for k, v in new.items()}
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                                "metadata": {"name": self.secret, "namespace": self.namespace,
                                             "labels": {"app.kubernetes.io/name":
                                                        "gpu-gitops-reconciler"}},
                                "data": encoded}
        try:
            if data is None:
                self.api.create(self.collection, body)
                log.info("admission certificates issued into Secret %s/%s", self.namespace,
                         self.secret)
            else:  # a compare-and-swap: a replica that lost the lease meanwhile loses here
                body["metadata"]["resourceVersion"] = self._version
                self.api.replace(self.path, body)
                log.info("admission certificates rotated in Secret %s/%s", self.namespace,
                         self.secret)
        except Conflict:
            return self._read()  # another leader was quicker: serve theirs
        return new

    def _keep_ca_bundle(self, data: Mapping[str, bytes] | None) -> None:
        if not data or not data.get(CA_CERT):
            return
        bundle = base64.b64encode(ca_bundle(data)).decode("ascii")
        config = self.api.get(self.config_path)
        webhooks = config.get("webhooks") or []
        if all((w.get("clientConfig") or {}).get("caBundle") == bundle for w in webhooks):
            return
        for webhook in webhooks:
            webhook.setdefault("clientConfig", {})["caBundle"] = bundle
        self.api.patch(self.config_path, {"metadata": {
            "resourceVersion": config["metadata"]["resourceVersion"]}, "webhooks": webhooks})
        log.info("caBundle of ValidatingWebhookConfiguration %s updated",
                 config["metadata"]["name"])
