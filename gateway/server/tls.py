"""TLS for the gateway: a small CA for local clusters (`zonegate dev --tls`), and certificates
reloaded on SIGHUP without dropping the listener (`[gateway] tls_cert / tls_key` in production).

HTTPS matters even on localhost: it is where boto3 switches to aws-chunked uploads with
trailing checksums, so the dev cluster must serve it with one flag. A certificate that is its
own CA is refused by rustls (`CaUsedAsEndEntity`: polars, obstore, every Rust object_store), so
the dev directory holds a CA (`ca.pem`, the file clients trust) and a server certificate signed
by it (`cert.pem`: CA:false, serverAuth, SANs for localhost, 127.0.0.1, ::1 and the listen
host; the file holds the chain, leaf then CA). Both are made once and reused; the server
certificate is reissued by the same CA when a listen host is missing from its SANs, and a
directory from before (a self-signed `cert.pem` and no CA) is replaced.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import signal
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
CA_DAYS = 3650
LEAF_DAYS = 825  # what Apple and browsers accept for a server certificate
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")
log = logging.getLogger("zonegate.tls")


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca,
                         content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, encipher_only=False,
                         decipher_only=False)


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # private from birth
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    os.replace(tmp, path)


def _write_cert(path: Path, *certs: x509.Certificate) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs))
    os.replace(tmp, path)


def _make_ca(d: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ZoneGate dev cluster"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "ZoneGate dev CA")])
    now = dt.datetime.now(dt.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256()))
    _write_private(d / CA_KEY_FILE, key)
    _write_cert(d / CA_FILE, cert)
    return cert, key


def _load_ca(d: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    try:
        cert = x509.load_pem_x509_certificate((d / CA_FILE).read_bytes())
        key = serialization.load_pem_private_key((d / CA_KEY_FILE).read_bytes(), None)
    except (OSError, ValueError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return None
    return cert, key


def _leaf_ok(path: Path, ca: x509.Certificate, hosts: tuple[str, ...]) -> bool:
    """The server certificate exists, was issued by this CA, is no CA itself, is valid a while
    longer and names every host."""
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        if cert.issuer != ca.subject or cert.extensions.get_extension_for_class(
                x509.BasicConstraints).value.ca:
            return False
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return False
    if cert.not_valid_after_utc - dt.datetime.now(dt.UTC) < dt.timedelta(days=30):
        return False
    return all(_general_name(h) in sans for h in hosts)


def _make_leaf(d: Path, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
               hosts: tuple[str, ...]) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ZoneGate dev cluster"),
                      x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = dt.datetime.now(dt.UTC)
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
                ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))
    # Key first; the certificate, whose presence marks completion, last.
    _write_private(d / KEY_FILE, key)
    _write_cert(d / CERT_FILE, cert, ca)  # the full chain, as a server sends it


def ensure_dev_ca(directory: str | Path, hosts: tuple[str, ...] = ()) -> tuple[Path, Path, Path]:
    """(CA file to trust, server certificate, server key) under `directory`, made on first use;
    the server certificate names `hosts` besides localhost, 127.0.0.1 and ::1."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    names = tuple(dict.fromkeys((*DEFAULT_HOSTS, *(h for h in hosts if h not in ("", "0.0.0.0",
                                                                                "::")))))
    loaded = _load_ca(d)
    ca, ca_key = loaded if loaded else _make_ca(d)
    if not (d / KEY_FILE).is_file() or not _leaf_ok(d / CERT_FILE, ca, names):
        _make_leaf(d, ca, ca_key, names)
    return d / CA_FILE, d / CERT_FILE, d / KEY_FILE


def ensure_self_signed(directory: str | Path, hostnames: tuple[str, ...] = ("localhost",),
                       ) -> tuple[Path, Path]:
    """(certificate chain, key) of `ensure_dev_ca`, for callers that trust the chain file
    itself (it holds the CA too)."""
    _ca, cert, key = ensure_dev_ca(directory, hostnames)
    return cert, key


# ------------------------------------------------------------------- reload on SIGHUP


def reloading_context(config: Any, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    """uvicorn `ssl_context_factory` (runs in each worker): the usual context, and a SIGHUP
    handler that loads the certificate files again into that same context. New handshakes use
    the new certificate; the listening socket and open connections are untouched; a bad new
    file is logged and the old certificate stays."""
    ctx = default()
    cert, key = config.ssl_certfile, config.ssl_keyfile

    def reload(_sig: int, _frame: Any) -> None:
        try:
            ctx.load_cert_chain(cert, key, config.ssl_keyfile_password)
        except (OSError, ssl.SSLError) as e:
            log.error("TLS certificate %s not reloaded, keeping the old one: %s", cert, e)
            return
        log.warning("TLS certificate reloaded from %s", cert)

    signal.signal(signal.SIGHUP, reload)
    return ctx


def run_uvicorn(app: str, *, attrs: dict[str, Any] | None = None, **kwargs: Any) -> int:
    """uvicorn.run for a factory import string, except that with TLS and several workers the
    supervisor passes SIGHUP on to the workers (which reload their certificate) instead of
    replacing them. `attrs` are set on the uvicorn Config (read by our protocol in each worker).
    Returns the exit status: 0, or 3 (uvicorn's STARTUP_FAILURE) when one worker never started."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    class _Supervisor(Multiprocess):
        def handle_hup(self) -> None:
            if not self.config.is_ssl:
                return super().handle_hup()
            log.warning("SIGHUP: reloading the TLS certificate in %d workers", len(self.processes))
            for p in self.processes:
                if p.pid is not None:
                    os.kill(p.pid, signal.SIGHUP)

    if kwargs.get("ssl_certfile"):
        kwargs.setdefault("ssl_context_factory", reloading_context)
    from gateway.server.workers import WORKER_HEALTHCHECK_S, use_forked_workers
    kwargs.setdefault("timeout_worker_healthcheck", WORKER_HEALTHCHECK_S)
    config = uvicorn.Config(app, **kwargs)
    for name, value in (attrs or {}).items():
        setattr(config, name, value)
    server = uvicorn.Server(config=config)
    try:
        if config.workers > 1:
            use_forked_workers()  # workers up in seconds on a loaded machine (workers.py)
            _Supervisor(config, sockets=[config.bind_socket()]).run()
        else:
            server.run()
    except KeyboardInterrupt:
        pass
    if config.workers == 1 and not server.started:
        return 3  # uvicorn's STARTUP_FAILURE
    return 0
