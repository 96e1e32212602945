"""Throw-away TLS certificates for tests, made with the ``openssl`` command line.

A CA, a server certificate for 127.0.0.1 (and ``localhost``) and a client certificate, each valid for two
days, with EC P-256 keys written unencrypted in PKCS#8 (what OpenSSL 3 writes, and what Kafka's PEM key
stores read).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Certificates:
    """PEM files of one throw-away CA and the certificates it signed."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certificates(folder: Path, client_name: str) -> Certificates:
    """A CA in ``folder``, a server certificate for 127.0.0.1 and a client certificate for ``client_name``."""
    ca_key, ca = folder / "ca.key", folder / "ca.pem"
    _openssl(
        "req",
        "-x509",
        *_EC_KEY,
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
        "-days",
        "2",
        "-subj",
        "/CN=governor-test-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    made = []
    for name, subject, extensions in (
        ("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
        ("client", f"/CN={client_name}", "extendedKeyUsage=clientAuth\n"),
    ):
        key, csr, cert, ext = (folder / f"{name}.{suffix}" for suffix in ("key", "csr", "pem", "ext"))
        ext.write_text(extensions)
        _openssl("req", "-new", *_EC_KEY, "-keyout", str(key), "-out", str(csr), "-subj", subject)
        _openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(ca),
            "-CAkey",
            str(ca_key),
            "-CAcreateserial",
            "-out",
            str(cert),
            "-days",
            "2",
            "-extfile",
            str(ext),
        )
        made.extend([cert, key])
    return Certificates(ca=ca, server_cert=made[0], server_key=made[1], client_cert=made[2], client_key=made[3])
