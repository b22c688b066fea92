"""A self-signed TLS certificate for local clusters (`zonegate dev --tls`).

HTTPS matters even on localhost: it is where boto3 switches to aws-chunked uploads with
trailing checksums, so the dev cluster must be able to serve it with one flag. The certificate
is made once under the data directory and reused, so clients can trust it by path
(`--ca-bundle`, `verify=`). It names localhost, 127.0.0.1 and ::1, and is its own CA, which is
what strict X.509 verification (Python 3.13's default) wants from a trust anchor.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
VALID_DAYS = 3650


def ensure_self_signed(directory: str | Path, hostnames: tuple[str, ...] = ("localhost",),
                       ) -> tuple[Path, Path]:
    """Return (cert path, key path) under `directory`, creating them on first use."""
    d = Path(directory)
    cert_path, key_path = d / CERT_FILE, d / KEY_FILE
    if cert_path.is_file() and key_path.is_file():
        return cert_path, key_path
    d.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ZoneGate dev cluster"),
        x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0]),
    ])
    sans: list[x509.GeneralName] = [x509.DNSName(h) for h in hostnames]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    now = dt.datetime.now(dt.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True,
            content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    # Key first, private from birth; then the certificate, whose presence marks completion.
    tmp_key = key_path.with_suffix(".tmp")
    fd = os.open(tmp_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    os.replace(tmp_key, key_path)
    tmp_cert = cert_path.with_suffix(".tmp")
    tmp_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    os.replace(tmp_cert, cert_path)
    return cert_path, key_path
