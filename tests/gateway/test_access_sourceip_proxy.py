"""aws:SourceIp and aws:SecureTransport behind a real HAProxy (`[gateway] trusted_proxies`).

HAProxy listens on 127.0.0.1 (HTTP and HTTPS) with the X-Forwarded-* rules of
deploy/haproxy.cfg and connects to the gateway from 127.0.0.2, the only trusted proxy: the
gateway sees every proxied request's peer as 127.0.0.2, so a policy naming the client's own
address (127.0.0.1, or 127.0.0.3 when the client binds that) passes only if the client address
is taken from X-Forwarded-For. A client that reaches the gateway directly, or through HAProxy,
cannot choose its address or scheme by sending the headers itself. Bob's requests are signed
here and sent with http.client, so the test picks the source address and adds headers after
signing (as a proxy would).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from urllib.parse import urlencode

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from erasure.config import write_config
from gateway.access.proxies import TrustedProxies
from gateway.server.tls import ensure_dev_ca
from tests.support.gwcluster import (
    ACCESS_KEY,
    OTHER_ACCESS,
    OTHER_SECRET,
    SECRET_KEY,
    Gateway,
    free_port,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]
PROXY_SOURCE = "127.0.0.2"  # HAProxy's side of its connections to the gateway
BUCKET, KEY = "netlimited", "data.bin"
BODY = b"only from the right network\n"

HAPROXY_CFG = """\
global
    maxconn 256

defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    option forwardfor

frontend s3
    bind 127.0.0.1:{http_port}
    bind 127.0.0.1:{https_port} ssl crt {pem}
{rules}
    default_backend gateway

backend gateway
    server gw 127.0.0.1:{gw_port} source {source}
"""


def shipped_rules() -> str:
    """The `http-request` lines of deploy/haproxy.cfg's S3 frontend: tested as shipped."""
    lines = [ln.strip() for ln in (REPO / "deploy" / "haproxy.cfg").read_text().splitlines()
             if ln.strip().startswith("http-request ")]
    assert any("X-Forwarded-Proto" in ln for ln in lines)
    return "\n".join("    " + ln for ln in lines)


# ------------------------------------------------------------------- the parsing itself


def test_trusted_proxies_setting_is_checked():
    assert not TrustedProxies.from_gateway({})  # default: no proxy trusted
    p = TrustedProxies.from_gateway({"trusted_proxies": ["10.0.0.0/8", "192.168.1.7",
                                                         "fd00::/8"]})
    assert p.trusts("10.1.2.3") and p.trusts("192.168.1.7") and p.trusts("fd00::1")
    assert not p.trusts("192.168.1.8") and not p.trusts("") and not p.trusts(None)
    for bad in ("10.0.0.0/8", ["10.0.0.0/33"], ["not-a-net"], [10]):
        with pytest.raises(ValueError, match="gateway.trusted_proxies"):
            TrustedProxies.from_gateway({"trusted_proxies": bad})


def test_client_address_is_the_right_most_untrusted_hop():
    p = TrustedProxies.from_gateway({"trusted_proxies": ["10.0.0.0/24"]})
    # from a trusted peer: the last hop that is not a proxy; what the client wrote is ignored
    assert p.client_address("10.0.0.5", ["6.6.6.6, 198.51.100.7"]) == "198.51.100.7"
    assert p.client_address("10.0.0.5", ["6.6.6.6", "198.51.100.7, 10.0.0.9"]) == \
        "198.51.100.7"
    assert p.client_address("10.0.0.5", ["198.51.100.7:5555"]) == "198.51.100.7"
    assert p.client_address("10.0.0.5", ["[2001:db8::7]:5555"]) == "2001:db8::7"
    assert p.client_address("10.0.0.5", ["::ffff:198.51.100.7"]) == "198.51.100.7"
    assert p.client_address("10.0.0.5", ["10.0.0.1, 10.0.0.2"]) == "10.0.0.1"
    assert p.client_address("10.0.0.5", ["unknown"]) == "10.0.0.5"  # names no one
    assert p.client_address("10.0.0.5", [" , "]) == "10.0.0.5"
    assert p.client_address("10.0.0.5", []) == "10.0.0.5"
    # from any other peer the header counts for nothing
    assert p.client_address("198.51.100.7", ["10.0.0.1"]) == "198.51.100.7"
    assert TrustedProxies().client_address("10.0.0.5", ["1.2.3.4"]) == "10.0.0.5"
    assert p.scheme("10.0.0.5", "http", ["https"]) == "https"
    assert p.scheme("10.0.0.5", "https", ["http"]) == "http"
    assert p.scheme("10.0.0.5", "http", ["gopher"]) == "http"
    assert p.scheme("198.51.100.7", "http", ["https"]) == "http"


