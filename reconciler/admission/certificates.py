"""A CA and a serving certificate for the webhook, issued with ``cryptography``.

The API server verifies the webhook against the ``caBundle`` of its configuration and the
serving certificate's subject alternative names (an IP address for ``https://127.0.0.1:PORT``,
DNS names for a Service). EC P-256 keys: milliseconds to generate, accepted by Go's TLS.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: the names ``--admission-cert-dir`` reads (cert-manager's and kubernetes.io/tls Secrets' keys)
CERT_FILE, KEY_FILE = "tls.crt", "tls.key"


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its private key, PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def issue_ca(common_name: str, *, now: datetime.datetime,
             valid: datetime.timedelta = datetime.timedelta(days=3650)) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + valid)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving(ca: Issued, hosts: list[str], *, now: datetime.datetime,
                  valid: datetime.timedelta = datetime.timedelta(days=365)) -> Issued:
    """A server certificate signed by ``ca`` for ``hosts`` (IP addresses or DNS names)."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host")
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key")
    ca_cert = ca.certificate
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + valid)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=False, content_commitment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def write_cert_dir(directory: Path, serving: Issued) -> None:
    """``tls.crt`` and ``tls.key`` in ``directory``, each replaced atomically (a reader that
    picks them up meanwhile sees the old pair or the new one; it checks that they match)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data, mode in ((KEY_FILE, serving.key_pem, 0o600), (CERT_FILE, serving.cert_pem,
                                                                   0o644)):
        staging = directory / f".{name}.new"
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(staging, directory / name)
