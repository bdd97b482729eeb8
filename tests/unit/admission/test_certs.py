"""The webhook's own CA and serving certificate: made, kept while good, renewed before expiry."""

import datetime as dt

from cryptography import x509

from admission.certs import Bundle, due, make_ca, make_serving, renew

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
NAMES = ["tessera-webhook.tessera-system.svc", "127.0.0.1"]


def sans(bundle: Bundle) -> list[str]:
    ext = bundle.serving.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [
        *ext.get_values_for_type(x509.DNSName),
        *(str(i) for i in ext.get_values_for_type(x509.IPAddress)),
    ]


def test_first_bundle_is_a_ca_and_a_serving_certificate_for_the_names() -> None:
    bundle = renew(None, NAMES, NOW)
    assert bundle is not None
    bundle.serving.cert.verify_directly_issued_by(bundle.ca.cert)
    assert sans(bundle) == NAMES
    assert bundle.ca_bundle == bundle.ca.cert_pem


def test_a_good_bundle_is_kept() -> None:
    bundle = renew(None, NAMES, NOW)
    assert bundle is not None
    assert renew(bundle, NAMES, NOW + dt.timedelta(days=200)) is None


def test_the_serving_certificate_is_renewed_after_two_thirds_of_its_life() -> None:
    bundle = renew(None, NAMES, NOW)
    assert bundle is not None
    later = NOW + dt.timedelta(days=250)
    assert due(bundle.serving.cert, later)
    fresh = renew(bundle, NAMES, later)
    assert fresh is not None and fresh.ca == bundle.ca and fresh.serving != bundle.serving
    assert fresh.serving.cert.not_valid_after_utc > later + dt.timedelta(days=300)


def test_new_names_make_a_new_serving_certificate() -> None:
    bundle = renew(None, NAMES, NOW)
    assert bundle is not None
    fresh = renew(bundle, [*NAMES, "other.svc"], NOW)
    assert fresh is not None and "other.svc" in sans(fresh)


def test_a_due_ca_is_replaced_and_the_old_one_stays_trusted_until_it_expires() -> None:
    old_ca = make_ca(NOW, days=30)
    bundle = Bundle(old_ca, make_serving(old_ca, NAMES, NOW, days=20))
    later = NOW + dt.timedelta(days=25)
    fresh = renew(bundle, NAMES, later)
    assert fresh is not None and fresh.ca != old_ca
    assert fresh.previous_ca_pem == old_ca.cert_pem and fresh.ca_bundle.endswith(old_ca.cert_pem)
    fresh.serving.cert.verify_directly_issued_by(fresh.ca.cert)
    after = renew(fresh, NAMES, NOW + dt.timedelta(days=31))
    assert after is not None and after.previous_ca_pem == b""