def test_serve_refuses_a_bad_trusted_proxies_setting(tmp_path):
    cfg = write_config(tmp_path / "bad.toml", {
        "secret": "s" * 32, "erasure": {"k": 1, "m": 1},
        "gateway": {"metadata": str(tmp_path / "meta.sqlite"),
                    "trusted_proxies": ["10.0.0.0/33"]},
        "nodes": [{"id": f"n{i}", "url": f"http://127.0.0.1:{i + 1}", "drives": ["/none"]}
                  for i in range(2)]})
    r = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "gateway.trusted_proxies" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------- through HAProxy


class Setup:
    def __init__(self, gw: Gateway, http_port: int, https_port: int, ca: Path) -> None:
        self.gw, self.http_port, self.https_port, self.ca = gw, http_port, https_port, ca

    def send(self, port: int, method: str, path: str, *, tls: bool = False,
             source: str = "127.0.0.1", headers: dict[str, str] | None = None,
             body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
        """One request to 127.0.0.1:port from `source`: (status, headers, body)."""
        conn: http.client.HTTPConnection
        if tls:
            ctx = ssl.create_default_context(cafile=str(self.ca))
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ctx,
                                               source_address=(source, 0))
        else:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                              source_address=(source, 0))
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for k, v in {"Host": f"127.0.0.1:{port}", **(headers or {}),
                         "Content-Length": str(len(body))}.items():
                conn.putheader(k, v)
            conn.endheaders(body)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def get(self, port: int, *, tls: bool = False, source: str = "127.0.0.1",
            headers: dict[str, str] | None = None) -> int:
        """Bob's signed GetObject to 127.0.0.1:port from `source`; extra headers are added
        after signing. Returns the status."""
        host = f"127.0.0.1:{port}"
        path = f"/{BUCKET}/{KEY}"
        areq = AWSRequest(method="GET", url=f"{'https' if tls else 'http'}://{host}{path}")
        areq.headers["Host"] = host
        areq.headers["x-amz-content-sha256"] = hashlib.sha256(b"").hexdigest()
        S3SigV4Auth(Credentials(OTHER_ACCESS, OTHER_SECRET), "s3", "us-east-1").add_auth(areq)
        status, _, body = self.send(port, "GET", path, tls=tls, source=source,
                                    headers={**dict(areq.headers.items()), **(headers or {})})
        if status == 200:
            assert body == BODY
        else:
            assert b"<Code>AccessDenied</Code>" in body, body
        return status

    def console_login(self, port: int, secret: str, *, tls: bool = False,
                      source: str = "127.0.0.1") -> tuple[int, dict[str, str]]:
        origin = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        body = urlencode({"access_key": ACCESS_KEY, "secret_key": secret}).encode()
        status, headers, _ = self.send(
            port, "POST", "/console/api/login", tls=tls, source=source, body=body,
            headers={"Origin": origin, "Accept": "application/json",
                     "Content-Type": "application/x-www-form-urlencoded"})
        return status, headers

    def via_proxy(self, **kw) -> int:
        return self.get(self.http_port, **kw)

    def via_tls_proxy(self, **kw) -> int:
        return self.get(self.https_port, tls=True, **kw)

    def direct(self, **kw) -> int:
        return self.get(self.gw.port, **kw)

    def allow_bob_if(self, condition: dict) -> None:
        self.gw.client().put_bucket_policy(Bucket=BUCKET, Policy=json.dumps({
            "Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::000000000000:user/bob"},
                "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/*",
                "Condition": condition}]}))

    def allow_bob_from(self, *networks: str) -> None:
        self.allow_bob_if({"IpAddress": {"aws:SourceIp": list(networks)}})


def _wait_listening(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"haproxy exited {proc.returncode}: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"haproxy not listening: {log.read_text()}")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (Debian package haproxy)")
    root = tmp_path_factory.mktemp("sourceip")
    gw = Gateway(root, gateway_options={"trusted_proxies": [f"{PROXY_SOURCE}/32"]}).start()
    proc = None
    try:
        ca, cert, key = ensure_dev_ca(root / "tls")
        pem = root / "haproxy.pem"
        pem.write_bytes(cert.read_bytes() + key.read_bytes())
        http_port, https_port = free_port(), free_port()
        cfg = root / "haproxy.cfg"
        cfg.write_text(HAPROXY_CFG.format(http_port=http_port, https_port=https_port, pem=pem,
                                          rules=shipped_rules(), gw_port=gw.port,
                                          source=PROXY_SOURCE))
        log = root / "haproxy.log"
        with open(log, "ab") as logf:
            proc = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdin=subprocess.DEVNULL,
                                    stdout=logf, stderr=subprocess.STDOUT)
        _wait_listening(http_port, proc, log)
        _wait_listening(https_port, proc, log)
        alice = gw.client()
        alice.create_bucket(Bucket=BUCKET)
        alice.put_object(Bucket=BUCKET, Key=KEY, Body=BODY)
        yield Setup(gw, http_port, https_port, ca)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        gw.stop()
    assert "internal error" not in gw.log_path.read_text(errors="replace"), gw.log_tail()


