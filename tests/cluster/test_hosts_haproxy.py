"""Several hosts for real: PostgreSQL, six storage nodes, two gateways, HAProxy and the client
each in a network namespace of its own, joined by veth pairs to a bridge in one more namespace
(a switch); every address lives inside those namespaces, none on this machine's own links.
HAProxy balances the two gateways and probes `/health/ready`. boto3 uploads and downloads
through HAProxy while one gateway, then the other, is SIGKILLed and started again: every
acknowledged write reads back intact, and the client never sees an error, only retries.

The test process reaches the namespaces from threads that joined the client's namespace
(setns(2) moves only the calling thread). It needs root, iproute2, HAProxy and PostgreSQL,
and skips without them.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import random
import secrets
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY
from tests.support.multigwcluster import GatewayProc, MultiGateway
from tests.support.nodeproc import NodeCluster, NodeProcess
from tests.support.pgserver import PgServer, skip_reason

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CLONE_NEWNET = 0x40000000
NODES = 6
GW_PORT, NODE_PORT, PG_PORT, LB_PORT = 9000, 9100, 5432, 8080
_libc = ctypes.CDLL(None, use_errno=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def enter_netns(name: str) -> None:
    """Move the calling thread (only it) into network namespace `name`."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name} failed")
    finally:
        os.close(fd)


class Hosts:
    """Network namespaces as hosts on one /24, cabled to a bridge in a switch namespace."""

    def __init__(self, names: list[str]) -> None:
        self.tag = secrets.token_hex(2)
        self.net = 10 + secrets.randbelow(200)
        self.switch = f"zgh{self.tag}sw"
        self.hosts = {h: (f"zgh{self.tag}{h}", f"10.{self.net}.0.{10 + i}")
                      for i, h in enumerate(names)}
        self.made: list[str] = []

    def ns(self, host: str) -> str:
        return self.hosts[host][0]

    def addr(self, host: str) -> str:
        return self.hosts[host][1]

    @property
    def subnet(self) -> str:
        return f"10.{self.net}.0.0/24"

    def create(self) -> None:
        _ip("netns", "add", self.switch)
        self.made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, (ns, addr) in enumerate(self.hosts.values()):
            _ip("netns", "add", ns)
            self.made.append(ns)
            port = f"p{i}"
            _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def remove(self) -> None:
        for ns in reversed(self.made):  # the veth pairs go with their namespaces
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)

    def call(self, host: str, fn: Any) -> Any:
        """fn() run in a thread inside host's namespace; its result (or exception)."""
        out: dict[str, Any] = {}

        def run() -> None:
            try:
                enter_netns(self.ns(host))
                out["value"] = fn()
            except BaseException as e:  # handed back to the caller
                out["error"] = e
        t = threading.Thread(target=run)
        t.start()
        t.join()
        if "error" in out:
            raise out["error"]
        return out["value"]


class HostNodes(NodeCluster):
    """tests/support/nodeproc's nodes, each on a host (namespace) of its own at NODE_PORT."""

    def __init__(self, root: Path, hosts: Hosts) -> None:
        super().__init__(root, NODES, drives_per_node=1, secret="gw-test-secret")
        self.net = hosts
        for i, node in enumerate(self.nodes):
            node.netns, node.host, node.port = hosts.ns(f"n{i}"), hosts.addr(f"n{i}"), NODE_PORT

    def _ready(self, node: NodeProcess, statuses: tuple[str, ...] = ("ready",)) -> bool:
        return self.net.call("client", lambda: NodeCluster._ready(self, node, statuses))


class HostPg(PgServer):
    """tests/support/pgserver's throwaway server, listening on the pg host's address only."""

    def __init__(self, hosts: Hosts) -> None:
        super().__init__(port=PG_PORT)
        self.net = hosts
        with open(self.data / "pg_hba.conf", "a") as f:
            f.write(f"host all all {hosts.subnet} scram-sha-256\n")

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        if tool != "pg_ctl" or "start" not in args:
            return super()._run(tool, *args, check=check)
        argv = ["ip", "netns", "exec", self.net.ns("pg"), "runuser", "-u", "postgres", "--",
                str(self.bindir / tool), *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise RuntimeError(f"{tool} failed: {r.stdout}{r.stderr}")
        return r

    def start(self) -> None:
        opts = (f"-c listen_addresses={self.net.addr('pg')} -p {self.port} -k {self.root} "
                "-c max_connections=100 -c shared_buffers=32MB")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w",
                  "-t", "60", "start")
        self.running = True

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://zonegate@{self.net.addr('pg')}:{self.port}/{db}"


HAPROXY_CFG = """\
global
    maxconn 512
    stats socket {sock} mode 600 level user

defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 10s
    retries 3
    option redispatch
    option forwardfor

frontend s3
    bind {lb}:{lb_port}
    http-request set-header X-Forwarded-Proto http
    default_backend gateways

backend gateways
    balance roundrobin
    option httpchk GET /health/ready
    http-check expect status 200
    default-server inter 300ms fall 2 rise 2 on-marked-down shutdown-sessions
{servers}
"""


@pytest.fixture
def hosts():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    for tool, pkg in (("ip", "iproute2"), ("haproxy", "haproxy"), ("runuser", "util-linux")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian package {pkg})")
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    h = Hosts(["client", "lb", "pg", "gw0", "gw1", *(f"n{i}" for i in range(NODES))])
    try:
        h.create()
    except subprocess.CalledProcessError as e:
        h.remove()
        pytest.skip(f"cannot make network namespaces here: {e.stderr.decode().strip()}")
    yield h
    h.remove()


