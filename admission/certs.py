"""The webhook's own TLS: a CA and a serving certificate, made and judged here (no I/O).

The kube-apiserver trusts the webhook through the `caBundle` of its MutatingWebhookConfiguration, so the
webhook needs no public CA and no cert-manager: it makes a CA (10 years) and a serving certificate for its
Service's DNS names (1 year), and renews the serving certificate once two thirds of its life have passed,
the CA the same way. The bundle carries the old CA beside a new one until every serving certificate the
old one signed has been replaced.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dra_driver.vocabulary.errors import ConfigError

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_AT = 2 / 3  # of a certificate's life


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, PEM-encoded, as a kubernetes.io/tls Secret holds them."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True, slots=True)
class Bundle:
    """What the webhook's Secret holds: the CA (with the previous CA while one is retiring) and the
    serving certificate."""

    ca: KeyPair
    serving: KeyPair
    previous_ca_pem: bytes = b""

    @property
    def ca_bundle(self) -> bytes:
        """The MutatingWebhookConfiguration's caBundle: the CA, and the retiring one."""
        return self.ca.cert_pem + self.previous_ca_pem


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(now: dt.datetime, *, name: str = "tessera-admission-ca", days: int = CA_DAYS) -> KeyPair:
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem(key))


def make_serving(ca: KeyPair, dns_names: list[str], now: dt.datetime, *, days: int = SERVING_DAYS) -> KeyPair:
    """A serving certificate for the Service's names (`svc`, `svc.ns`, `svc.ns.svc`, …) signed by `ca`;
    a name that is an IP address goes in as one."""
    if not dns_names:
        raise ConfigError("a serving certificate needs at least one DNS name (the webhook Service's)")
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ConfigError("the webhook's CA key is not an EC key; delete the Secret to make a new CA")
    key = _key()
    alt: list[x509.GeneralName] = []
    for n in dns_names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem(key))


def due(cert: x509.Certificate, now: dt.datetime) -> bool:
    """Whether `cert` has lived two thirds of its life (or is not valid yet, or expired)."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now < start or now >= start + (end - start) * RENEW_AT


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [
        *san.get_values_for_type(x509.DNSName),
        *(str(i) for i in san.get_values_for_type(x509.IPAddress)),
    ]


def renew(current: Bundle | None, dns_names: list[str], now: dt.datetime) -> Bundle | None:
    """The bundle to store instead of `current`, or None when `current` is good: a missing or due CA is
    replaced (the old one stays in the bundle until it expires), a serving certificate that is due, for
    other names or not signed by the CA is remade."""
    if current is None:
        ca = make_ca(now)
        return Bundle(ca, make_serving(ca, dns_names, now))
    ca, previous = current.ca, current.previous_ca_pem
    if due(ca.cert, now):
        previous, ca = ca.cert_pem, make_ca(now)
    serving = current.serving
    if (
        ca is not current.ca
        or due(serving.cert, now)
        or sorted(_names(serving.cert)) != sorted(dns_names)
        or not _signed_by(serving.cert, ca.cert)
    ):
        serving = make_serving(ca, dns_names, now)
    if previous and x509.load_pem_x509_certificate(previous).not_valid_after_utc <= now:
        previous = b""  # nothing it signed can still be valid
    if ca is current.ca and serving is current.serving and previous == current.previous_ca_pem:
        return None
    return Bundle(ca, serving, previous)
