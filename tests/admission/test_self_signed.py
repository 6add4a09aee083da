"""--admission-self-signed's decision: what the leader writes into the Secret, and when."""

from __future__ import annotations

import datetime

from cryptography import x509

from reconciler.admission.certificates import issue_ca, issue_serving
from reconciler.admission.self_signed import (
    CA_CERT,
    CA_KEY,
    PREVIOUS_CA,
    ca_bundle,
    plan_secret,
)

NOW = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)
HOSTS = ["gpu-reconciler.gpu-reconciler.svc"]


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def _names(pem: bytes) -> list[str]:
    ext = _cert(pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(n.value) for n in ext]


def test_an_empty_secret_gets_a_ca_and_a_serving_certificate_it_signed() -> None:
    data = plan_secret({}, HOSTS, NOW)
    assert data is not None
    assert set(data) == {"tls.crt", "tls.key", CA_CERT, CA_KEY}
    _cert(data["tls.crt"]).verify_directly_issued_by(_cert(data[CA_CERT]))
    assert _names(data["tls.crt"]) == HOSTS
    assert ca_bundle(data) == data[CA_CERT]


def test_a_good_secret_is_left_as_it_is() -> None:
    data = plan_secret({}, HOSTS, NOW)
    assert data is not None
    assert plan_secret(data, HOSTS, NOW + datetime.timedelta(days=59)) is None


def test_the_serving_certificate_is_renewed_a_third_before_it_expires_same_ca() -> None:
    data = plan_secret({}, HOSTS, NOW)
    assert data is not None
    renewed = plan_secret(data, HOSTS, NOW + datetime.timedelta(days=61))
    assert renewed is not None
    assert renewed[CA_CERT] == data[CA_CERT] and renewed[CA_KEY] == data[CA_KEY]
    assert renewed["tls.crt"] != data["tls.crt"]
    _cert(renewed["tls.crt"]).verify_directly_issued_by(_cert(data[CA_CERT]))


def test_new_hosts_a_foreign_or_broken_certificate_get_a_new_one() -> None:
    data = plan_secret({}, HOSTS, NOW)
    assert data is not None
    moved = plan_secret(data, [*HOSTS, "127.0.0.1"], NOW)
    assert moved is not None and sorted(_names(moved["tls.crt"])) == ["127.0.0.1", *HOSTS]
    stranger = issue_serving(issue_ca("other", now=NOW), HOSTS, now=NOW)
    foreign = plan_secret({**data, "tls.crt": stranger.cert_pem, "tls.key": stranger.key_pem},
                          HOSTS, NOW)
    assert foreign is not None
    _cert(foreign["tls.crt"]).verify_directly_issued_by(_cert(data[CA_CERT]))
    broken = plan_secret({**data, "tls.crt": b"garbage"}, HOSTS, NOW)
    assert broken is not None and broken[CA_CERT] == data[CA_CERT]


def test_a_ca_near_its_end_is_replaced_and_the_old_one_stays_in_the_bundle_until_it_expires(
        ) -> None:
    data = plan_secret({}, HOSTS, NOW)
    assert data is not None
    later = NOW + datetime.timedelta(days=3650 - 300)
    rotated = plan_secret(data, HOSTS, later)
    assert rotated is not None
    assert rotated[CA_CERT] != data[CA_CERT] and rotated[PREVIOUS_CA] == data[CA_CERT]
    assert ca_bundle(rotated) == rotated[CA_CERT] + data[CA_CERT]
    _cert(rotated["tls.crt"]).verify_directly_issued_by(_cert(rotated[CA_CERT]))
    gone = plan_secret(rotated, HOSTS, NOW + datetime.timedelta(days=3651))
    assert gone is not None and PREVIOUS_CA not in gone
