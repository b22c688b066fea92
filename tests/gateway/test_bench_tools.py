"""The checkpoint and tails benchmarks' tools: the tracing proxy relays requests unchanged and
records what a client sent, histogram quantiles between two scrapes count only what happened
between them, /proc CPU clocks count a busy process. A broken tool here, not a wrong table in
a half-hour benchmark run."""

from __future__ import annotations

import hashlib
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bench.procstat import RoleClock, cpu_seconds, thread_times
from bench.promhist import quantiles, scrape
from bench.reqtrace import TraceProxy, summarize

BODY = hashlib.shake_256(b"trace").digest(3 * 1024 * 1024 + 17)
REGISTRY = CollectorRegistry()
TTFB = Histogram("zonegate_gateway_time_to_first_byte_seconds", "t", ["operation"],
                 buckets=(0.01, 0.1, 1.0, 10.0), registry=REGISTRY)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()

    def do_GET(self) -> None:
        if self.path == "/metrics":
            body = generate_latest(REGISTRY)
        elif self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (b"abc", b"defgh"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        else:
            if self.path.startswith("/slow/"):
                time.sleep(0.2)
            a, b = self.headers["Range"].split("=")[1].split("-")
            body = BODY[int(a):int(b) + 1]
        self.send_response(206 if self.path != "/metrics" else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[int]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def get(url: str, method: str = "GET", rng: str | None = None) -> bytes:
    req = urllib.request.Request(url, method=method, headers={"Range": rng} if rng else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=30) as r:
        return r.read()


def test_proxy_relays_bytes_and_records_each_request(server: int) -> None:
    mib = 1024 * 1024
    with TraceProxy(server) as proxy:
        for i in range(3):
            assert get(proxy.endpoint + "/o", rng=f"bytes={i * mib}-{(i + 1) * mib - 1}") \
                == BODY[i * mib:(i + 1) * mib]
        assert get(proxy.endpoint + "/o", rng="bytes=5-9") == BODY[5:10]
        assert get(proxy.endpoint + "/o", "HEAD") == b""
        assert get(proxy.endpoint + "/chunked") == b"abcdefgh"
    calls = sorted(proxy.calls, key=lambda c: c.start)
    assert [(c.method, c.range, c.status, c.body) for c in calls] == [
        ("GET", "bytes=0-1048575", 206, mib), ("GET", "bytes=1048576-2097151", 206, mib),
        ("GET", "bytes=2097152-3145727", 206, mib), ("GET", "bytes=5-9", 206, 5),
        ("HEAD", "", 200, 0), ("GET", "", 200, 8)]
    s = summarize(calls)
    assert s["by_method"] == {"GET": 5, "HEAD": 1}
    assert (s["gets"], s["ranged_gets"], s["get_size_max"]) == (5, 4, mib)
    assert s["max_concurrent"] == 1  # one after the other
    assert s["gets_8mib_aligned"] == 1  # bytes=0-...


def test_quantiles_count_only_what_happened_between_scrapes(server: int) -> None:
    endpoint = f"http://127.0.0.1:{server}"
    for _ in range(50):
        TTFB.labels("GetObject").observe(5.0)  # before: must not count
    a = scrape(endpoint)
    for _ in range(99):
        TTFB.labels("GetObject").observe(0.05)
    TTFB.labels("GetObject").observe(5.0)
    TTFB.labels("UploadPart").observe(0.5)
    b = scrape(endpoint)
    q = quantiles(a, b, "zonegate_gateway_time_to_first_byte_seconds", "GetObject")
    assert q["count"] == 100
    assert 0.01 < q["p50"] <= 0.1  # in the (0.01, 0.1] bucket
    assert 0.01 < q["p99"] <= 0.1  # the 99th of 100 is still a fast one
    assert q["over_1s"] == 1  # the one at 5 s after the first scrape
    up = quantiles(a, b, "zonegate_gateway_time_to_first_byte_seconds", "UploadPart")
    assert up["count"] == 1 and 0.1 < up["p50"] <= 1.0 and up["over_1s"] == 0


def test_role_clock_counts_the_cpu_a_process_spends() -> None:
    clock = RoleClock([])
    before = clock.sample()["client"]
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:
        hashlib.sha256(os.urandom(1 << 16)).digest()
    spent = clock.sample()["client"] - before
    assert spent >= 0.2
    assert cpu_seconds(2 ** 22 + 12345) is None  # no such process


def test_thread_times_tell_the_main_thread_from_the_others() -> None:
    """`bench parts` splits a process's CPU into its event loop (the main thread) and its
    other threads: a busy helper thread must land in the second."""
    roles = {os.getpid(): "me"}
    before = thread_times(roles)

    spun, leave = threading.Event(), threading.Event()

    def spin() -> None:
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.3:
            hashlib.sha256(os.urandom(1 << 16)).digest()
        spun.set()
        leave.wait(30)  # a thread that ended is no longer in /proc/<pid>/task

    t = threading.Thread(target=spin)
    t.start()
    try:
        assert spun.wait(30)
        after = thread_times(roles)
    finally:
        leave.set()
        t.join()
    threads = sum(after["me:threads"]) - sum(before.get("me:threads", (0.0, 0.0)))
    loop = sum(after["me:loop"]) - sum(before["me:loop"])
    assert threads >= 0.2
    assert loop < 0.2
    assert thread_times({2 ** 22 + 12345: "gone"}) == {}


def test_send_clock_tells_the_request_from_the_clients_work_before_it(server: int) -> None:
    """`bench tails` times a request from botocore's before-send (what a client's first-response
    timeout counts) apart from the whole call, which also holds the client's own work."""
    import boto3
    from botocore.config import Config

    from bench.tails_bench import SendClock

    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{server}", region_name="us-east-1",
                      aws_access_key_id="a", aws_secret_access_key="b",
                      config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    sends = SendClock(s3, ("GetObject",))
    s3.meta.events.register("before-sign.s3.GetObject", lambda **_: time.sleep(0.3))
    r, call, request = sends.timed(lambda: s3.get_object(Bucket="slow", Key="k", Range="bytes=0-9"))
    assert r["Body"].read() == BODY[:10]
    assert 0.2 <= request < 0.45 and call >= request + 0.3, (call, request)


def test_crt_ab_difference_is_balanced_over_the_order_of_each_pair() -> None:
    """With an odd number of runs one tree goes first more often, and the second of a pair
    meets the first's writeback: the difference is averaged per order, then between orders."""
    from bench.crt_bench import paired

    rows = []
    for run in range(5):
        cur_first = run % 2 == 0
        for tree, first in (("current", cur_first), ("before", not cur_first)):
            node = (2.5 if tree == "current" else 2.6) + (0.0 if first else 0.2)
            rows.append({"tree": tree, "run": run, "phase": "put", "first": first,
                         "cpu_gateway": 3.0, "cpu_node": node})
    d, order = paired(rows, "put", "node")
    assert round(d, 6) == -0.1 and round(order, 6) == 0.2
    assert round(paired(rows, "put", "server")[0], 6) == -0.1
    assert paired(rows, "get", "node") == (None, 0.0)
    assert paired([r for r in rows if r["run"] % 2 == 0], "put", "node") == (None, 0.0)


def test_md5_bench_times_the_same_work_through_hashlib_and_the_lanes() -> None:
    from bench.md5_bench import BATCH, one_run
    from gateway.s3 import md5lanes

    made: list[object] = []

    def counted(make):  # noqa: ANN001, ANN202 - a factory that records each hasher
        def new():  # noqa: ANN202
            h = make()
            made.append(h)
            return h
        return new

    data = os.urandom(BATCH)
    for make in (hashlib.md5, md5lanes.LaneMd5):
        made.clear()
        cpu, mbs = one_run(counted(make), 3, 1, 2, data)
        assert len(made) == 3 * 2 and cpu > 0 and mbs > 0
        assert {h.hexdigest() for h in made} == {hashlib.md5(data * 4).hexdigest()}