def test_boto3_through_haproxy_while_gateways_are_killed(tmp_path, hosts):
    pg = HostPg(hosts)
    procs: list[subprocess.Popen] = []
    mg: MultiGateway | None = None
    try:
        pg.start()
        gws = [GatewayProc(tmp_path, i, host=hosts.addr(f"gw{i}"), port=GW_PORT,
                           netns=hosts.ns(f"gw{i}")) for i in range(2)]
        mg = MultiGateway(tmp_path, pg.url(), password_file=str(pg.password_file),
                          gateway_options={"trusted_proxies": [f"{hosts.addr('lb')}/32"]},
                          node_cluster=HostNodes(tmp_path / "nodes", hosts), gateway_procs=gws,
                          probe=lambda fn: hosts.call("client", fn))
        mg.start()
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(HAPROXY_CFG.format(
            lb=hosts.addr("lb"), lb_port=LB_PORT, sock=tmp_path / "haproxy.sock",
            servers="\n".join(f"    server gw{g.index} {g.host}:{g.port} check" for g in gws)))
        with open(tmp_path / "haproxy.log", "ab") as logf:
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", hosts.ns("lb"), "haproxy", "-db", "-f", str(cfg)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                start_new_session=True))
        run_workload(mg, hosts, tmp_path)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        if mg is not None:
            mg.stop()
        pg.destroy()


def run_workload(mg: MultiGateway, hosts: Hosts, tmp_path: Path) -> None:
    endpoint = f"http://{hosts.addr('lb')}:{LB_PORT}"

    def client() -> Any:
        return boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, connect_timeout=3, read_timeout=20,
                          retries={"max_attempts": 12, "mode": "standard"}, proxies={}))

    assert hosts.call("client", lambda: wait_ready(client))
    hosts.call("client", lambda: client().create_bucket(Bucket="ha-bucket"))
    stop = threading.Event()
    acked: dict[str, str] = {}
    errors: list[BaseException] = []
    retries = [0]
    lock = threading.Lock()

    def worker(w: int) -> None:
        cl = client()
        rng = random.Random(w)
        mine: list[str] = []
        i = 0
        while not stop.is_set():
            try:
                key = f"w{w}/{i:05d}"
                data = rng.randbytes(rng.choice((16 << 10, 200 << 10, 1 << 20)))
                r = cl.put_object(Bucket="ha-bucket", Key=key, Body=data)
                with lock:
                    acked[key] = hashlib.md5(data).hexdigest()
                    retries[0] += r["ResponseMetadata"]["RetryAttempts"]
                mine.append(key)
                if i % 2:
                    k = rng.choice(mine)
                    g = cl.get_object(Bucket="ha-bucket", Key=k)
                    assert hashlib.md5(g["Body"].read()).hexdigest() == acked[k], k
                    with lock:
                        retries[0] += g["ResponseMetadata"]["RetryAttempts"]
            except BaseException as e:  # any error reaching the client fails the test
                errors.append(e)
                return
            i += 1

    def progress(n: int) -> None:
        """Wait (polling) until n more writes were acknowledged, or a worker failed."""
        target = len(acked) + n
        deadline = time.monotonic() + 60
        while len(acked) < target and not errors and time.monotonic() < deadline:
            time.sleep(0.1)

    sock = tmp_path / "haproxy.sock"
    ex = ThreadPoolExecutor(4, initializer=enter_netns, initargs=(hosts.ns("client"),))
    futs = [ex.submit(worker, w) for w in range(4)]
    try:
        for victim in (0, 1):
            progress(8)                      # writes flow through both gateways
            n_before = len(acked)
            mg.kill_gateway(victim)          # SIGKILL, master and worker
            progress(6)                      # and go on through the other one
            assert len(acked) > n_before or errors, "no write went through meanwhile"
            mg.start_gateway(victim)         # same host and port; HAProxy brings it back
            assert wait_up(sock, f"gw{victim}"), f"HAProxy never saw gw{victim} back"
        progress(8)
    finally:
        stop.set()
        for f in futs:
            f.result()
        ex.shutdown()
    assert not errors, f"the client saw errors: {errors[:3]!r}\n{mg.logs()}"
    assert len(acked) > 20

    def read_all() -> int:
        cl = client()
        for key, md5 in acked.items():
            body = cl.get_object(Bucket="ha-bucket", Key=key)["Body"].read()
            assert hashlib.md5(body).hexdigest() == md5, key
        listed = [o["Key"] for page in cl.get_paginator("list_objects_v2").paginate(Bucket="ha-bucket")
                  for o in page.get("Contents", [])]
        assert set(acked) <= set(listed)
        return len(listed)
    listed = hosts.call("client", read_all)
    print(f"acknowledged {len(acked)} writes, all read back ({listed} listed); "
          f"{retries[0]} retries seen by the client")


def wait_up(sock: Path, server: str, timeout: float = 30.0) -> bool:
    """Poll HAProxy's stats socket until `server` of the backend is UP (checks passed)."""
    import socket as _socket
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with _socket.socket(_socket.AF_UNIX) as s:
                s.settimeout(5)
                s.connect(str(sock))
                s.sendall(b"show stat\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        except OSError:
            data = b""
        for line in data.decode(errors="replace").splitlines():
            f = line.split(",")
            if len(f) > 17 and f[0] == "gateways" and f[1] == server and f[17] == "UP":
                return True
        time.sleep(0.1)
    return False


def wait_ready(client: Any, timeout: float = 30.0) -> bool:
    """HAProxy up and a gateway behind it answering."""
    cl = client()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            cl.list_buckets()
            return True
        except Exception:
            time.sleep(0.2)
    return False
