"""What one connection may cost the gateway (gateway/server/httplimits.py, gateway/server/httpproto.py):
request heads beyond 8 KiB or 100 lines are refused with S3's RequestHeaderSectionTooLarge
before they are buffered (a 64 MiB head is cut off after a few KiB, the worker's memory does
not grow, /health/live answers meanwhile); heads and bodies that stop arriving get
RequestTimeout (and a stalled upload stores nothing); a body longer than 5 GiB is refused as
soon as its head is read; a download whose client reads nothing is cut off; connections
beyond the per-worker bound get 503 SlowDown.

The real gateway (`zonegate serve`, one worker) over real nodes, driven by raw sockets and
boto3; the timeouts are shortened in the cluster config so that the tests are quick.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from erasure.config import ClusterConfig, write_config
from tests.support.gwcluster import (
    ACCESS_KEY,
    SECRET_KEY,
    Gateway,
    archive_ids,
    free_port,
    wait_for,
)

pytestmark = pytest.mark.timeout(240)

HEADER_TIMEOUT = 3.0
BODY_TIMEOUT = 3.0
SEND_TIMEOUT = 3.0
WAIT = 30.0  # socket timeout: far beyond every limit, so a hang fails instead of blocking


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("limits"), gateway_options={
        "header_timeout_seconds": HEADER_TIMEOUT, "body_timeout_seconds": BODY_TIMEOUT,
        "send_timeout_seconds": SEND_TIMEOUT})
    g.start()
    s3 = g.client()
    s3.create_bucket(Bucket="lim")
    s3.close()
    yield g
    g.stop()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(s: socket.socket) -> tuple[int, dict[str, str], bytes, bool]:
    """(status, headers, body, closed): one response read off a raw socket; `closed` says
    whether the server closed the connection after it."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, f"connection closed without an answer (got {buf!r})"
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = s.recv(65536)
        assert chunk, "connection closed inside the body"
        rest += chunk
    body, extra = rest[:length], rest[length:]
    closed = False
    if headers.get("connection", "").lower() != "close":
        return status, headers, body, closed  # kept alive: nothing more to wait for
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            extra += chunk
    except ConnectionResetError:
        closed = True
    return status, headers, body, closed


def code_of(body: bytes) -> str:
    m = re.search(rb"<Code>([^<]*)</Code>", body)
    return m.group(1).decode() if m else body[:200].decode(errors="replace")


def simple_request(port: int, extra_headers: str = "", path: str = "/lim") -> tuple[int, str]:
    with connect(port) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra_headers}"
                  "Connection: close\r\n\r\n".encode())
        status, _, body, _ = read_response(s)
        return status, code_of(body)


def health_live(port: int) -> int:
    with connect(port) as s:
        s.settimeout(10)
        s.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return read_response(s)[0]


