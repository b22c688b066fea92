"""TLS that clients verify: `zonegate dev --tls` makes a CA and a server certificate signed by
it; a rustls client (obstore, i.e. Rust's object_store) and boto3 (AWS_CA_BUNDLE) put and get
through it with verification on; an old self-signed dev certificate is replaced; a production
gateway takes `[gateway] tls_cert / tls_key` and reloads them on SIGHUP without dropping its
listener. Log lines of every process carry a timestamp, the pid and (JSON too) the request id."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from pathlib import Path

import boto3
import pytest
import tomli_w
from botocore.config import Config
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from gateway.server.tls import CA_FILE, ensure_dev_ca, ensure_self_signed
from tests.support.devcluster import ACCESS_KEY, REGION, SECRET_KEY, DevCluster, free_port

pytestmark = pytest.mark.timeout(600)


def _ext(cert: x509.Certificate, cls):
    return cert.extensions.get_extension_for_class(cls).value


def test_dev_ca_and_server_certificate_have_the_right_extensions(tmp_path):
    ca_path, cert_path, key_path = ensure_dev_ca(tmp_path, ("zg.example", "10.1.2.3"))
    ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
    leaf, chain_ca = x509.load_pem_x509_certificates(cert_path.read_bytes())
    assert chain_ca == ca
    assert _ext(ca, x509.BasicConstraints).ca and _ext(ca, x509.KeyUsage).key_cert_sign
    assert not _ext(leaf, x509.BasicConstraints).ca
    assert not _ext(leaf, x509.KeyUsage).key_cert_sign
    assert list(_ext(leaf, x509.ExtendedKeyUsage)) == [ExtendedKeyUsageOID.SERVER_AUTH]
    sans = _ext(leaf, x509.SubjectAlternativeName)
    assert set(sans.get_values_for_type(x509.DNSName)) == {"localhost", "zg.example"}
    assert {str(a) for a in sans.get_values_for_type(x509.IPAddress)} == {
        "127.0.0.1", "::1", "10.1.2.3"}
    leaf.verify_directly_issued_by(ca)
    assert oct(key_path.stat().st_mode & 0o777) == "0o600"
    # made once: the same files next time; a new host gets a new leaf from the same CA
    assert ensure_dev_ca(tmp_path, ("zg.example",)) == (ca_path, cert_path, key_path)
    assert x509.load_pem_x509_certificates(cert_path.read_bytes())[0] == leaf
    ensure_dev_ca(tmp_path, ("other.example",))
    new_leaf = x509.load_pem_x509_certificates(cert_path.read_bytes())[0]
    assert new_leaf != leaf and x509.load_pem_x509_certificate(ca_path.read_bytes()) == ca
    # Python's strict verification (3.13's default flags) accepts the chain for each name
    ctx = ssl.create_default_context(cafile=str(ca_path))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    _handshake(cert_path, key_path, ctx, ("localhost", "127.0.0.1"))


def _handshake(cert: Path, key: Path, client: ssl.SSLContext, names: tuple[str, ...]) -> None:
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def serve() -> None:
            for _ in names:
                conn, _addr = listener.accept()
                try:
                    with server.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)
                except ssl.SSLError:
                    pass

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        for name in names:
            with socket.create_connection(listener.getsockname()) as raw:
                with client.wrap_socket(raw, server_hostname=name) as tls:
                    assert tls.version() in ("TLSv1.2", "TLSv1.3")
                    tls.send(b"x")
        t.join(5)


def test_an_old_self_signed_dev_certificate_is_replaced(tmp_path):
    """Before the CA, cert.pem was self-signed and its own CA: rustls refuses that."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    old = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
           .public_key(key.public_key()).serial_number(1).not_valid_before(now)
           .not_valid_after(now + dt.timedelta(days=3650))
           .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
           .sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(old.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    cert, _key = ensure_self_signed(tmp_path)
    leaf = x509.load_pem_x509_certificates(cert.read_bytes())[0]
    assert leaf != old and not _ext(leaf, x509.BasicConstraints).ca
    assert (tmp_path / CA_FILE).is_file()


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    cluster = DevCluster(tmp_path_factory.mktemp("tls") / "data", tls=True, zones=16,
                         zone_size="16M")
    try:
        yield cluster.start(extra=("--log-format", "json"))
    finally:
        cluster.stop()


OBSTORE_SCRIPT = textwrap.dedent("""
    import os, sys
    import obstore
    from obstore.store import S3Store
    store = S3Store(sys.argv[2], endpoint=sys.argv[1], access_key_id=os.environ["AK"],
                    secret_access_key=os.environ["SK"], region="us-east-1",
                    virtual_hosted_style_request=False, client_options={"timeout": "20s"},
                    retry_config={"max_retries": 0})
    body = os.urandom(3 * 1024 * 1024 + 17)
    obstore.put(store, "rustls/obj.bin", body)
    back = bytes(obstore.get(store, "rustls/obj.bin").bytes())
    assert back == body, (len(back), len(body))
    print("ok", len(back))
""")


def _obstore(endpoint: str, bucket: str, ca: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    env.update(AK=ACCESS_KEY, SK=SECRET_KEY)
    if ca is not None:
        env["SSL_CERT_FILE"] = str(ca)  # how object_store / obstore / polars trust a CA
    return subprocess.run([sys.executable, "-c", OBSTORE_SCRIPT, endpoint, bucket], env=env,
                          capture_output=True, text=True, timeout=180)


def test_rustls_client_and_boto3_verify_the_dev_certificate(dev, monkeypatch):
    pytest.importorskip("obstore", reason="obstore (a rustls S3 client) is not installed")
    ca = dev.data / "tls" / CA_FILE
    monkeypatch.setenv("AWS_CA_BUNDLE", str(ca))
    s3 = boto3.client("s3", endpoint_url=dev.endpoint, aws_access_key_id=ACCESS_KEY,
                      aws_secret_access_key=SECRET_KEY, region_name=REGION,
                      config=Config(retries={"max_attempts": 2}))
    s3.create_bucket(Bucket="rustls")
    s3.put_object(Bucket="rustls", Key="boto3.txt", Body=b"verified by AWS_CA_BUNDLE")
    assert s3.get_object(Bucket="rustls", Key="boto3.txt")["Body"].read() == \
        b"verified by AWS_CA_BUNDLE"
    s3.close()
    for endpoint in (dev.endpoint, dev.endpoint.replace("127.0.0.1", "localhost")):
        res = _obstore(endpoint, "rustls", ca)
        assert res.returncode == 0 and res.stdout.startswith("ok"), res.stderr[-3000:]
    # verification is on: without the CA the same client refuses the server
    res = _obstore(dev.endpoint, "rustls", None)
    assert res.returncode != 0
    assert "certificate" in res.stderr.lower() or "UnknownIssuer" in res.stderr, res.stderr[-2000:]
    assert (dev.data / "tls" / CA_FILE).as_posix() in dev.output()  # the banner names it


def test_every_process_logs_timestamp_pid_and_request_id_as_json(dev):
    logs = dev.data / "logs"
    for name in ("gateway", "node01", "node12"):
        lines = [ln for ln in (logs / f"{name}.log").read_text().splitlines()
                 if ln.startswith("{")]
        assert lines, name
        pids = set()
        for ln in lines:
            doc = json.loads(ln)
            assert {"ts", "pid", "role", "level", "logger", "request_id", "msg"} <= set(doc)
            assert time.strptime(doc["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
            pids.add(doc["pid"])
        if name == "gateway":  # its master and its two workers each log their start
            assert len(pids) >= 3, lines
        # nothing of the process escapes the format (tracebacks go inside a line)
        other = [ln for ln in (logs / f"{name}.log").read_text().splitlines()
                 if ln and not ln.startswith(("{", "===", "  "))]
        assert not other, other[:5]


def test_request_id_is_in_log_lines_written_during_a_request():
    # in-process: the same context variable the gateway sets for each S3 request
    code = textwrap.dedent("""
        import logging
        from zonestore.logsetup import REQUEST_ID, configure
        configure("INFO", "text", "gateway")
        REQUEST_ID.set("18C3F0A2B1D4E5F6")
        logging.getLogger("zonegate.gateway").warning("inside")
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    line = res.stderr.strip()
    parts = line.split()
    assert time.strptime(parts[0], "%Y-%m-%dT%H:%M:%S.%fZ")
    assert parts[1].startswith("pid=") and parts[2] == "gateway" and parts[3] == "WARNING"
    assert "rid=18C3F0A2B1D4E5F6:" in line and line.endswith("inside")


def _serial(port: int, ca: Path) -> int:
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_production_gateway_reloads_its_certificate_on_sighup(dev, tmp_path):
    """`[gateway] tls_cert / tls_key` (relative to the config), two workers; SIGHUP to the
    master makes each worker load the new files into its SSLContext: new handshakes get the
    new certificate, and the workers and a connection opened before stay."""
    tls = tmp_path / "tls"
    ca, _cert, _key = ensure_dev_ca(tls)
    cfg = tomllib.loads(dev.config_path.read_text())
    port = free_port()
    cfg["gateway"].update(listen=f"127.0.0.1:{port}", metadata=str(tmp_path / "meta.sqlite"),
                          tls_cert="tls/cert.pem", tls_key="tls/key.pem")
    cfg["erasure"]["state_dir"] = str(tmp_path / "erasure")
    config = tmp_path / "gw.toml"
    config.write_text(tomli_w.dumps(cfg))
    log = open(tmp_path / "gw.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config),
                             "--workers", "2", "--log-level", "info"], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                first = _serial(port, ca)
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "gw.log").read_text()
                assert time.monotonic() < deadline, (tmp_path / "gw.log").read_text()
                time.sleep(0.5)
        workers = sorted(int(p) for p in subprocess.run(
            ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split())
        ctx = ssl.create_default_context(cafile=str(ca))
        held = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                               server_hostname="localhost")
        (tls / "cert.pem").unlink()  # a new server certificate from the same CA
        ensure_dev_ca(tls)
        os.kill(proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 30
        while (_serial(port, ca)) == first:
            assert time.monotonic() < deadline, (tmp_path / "gw.log").read_text()
            time.sleep(0.3)
        # both workers reloaded (a second handshake may land on the other one)
        assert all(_serial(port, ca) != first for _ in range(6))
        assert sorted(int(p) for p in subprocess.run(
            ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()) \
            == workers
        held.sendall(b"GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert held.recv(100).startswith(b"HTTP/1.1 200")
        held.close()
        assert (tmp_path / "gw.log").read_text().count("TLS certificate reloaded") == 2
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
