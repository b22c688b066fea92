"""A small real cluster for gateway tests: node processes (tests/support/nodeproc.py) plus
`zonegate serve` as a subprocess on a free port, and a boto3 client for it.

k=4, m=2 over 6 nodes keeps start-up and memory small; the code paths are those of 8+2.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from erasure.config import write_config
from tests.support.nodeproc import MALLOC_ENV, NodeCluster
from zonestore.emulated import Geometry

ACCESS_KEY = "GWTESTACCESSKEY00001"
SECRET_KEY = "gwTestSecretKey/0123456789abcdefghijklm"
OTHER_ACCESS = "GWTESTACCESSKEY00002"
OTHER_SECRET = "gwTestSecretKey/other0123456789abcdefgh"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen | None, timeout: float = 20.0) -> None:
    """SIGTERM a `zonegate serve` (its whole process group), SIGKILL it if it lingers."""
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Gateway:
    """Nodes + one `zonegate serve` process under root."""

    def __init__(self, root: Path, *, nodes: int = 6, k: int = 4, m: int = 2,
                 workers: int = 1, segment_size: int = 1024 * 1024,
                 gateway_options: dict[str, Any] | None = None,
                 geometry: Geometry | None = None, node_args: Sequence[str] = (),
                 config_nodes: int | None = None, drives_per_node: int = 1,
                 erasure_options: dict[str, Any] | None = None) -> None:
        self.root = Path(root)
        # node processes beyond the first `config_nodes` run but are not in the cluster file
        # (nodes a test adds with `zonegate layout node add`)
        self.config_nodes = nodes if config_nodes is None else config_nodes
        self.erasure_options = dict(erasure_options or {})
        self.nodes = NodeCluster(self.root / "nodes", nodes, drives_per_node=drives_per_node,
                                 secret="gw-test-secret", geometry=geometry,
                                 extra_args=node_args)
        self.k, self.m, self.workers, self.segment_size = k, m, workers, segment_size
        self.gateway_options = dict(gateway_options or {})
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.config_path = self.root / "zonegate.toml"
        self.meta_path = self.root / "gateway" / "meta.sqlite"
        self.log_path = self.root / "gateway.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Gateway:
        self.nodes.start()
        self.port = free_port()
        write_config(self.config_path, {
            "secret": self.nodes.secret,
            "erasure": {"k": self.k, "m": self.m, "segment_size": self.segment_size,
                        "state_dir": str(self.root / "erasure"), **self.erasure_options},
            "gateway": {"listen": f"127.0.0.1:{self.port}", "metadata": str(self.meta_path),
                        **self.gateway_options},
            "users": [{"name": "alice", "access_key": ACCESS_KEY, "secret_key": SECRET_KEY},
                      {"name": "bob", "access_key": OTHER_ACCESS, "secret_key": OTHER_SECRET}],
            "nodes": [{"id": nid, "url": url, "drives": [str(d) for d in
                                                          self.nodes.drive_paths(i)]}
                      for i, (nid, url) in enumerate(zip(self.nodes.ids, self.nodes.urls,
                                                         strict=True))
                      if i < self.config_nodes],
        })
        self.start_gateway()
        return self

    def start_gateway(self, env: dict[str, str] | None = None) -> None:
        env = {**os.environ, **MALLOC_ENV, "PYTHONUNBUFFERED": "1", **(env or {})}
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--config", str(self.config_path),
                 "--workers", str(self.workers), "--log-level", "info"],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with _NO_PROXY.open(self.endpoint + "/", timeout=2):
                    pass
            except urllib.error.HTTPError:
                return  # any S3 answer (403 for anonymous) means it is up
            except OSError:
                time.sleep(0.1)
                continue
            return
        raise RuntimeError(f"gateway not up after 60 s:\n{self.log_tail()}")

    def stop_gateway(self) -> None:
        stop_group(self.proc)
        self.proc = None

    def stop(self) -> None:
        self.stop_gateway()
        self.nodes.stop()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def client(self, access: str = ACCESS_KEY, secret: str = SECRET_KEY, **cfg: Any) -> Any:
        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=access,
            aws_secret_access_key=secret, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                          **cfg))


def archives_by_node(g: Gateway) -> dict[str, set[str]]:
    """Node id -> the fragment archive record ids it holds (the signed node listing API)."""
    import json
    from urllib.parse import urlencode
    out: dict[str, set[str]] = {}
    for i, url in enumerate(g.nodes.urls):
        ids = out.setdefault(g.nodes.ids[i], set())
        after = ""
        while True:
            q = {"prefix": "", "after": after, "limit": "1000"}
            req = urllib.request.Request(f"{url}/v1/records?{urlencode(q)}",
                                         headers=g.nodes.headers(i, "GET", "/v1/records", q))
            with _NO_PROXY.open(req, timeout=10) as resp:
                doc = json.load(resp)
            ids.update(r["id"] for r in doc["records"])
            if not doc.get("next"):
                break
            after = doc["next"]
    return out


def archive_ids(g: Gateway) -> set[str]:
    """Every fragment archive record id on every node."""
    return set().union(*archives_by_node(g).values())


def wait_for(pred: Any, timeout: float = 20.0) -> bool:
    """Poll `pred` until true or `timeout`; the pause grows from 0.05 s to 0.25 s, as many
    predicates list every node's records: asked ten times a second they slow what they
    wait for."""
    deadline = time.monotonic() + timeout
    pause = 0.05
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(0.25, pause * 1.5)
    return bool(pred())


async def until(cond: Any, what: str, seconds: float = 30.0, pause: float = 0.05) -> None:
    """Await `cond()` (a coroutine function) until true; AssertionError naming `what` after
    `seconds`."""
    import asyncio
    deadline = time.monotonic() + seconds
    while not await cond():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(pause)


def signed_request(g: Gateway, method: str, path: str, *, host: str | None = None,
                   headers: dict[str, str] | None = None, body: bytes = b"",
                   query: str = "") -> tuple[int, dict[str, str], bytes]:
    """A raw SigV4-signed request (botocore's signer) sent to the gateway on 127.0.0.1,
    optionally with another Host header (virtual-host-style addressing)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    host = host or f"127.0.0.1:{g.port}"
    url = f"http://{host}{path}" + (f"?{query}" if query else "")
    areq = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    areq.headers["Host"] = host
    areq.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(areq)
    real = urllib.request.Request(f"http://127.0.0.1:{g.port}{path}" +
                                  (f"?{query}" if query else ""), data=body or None,
                                  method=method, headers=dict(areq.headers.items()))
    try:
        with _NO_PROXY.open(real, timeout=30) as resp:
            return resp.status, dict(resp.headers.items()), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers.items()), e.read()


@contextlib.contextmanager
def serving(g: Gateway) -> Iterator[Gateway]:
    """Start the gateway, hand it to the test, stop it; then check that no request turned into
    an internal error (a 500) in its log."""
    try:
        g.start()
        yield g
    finally:
        g.stop()
    assert "internal error" not in g.log_path.read_text(errors="replace"), g.log_tail()


def put_many(s3: Any, bucket: str, items: Any, threads: int = 8) -> list[Any]:
    """PUT (key, body) pairs concurrently (a test's set-up: serial PUTs spend their time
    waiting on round trips); the responses in order."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(threads) as ex:
        return list(ex.map(lambda kb: s3.put_object(Bucket=bucket, Key=kb[0], Body=kb[1]),
                           items))
