"""Several real `zonegate serve` processes on one metadata store and one set of nodes.

Each gateway is its own process group on its own port with its own config file (the same
nodes, secret, users and `[gateway] metadata`; its own `listen` and `[erasure] state_dir`), so
a test can send requests to any of them, SIGKILL one and start it again. The metadata target is
a PostgreSQL URL (tests/support/pgserver.py) or, for a single host, a SQLite path.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from erasure.config import write_config
from tests.support.gwcluster import (
    ACCESS_KEY,
    OTHER_ACCESS,
    OTHER_SECRET,
    SECRET_KEY,
    free_port,
    stop_group,
)
from tests.support.nodeproc import MALLOC_ENV, NodeCluster

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def ready(endpoint: str) -> bool:
    """Whether the gateway at endpoint answers /health/ready with 200."""
    try:
        with _NO_PROXY.open(endpoint + "/health/ready", timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


class GatewayProc:
    """One `zonegate serve` of a MultiGateway (`netns`: the network namespace it runs in)."""

    def __init__(self, root: Path, index: int, host: str = "127.0.0.1", port: int = 0,
                 netns: str | None = None) -> None:
        self.index = index
        self.host = host
        self.netns = netns
        self.port = port
        self.root = root
        self.config_path = root / f"gw{index}.toml"
        self.log_path = root / f"gw{index}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


class MultiGateway:
    """Nodes + `gateways` gateway processes sharing the metadata store `metadata`."""

    def __init__(self, root: Path, metadata: str, *, gateways: int = 2, nodes: int = 6,
                 k: int = 4, m: int = 2, workers: int = 1, segment_size: int = 1024 * 1024,
                 gateway_options: dict[str, Any] | None = None,
                 password_file: str | None = None, node_cluster: NodeCluster | None = None,
                 gateway_procs: list[GatewayProc] | None = None,
                 probe: Callable[[Callable[[], Any]], Any] | None = None) -> None:
        """node_cluster / gateway_procs: nodes and gateways placed elsewhere than 127.0.0.1
        (network namespaces); probe(fn) runs fn where the gateways can be reached."""
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.metadata = metadata
        self.nodes = node_cluster or NodeCluster(self.root / "nodes", nodes, drives_per_node=1,
                                                 secret="gw-test-secret")
        self.k, self.m, self.workers, self.segment_size = k, m, workers, segment_size
        self.gateway_options = dict(gateway_options or {})
        if password_file:
            self.gateway_options["metadata_password_file"] = password_file
        self.gws = gateway_procs or [GatewayProc(self.root, i) for i in range(gateways)]
        self.probe = probe or (lambda fn: fn())

    def __enter__(self) -> MultiGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def config(self, gw: GatewayProc) -> dict[str, Any]:
        return {
            "secret": self.nodes.secret,
            "erasure": {"k": self.k, "m": self.m, "segment_size": self.segment_size,
                        "state_dir": str(self.root / f"erasure{gw.index}")},
            "gateway": {"listen": f"{gw.host}:{gw.port}", "metadata": self.metadata,
                        **self.gateway_options},
            "users": [{"name": "alice", "access_key": ACCESS_KEY, "secret_key": SECRET_KEY},
                      {"name": "bob", "access_key": OTHER_ACCESS, "secret_key": OTHER_SECRET}],
            "nodes": [{"id": nid, "url": url, "drives": [str(d) for d in
                                                          self.nodes.drive_paths(i)]}
                      for i, (nid, url) in enumerate(zip(self.nodes.ids, self.nodes.urls,
                                                         strict=True))],
        }

    def start(self) -> MultiGateway:
        self.nodes.start()
        try:
            for gw in self.gws:
                gw.port = gw.port or free_port()
                write_config(gw.config_path, self.config(gw))
                self.start_gateway(gw.index)
        except BaseException:
            self.stop()
            raise
        return self

    def start_gateway(self, i: int, timeout: float = 60.0) -> None:
        gw = self.gws[i]
        env = {**os.environ, **MALLOC_ENV, "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(gw.config_path),
                "--workers", str(self.workers), "--log-level", "info"]
        if gw.netns:
            argv = ["ip", "netns", "exec", gw.netns, *argv]
        with open(gw.log_path, "ab") as logf:
            gw.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if gw.proc.poll() is not None:
                raise RuntimeError(f"gateway {i} exited {gw.proc.returncode}:\n{gw.log_tail()}")
            if self.probe(lambda: ready(gw.endpoint)):
                return
            time.sleep(0.1)
        raise RuntimeError(f"gateway {i} not ready after {timeout:g} s:\n{gw.log_tail()}")

    def kill_gateway(self, i: int) -> None:
        """SIGKILL gateway i's whole process group (master and workers), like a crash."""
        gw = self.gws[i]
        if gw.proc is not None:
            if gw.proc.poll() is None:
                os.killpg(gw.proc.pid, signal.SIGKILL)
            gw.proc.wait()
        gw.proc = None

    def stop_gateway(self, i: int) -> None:
        gw = self.gws[i]
        stop_group(gw.proc)
        gw.proc = None

    def stop(self) -> None:
        for gw in self.gws:
            self.stop_gateway(gw.index)
        self.nodes.stop()

    def client(self, i: int, access: str = ACCESS_KEY, secret: str = SECRET_KEY,
               **cfg: Any) -> Any:
        cfg.setdefault("retries", {"max_attempts": 1})
        return boto3.client(
            "s3", endpoint_url=self.gws[i].endpoint, aws_access_key_id=access,
            aws_secret_access_key=secret, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, max_pool_connections=32, **cfg))

    def logs(self) -> str:
        return "\n".join(f"--- gateway {gw.index}\n{gw.log_tail()}" for gw in self.gws)