def unsigned_put_head(port: int, path: str, length: int, extra: dict[str, str] | None = None
                      ) -> bytes:
    """A SigV4-signed PUT head (UNSIGNED-PAYLOAD) whose body is sent separately."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    class UnsignedPayload(S3SigV4Auth):
        def _should_sha256_sign_payload(self, request: AWSRequest) -> bool:
            return False

    host = f"127.0.0.1:{port}"
    req = AWSRequest(method="PUT", url=f"http://{host}{path}",
                     headers={"Host": host, "Content-Length": str(length), **(extra or {})})
    UnsignedPayload(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    lines = [f"PUT {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in req.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_header_section_beyond_8_kib_is_refused_with_s3_xml(gw):
    status, code = simple_request(gw.port, f"x-amz-meta-big: {'a' * 7000}\r\n")
    assert (status, code) == (403, "AccessDenied")  # within the limit: the S3 app answers
    with connect(gw.port) as s:
        s.sendall(f"GET /lim HTTP/1.1\r\nHost: 127.0.0.1\r\nx-amz-meta-big: {'a' * 9000}\r\n"
                  "\r\n".encode())
        status, headers, body, closed = read_response(s)
    assert (status, code_of(body)) == (400, "RequestHeaderSectionTooLarge")
    assert b"<MaxSizeAllowed>8192</MaxSizeAllowed>" in body
    assert headers["content-type"] == "application/xml" and closed
    # A real client gets the S3 error too.
    s3 = gw.client()
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="lim", Key="meta", Body=b"x", Metadata={"m": "v" * 9000})
    assert e.value.response["Error"]["Code"] == "RequestHeaderSectionTooLarge"
    s3.put_object(Bucket="lim", Key="meta", Body=b"x", Metadata={"m": "v" * 1500})
    assert s3.head_object(Bucket="lim", Key="meta")["Metadata"] == {"m": "v" * 1500}
    s3.close()


def test_header_count_is_bounded(gw):
    few = "".join(f"x-h-{i}: v\r\n" for i in range(60))
    assert simple_request(gw.port, few) == (403, "AccessDenied")
    many = "".join(f"x-h-{i}: v\r\n" for i in range(101))
    assert simple_request(gw.port, many) == (400, "RequestHeaderSectionTooLarge")
    assert simple_request(gw.port, path="/lim?" + "q" * 20000) == (
        400, "RequestHeaderSectionTooLarge")


def _proc_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


@pytest.mark.parametrize("where", ["value", "lines"])
def test_a_64_mib_head_is_cut_off_early_while_health_answers(gw, where):
    pid = gw.proc.pid  # one worker: the master serves
    hwm = _proc_kb(pid, "VmHWM")
    sent = [0]
    answer: list[bytes] = []
    s = connect(gw.port)

    def reader() -> None:
        buf = b""
        try:
            while chunk := s.recv(65536):
                buf += chunk
        except OSError:
            pass
        answer.append(buf)

    def sender() -> None:
        piece = (b"a" * 65536) if where == "value" else (b"x-a: b\r\n" * 8192)
        try:
            s.sendall(b"PUT /lim/k HTTP/1.1\r\nHost: x\r\n" +
                      (b"x-amz-meta-a: " if where == "value" else b""))
            for _ in range(1024):  # 64 MiB
                s.sendall(piece)
                sent[0] += len(piece)
        except OSError:
            pass  # cut off, as it should be

    threads = [threading.Thread(target=reader), threading.Thread(target=sender)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            assert health_live(gw.port) == 200
        for t in threads:
            t.join(WAIT)
        assert not any(t.is_alive() for t in threads)
    finally:
        s.close()
    assert answer[0].startswith(b"HTTP/1.1 400 "), answer[0][:300]
    assert b"<Code>RequestHeaderSectionTooLarge</Code>" in answer[0]
    assert sent[0] < 64 * 1024 * 1024  # the connection was closed before the head ended
    assert _proc_kb(pid, "VmHWM") - hwm < 32 * 1024  # no buffering of the head
    assert health_live(gw.port) == 200


def test_slowloris_heads_time_out(gw):
    with connect(gw.port) as idle, connect(gw.port) as slow:
        slow.sendall(b"GET /lim HTTP/1.1\r\nHost: x\r\n")
        start = time.monotonic()
        slow.settimeout(1.0)
        got = b""
        while time.monotonic() - start < WAIT:
            try:
                chunk = slow.recv(65536)
            except TimeoutError:
                slow.sendall(b"x-drip: 1\r\n")  # a header line now and then: never done
                continue
            if not chunk:
                break
            got += chunk
        assert got.startswith(b"HTTP/1.1 400 ") and b"<Code>RequestTimeout</Code>" in got, got
        idle.settimeout(WAIT)
        assert idle.recv(100) == b""  # a connection that sends nothing is closed quietly


def test_a_stalled_upload_times_out_and_stores_nothing(gw):
    before = archive_ids(gw)
    with connect(gw.port) as s:
        s.sendall(unsigned_put_head(gw.port, "/lim/stalled", 4 * 1024 * 1024))
        s.sendall(b"x" * (1536 * 1024))  # more than a segment: fragments reach the nodes
        status, _, body, closed = read_response(s)
    assert (status, code_of(body)) == (400, "RequestTimeout") and closed
    s3 = gw.client()
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket="lim", Key="stalled")
    assert e.value.response["Error"]["Code"] == "404"
    assert wait_for(lambda: archive_ids(gw) == before, timeout=30)
    # A client that keeps sending, however slowly, is not cut off.
    with connect(gw.port) as s:
        body = b"y" * 300_000
        s.sendall(unsigned_put_head(gw.port, "/lim/slow", len(body)))
        for i in range(0, len(body), 100_000):
            if i:  # pauses well inside the timeout, adding up to more than it
                time.sleep(BODY_TIMEOUT * 0.6)
            s.sendall(body[i:i + 100_000])
        status, _, answer, _ = read_response(s)
    assert status == 200, answer
    assert s3.get_object(Bucket="lim", Key="slow")["Body"].read() == body
    s3.close()


def test_a_body_beyond_5_gib_is_refused_before_it_is_sent(gw):
    for extra in ({}, {"Expect": "100-continue"}):
        with connect(gw.port) as s:
            s.sendall(unsigned_put_head(gw.port, "/lim/huge", 6 << 30, extra))
            status, _, body, closed = read_response(s)
        assert (status, code_of(body)) == (400, "EntityTooLarge"), body
        assert b"<ProposedSize>6442450944</ProposedSize>" in body and closed


def test_connections_beyond_the_bound_get_slowdown(gw, tmp_path):
    cfg = ClusterConfig.load(gw.config_path).to_dict()
    port = free_port()
    cfg["gateway"] = {**cfg["gateway"], "listen": f"127.0.0.1:{port}", "max_connections": 4,
                      "metadata": str(tmp_path / "meta.sqlite")}
    variant = tmp_path / "bounded.toml"
    write_config(variant, cfg)
    bounded = Gateway(tmp_path)
    bounded.config_path, bounded.port, bounded.log_path = variant, port, tmp_path / "gw.log"
    bounded.start_gateway()
    held = []
    try:
        held = [connect(port) for _ in range(4)]
        for h in held:
            h.sendall(b"GET /lim HTTP/1.1\r\nHost: x\r\n")  # heads in progress
        time.sleep(0.5)
        status, code = simple_request(port)
        assert (status, code) == (503, "SlowDown")
        for h in held:
            h.close()
        held = []
        # answered again (an unsigned GET of a bucket nobody created: NoSuchBucket)
        assert wait_for(lambda: simple_request(port) == (404, "NoSuchBucket"), timeout=10), \
            simple_request(port)
    finally:
        for h in held:
            h.close()
        bounded.stop_gateway()


def server_side_established(server_port: int, client: socket.socket) -> bool:
    """Whether the gateway's end of `client`'s connection is still ESTABLISHED, from the
    kernel's table (/proc/net/tcp): its close shows there at once, even while its FIN waits
    behind unsent bytes for a window the client never opens; nothing is read."""
    local, remote = f":{server_port:04X}", f":{client.getsockname()[1]:04X}"
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            _, loc, rem, state = line.split()[:4]
            if loc.endswith(local) and rem.endswith(remote):
                return state == "01"
    return False  # gone altogether: reset


def test_a_download_nobody_reads_is_cut_off(gw):
    s3 = gw.client()
    body = os.urandom(6 * 1024 * 1024)
    s3.put_object(Bucket="lim", Key="unread", Body=body)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "lim", "Key": "unread"})
    path = url.split(str(gw.port), 1)[1]
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)  # before connect: the window
    s.settimeout(WAIT)
    try:
        s.connect(("127.0.0.1", gw.port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n\r\n".encode())
        # read nothing (that would move the download on) until the gateway gives up on us
        assert wait_for(lambda: not server_side_established(gw.port, s), timeout=WAIT)
        got = 0
        try:
            while chunk := s.recv(1 << 20):
                got += len(chunk)
        except ConnectionResetError:
            pass
    finally:
        s.close()
    assert 0 < got < len(body)  # the head and some bytes, then the end of the connection
    # A client that reads, however slowly, gets everything.
    assert s3.get_object(Bucket="lim", Key="unread")["Body"].read() == body
    s3.close()
