"""Certificates and keys for a local control plane, made with the ``openssl`` command.

EC P-256 keys: generating them takes milliseconds, and every Kubernetes component accepts them
(also as the service account token signing key).
"""

from __future__ import annotations

import secrets
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

DAYS = "3650"


class PkiError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class Pki:
    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    service_account_key: Path
    service_account_pub: Path


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _new_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", str(path))
    path.chmod(0o600)


def _signed(directory: Path, ca: KeyPair, name: str, subject: str, extensions: str) -> KeyPair:
    pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
    _new_key(pair.key)
    ext = directory / f"{name}.ext"
    ext.write_text(extensions)
    csr = directory / f"{name}.csr"
    _openssl("req", "-new", "-key", str(pair.key), "-subj", subject, "-out", str(csr))
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-set_serial", str(secrets.randbits(62)), "-days", DAYS,
        "-extfile", str(ext), "-out", str(pair.cert),
    )
    csr.unlink()
    ext.unlink()
    return pair


def client_cert(
    directory: Path, ca: KeyPair, name: str, user: str, groups: tuple[str, ...] = ()
) -> KeyPair:
    """A client certificate: CN is the user name, O the groups (Kubernetes' x509 authenticator)."""
    subject = "".join(f"/O={group}" for group in groups) + f"/CN={user}"
    return _signed(
        directory, ca, name, subject,
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n",
    )


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = KeyPair(directory / "ca.crt", directory / "ca.key")
    _new_key(ca.key)
    _openssl(
        "req", "-x509", "-new", "-key", str(ca.key), "-subj", "/CN=gpu-reconciler-local-ca",
        "-days", DAYS, "-out", str(ca.cert),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )
    sa_key = directory / "service-account.key"
    sa_pub = directory / "service-account.pub"
    server_ext = (
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
    )
    with ThreadPoolExecutor(max_workers=5) as pool:
        apiserver = pool.submit(_signed, directory, ca, "apiserver", "/CN=kube-apiserver",
                                server_ext)
        # The control plane's own components get cluster-admin rights: they are test scaffolding,
        # not the subject; RBAC matters for the identities minted for our own components.
        admin = pool.submit(client_cert, directory, ca, "admin", "admin", ("system:masters",))
        kcm = pool.submit(client_cert, directory, ca, "controller-manager",
                          "system:kube-controller-manager", ("system:masters",))
        scheduler = pool.submit(client_cert, directory, ca, "scheduler", "system:kube-scheduler",
                                ("system:masters",))
        sa = pool.submit(_new_key, sa_key)
        sa.result()
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub))
    return Pki(
        ca=ca,
        apiserver=apiserver.result(),
        admin=admin.result(),
        controller_manager=kcm.result(),
        scheduler=scheduler.result(),
        service_account_key=sa_key,
        service_account_pub=sa_pub,
    )