def test_a_policy_for_another_network_denies_a_proxied_client(setup):
    setup.allow_bob_from("10.0.0.0/8")
    assert setup.via_proxy() == 403
    assert setup.via_tls_proxy() == 403


def test_a_policy_for_the_clients_address_allows_it_through_the_proxy(setup):
    setup.allow_bob_from("127.0.0.1/32")
    assert setup.via_proxy() == 200  # the peer is 127.0.0.2: the address came from the header
    assert setup.via_tls_proxy() == 200
    assert setup.via_proxy(source="127.0.0.3") == 403  # another client, another address
    setup.allow_bob_from("127.0.0.3/32")
    assert setup.via_proxy(source="127.0.0.3") == 200
    assert setup.via_proxy() == 403
    # the proxy's own address is nobody's client address
    setup.allow_bob_from(f"{PROXY_SOURCE}/32")
    assert setup.via_proxy() == 403
    # NotIpAddress tests the same address
    setup.allow_bob_if({"NotIpAddress": {"aws:SourceIp": "127.0.0.1/32"}})
    assert setup.via_proxy() == 403
    assert setup.via_proxy(source="127.0.0.3") == 200


def test_a_spoofed_forwarded_for_is_ignored(setup):
    setup.allow_bob_from("10.0.0.0/8")
    spoof = {"X-Forwarded-For": "10.1.2.3"}
    # straight to the gateway, from an address that is not a trusted proxy
    assert setup.direct(headers=spoof) == 403
    # through HAProxy: it appends the real peer, and the right-most untrusted hop counts
    assert setup.via_proxy(headers=spoof) == 403
    assert setup.via_proxy(headers={"X-Forwarded-For": f"10.1.2.3, {PROXY_SOURCE}"}) == 403
    setup.allow_bob_from("127.0.0.1/32")
    assert setup.direct(headers=spoof) == 200  # the header changed nothing
    assert setup.direct() == 200
    # a trusted peer's header counts, past the trusted hops of a chain of proxies
    setup.allow_bob_from("10.0.0.0/8")
    assert setup.direct(source=PROXY_SOURCE,
                        headers={"X-Forwarded-For": f"10.1.2.3, {PROXY_SOURCE}"}) == 200


def test_secure_transport_behind_a_tls_terminating_proxy(setup):
    setup.allow_bob_if({"Bool": {"aws:SecureTransport": "true"}})
    assert setup.via_tls_proxy() == 200
    assert setup.via_proxy() == 403
    # HAProxy replaces a client's X-Forwarded-Proto; a direct client's is ignored
    assert setup.via_proxy(headers={"X-Forwarded-Proto": "https"}) == 403
    assert setup.direct(headers={"X-Forwarded-Proto": "https"}) == 403
    setup.allow_bob_if({"Bool": {"aws:SecureTransport": "false"}})
    assert setup.via_proxy() == 200
    assert setup.via_tls_proxy() == 403


def test_console_logins_log_the_client_address_and_secure_cookies(setup):
    log = setup.gw.log_path
    status, _ = setup.console_login(setup.http_port, "wrong", source="127.0.0.3")
    assert status == 401
    assert wait_for(lambda: f"access key '{ACCESS_KEY}' from 127.0.0.3" in log.read_text())
    status, headers = setup.console_login(setup.https_port, SECRET_KEY, tls=True,
                                          source="127.0.0.3")
    assert status == 200
    assert "secure" in headers["set-cookie"].lower()  # the client spoke TLS to the proxy
    assert wait_for(lambda: "console login of user alice from 127.0.0.3" in log.read_text())
    status, headers = setup.console_login(setup.http_port, SECRET_KEY)
    assert status == 200 and "secure" not in headers["set-cookie"].lower()
    assert f"from {PROXY_SOURCE}" not in log.read_text()


def test_without_trusted_proxies_the_peer_address_counts(setup):
    """The default: X-Forwarded-For is believed from no one, HAProxy's included."""
    g = setup.gw
    saved = g.config_path.read_bytes()
    doc = tomllib.loads(saved.decode())
    del doc["gateway"]["trusted_proxies"]
    g.stop_gateway()
    try:
        write_config(g.config_path, doc)
        g.start_gateway()
        setup.allow_bob_from("127.0.0.1/32")
        assert setup.via_proxy() == 403
        assert setup.direct() == 200
        setup.allow_bob_from(f"{PROXY_SOURCE}/32")
        assert setup.via_proxy() == 200
        assert setup.via_tls_proxy(headers={"X-Forwarded-For": "127.0.0.1"}) == 200
        setup.allow_bob_if({"Bool": {"aws:SecureTransport": "true"}})
        assert setup.via_tls_proxy() == 403  # HAProxy's X-Forwarded-Proto is not believed
    finally:
        g.stop_gateway()
        g.config_path.write_bytes(saved)
        g.start_gateway()
