"""A throwaway PKI for the control plane, made with the openssl CLI: one CA, the apiserver's serving
certificate, client certificates per identity, and the service-account signing key."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import structlog

from e2e.controlplane.errors import ControlPlaneError

log = structlog.get_logger(__name__)

_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
"""

APISERVER_SANS = (
    "IP:127.0.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
    "IP:10.96.0.1",
)


@dataclass(frozen=True, slots=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class Pki:
    directory: Path
    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    service_account_key: Path
    service_account_pub: Path


def _openssl(*args: str, cwd: Path) -> None:
    try:
        subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise ControlPlaneError("openssl not found: install the openssl CLI (apt-get install openssl)") from e
    except subprocess.CalledProcessError as e:
        raise ControlPlaneError(f"openssl {args[0]} failed: {e.stderr.strip()}") from e


def _ec_key(path: Path) -> None:
    _openssl(
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        str(path),
        cwd=path.parent,
    )
    path.chmod(0o600)


def _subject(common_name: str, organizations: tuple[str, ...]) -> str:
    return "".join(f"/O={org}" for org in organizations) + f"/CN={common_name}"


def _make_ca(directory: Path) -> KeyPair:
    pair = KeyPair(cert=directory / "ca.crt", key=directory / "ca.key")
    config = directory / "openssl.cnf"
    config.write_text(_OPENSSL_CONFIG)
    _ec_key(pair.key)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(pair.key),
        "-subj",
        "/CN=tessera-e2e-ca",
        "-days",
        "3650",
        "-config",
        str(config),
        "-extensions",
        "v3_ca",
        "-out",
        str(pair.cert),
        cwd=directory,
    )
    return pair


def issue_certificate(
    *,
    ca: KeyPair,
    name: str,
    common_name: str,
    organizations: tuple[str, ...] = (),
    server_names: tuple[str, ...] = (),
) -> KeyPair:
    """Issues a leaf signed by `ca` into the CA's directory; server certificates when `server_names` is given
    (entries like "IP:127.0.0.1" or "DNS:localhost"), client certificates otherwise."""
    directory = ca.cert.parent
    pair = KeyPair(cert=directory / f"{name}.crt", key=directory / f"{name}.key")
    csr = directory / f"{name}.csr"
    ext = directory / f"{name}.ext"
    usage = "serverAuth" if server_names else "clientAuth"
    lines = [
        "basicConstraints = CA:FALSE",
        "keyUsage = critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage = {usage}",
    ]
    if server_names:
        lines.append("subjectAltName = " + ",".join(server_names))
    ext.write_text("\n".join(lines) + "\n")
    _ec_key(pair.key)
    _openssl(
        "req",
        "-new",
        "-key",
        str(pair.key),
        "-subj",
        _subject(common_name, organizations),
        "-config",
        str(directory / "openssl.cnf"),
        "-out",
        str(csr),
        cwd=directory,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca.cert),
        "-CAkey",
        str(ca.key),
        "-set_serial",
        f"0x{int.from_bytes(os.urandom(16), 'big'):x}",
        "-days",
        "365",
        "-extfile",
        str(ext),
        "-out",
        str(pair.cert),
        cwd=directory,
    )
    csr.unlink()
    ext.unlink()
    return pair


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _make_ca(directory)
    sa_key = directory / "sa.key"
    sa_pub = directory / "sa.pub"
    # RSA: the one service-account key type every component and client library accepts.
    _openssl(
        "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(sa_key), cwd=directory
    )
    sa_key.chmod(0o600)
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub), cwd=directory)
    pki = Pki(
        directory=directory,
        ca=ca,
        apiserver=issue_certificate(
            ca=ca, name="apiserver", common_name="kube-apiserver", server_names=APISERVER_SANS
        ),
        admin=issue_certificate(
            ca=ca, name="admin", common_name="tessera-admin", organizations=("system:masters",)
        ),
        controller_manager=issue_certificate(
            ca=ca, name="controller-manager", common_name="system:kube-controller-manager"
        ),
        scheduler=issue_certificate(ca=ca, name="scheduler", common_name="system:kube-scheduler"),
        service_account_key=sa_key,
        service_account_pub=sa_pub,
    )
    log.debug("pki.created", directory=str(directory))
    return pki
