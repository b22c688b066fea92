"""Start and stop real storage-node processes on emulated drives, for tests.

```python
with NodeCluster(tmp_path, 3, drives_per_node=2, secret="s") as cluster:
    cluster.urls            # ["http://127.0.0.1:41234", ...]
    cluster.ids             # ["node00", "node01", "node02"]
    cluster.drive_paths(0)  # [tmp_path/"node00"/"d0", tmp_path/"node00"/"d1"]
    cluster.headers(0, "GET", "/v1/stats")  # signed request headers
    cluster.kill(1)         # SIGKILL, like a crash
    cluster.restart(1)      # same id, drives and port; returns once ready
```
Each node is `python -m zonestore.node` (forked from a process that has done its imports,
tests/support/nodezygote.py; `ip netns exec` for a node in a namespace) with its own log file
(`cluster.log_path(i)`), the allocator settings of the Makefile, a port chosen by the node itself (port 0, read back from a
port file: no race with other test runs) and kept across restarts. Leaving the `with` block
stops every node (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlencode

from gateway.server.serve import MALLOC_ENV
from tests.support.nodezygote import ForkedNode, spawn_node
from zonestore.emulated import Geometry, create_emulated_drive
from zonestore.nodeauth import sign_headers

MiB = 1 << 20
# Small sparse drives: 32 zones of 32 MiB (1 GiB each), the default limits of an SMR drive.
TEST_GEOMETRY = Geometry(nr_zones=32, zone_size=32 * MiB, zone_capacity=32 * MiB)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


class NodeStartError(RuntimeError):
    """A node did not become ready; the message ends with the tail of its log."""


class NodeProcess:
    """One node of a NodeCluster: its id, drives, port and (while running) its process."""

    def __init__(self, root: Path, index: int, node_id: str, drives: list[Path]) -> None:
        self.index = index
        self.node_id = node_id
        self.drives = drives
        self.root = root
        self.port = 0
        self.proc: subprocess.Popen | ForkedNode | None = None
        self.log_path = root / f"{node_id}.log"
        self.port_file = root / f"{node_id}.port"
        self.host = "127.0.0.1"
        self.netns: str | None = None  # run inside this network namespace (a test's host)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class NodeCluster:
    """N node processes on emulated drives under `root` (see the module docstring)."""

    def __init__(self, root: str | Path, n: int = 1, *, drives_per_node: int = 2,
                 secret: str = "test-cluster-secret", geometry: Geometry | None = None,
                 extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 start_timeout: float = 60.0, id_format: str = "node{:02d}",
                 tuned_malloc: bool = True) -> None:
        self.root = Path(root)
        self.secret = secret
        self.geometry = geometry or TEST_GEOMETRY
        self.extra_args = list(extra_args)
        self.start_timeout = start_timeout
        # tuned_malloc=False leaves glibc's defaults, under which RSS follows live memory (the
        # tuned settings keep up to 256 MiB of freed heap on purpose).
        base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        self.env = {**base, **(MALLOC_ENV if tuned_malloc else {}), "PYTHONUNBUFFERED": "1",
                    **(env or {})}
        self.secret_file = self.root / "cluster.secret"
        self.nodes = [
            NodeProcess(self.root, i, id_format.format(i),
                        [self.root / id_format.format(i) / f"d{j}"
                         for j in range(drives_per_node)])
            for i in range(n)
        ]

    # --------------------------------------------------------------- life cycle

    def __enter__(self) -> NodeCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Create the drives (once) and start every node; returns when all are ready."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.secret_file.write_text(self.secret + "\n")
        for node in self.nodes:
            for d in node.drives:
                if not d.exists():
                    create_emulated_drive(d, self.geometry)
        try:
            for node in self.nodes:
                self._spawn(node)
            for node in self.nodes:
                self._wait_ready(node)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM every running node, then SIGKILL what has not exited after 15 s."""
        for node in self.nodes:
            if node.running:
                node.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for node in self.nodes:
            if node.proc is None:
                continue
            try:
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait()

    def kill(self, i: int) -> None:
        """SIGKILL node i (a crash: nothing is flushed or closed) and reap it."""
        node = self.nodes[i]
        if node.running:
            node.proc.kill()
        if node.proc is not None:
            node.proc.wait()

    def terminate(self, i: int, timeout: float = 30.0) -> int:
        """SIGTERM node i (graceful shutdown); returns its exit code."""
        node = self.nodes[i]
        if node.running:
            node.proc.send_signal(signal.SIGTERM)
        return node.proc.wait(timeout) if node.proc is not None else 0

    def restart(self, i: int, *, degraded: bool = False) -> None:
        """Start node i again (after kill/terminate, or stopping it first) on the same port;
        `degraded`: a node answering "degraded" (a failed or new drive) counts as started."""
        node = self.nodes[i]
        if node.running:
            self.terminate(i)
        self._spawn(node)
        self._wait_ready(node, ("ready", "degraded") if degraded else ("ready",))

    # ------------------------------------------------------------------ access

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def ids(self) -> list[str]:
        return [n.node_id for n in self.nodes]

    def drive_paths(self, i: int) -> list[Path]:
        return list(self.nodes[i].drives)

    def pid(self, i: int) -> int:
        proc = self.nodes[i].proc
        assert proc is not None, f"node {i} was never started"
        return proc.pid

    def log_path(self, i: int) -> Path:
        return self.nodes[i].log_path

    def headers(self, i: int, method: str, path: str,
                query: Mapping[str, str] | None = None, body: bytes | None = None,
                *, now: float | None = None) -> dict[str, str]:
        """Signed headers for a request to node i, bound to it (`body=None`: streamed,
        UNSIGNED-PAYLOAD)."""
        return sign_headers(self.secret, method, path, query, body, node=self.nodes[i].node_id,
                            now=now)

    def proc_status(self, i: int) -> dict[str, int]:
        """Numeric fields of /proc/<pid>/status in kB (VmRSS, VmHWM, ...)."""
        out: dict[str, int] = {}
        for line in Path(f"/proc/{self.pid(i)}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[key] = int(parts[0])
        return out

    # --------------------------------------------------------------- internals

    def _spawn(self, node: NodeProcess) -> None:
        with contextlib.suppress(FileNotFoundError):
            node.port_file.unlink()
        argv = [sys.executable, "-m", "zonestore.node", "--id", node.node_id,
                "--listen", f"{node.host}:{node.port}", "--secret-file", str(self.secret_file),
                "--port-file", str(node.port_file)]
        for d in node.drives:
            argv += ["--drive", str(d)]
        argv += self.extra_args
        if not node.netns:  # forked from a process that has done the imports already
            node.proc = spawn_node(argv[3:], str(node.log_path), self.env)
            return
        argv = ["ip", "netns", "exec", node.netns, *argv]
        with open(node.log_path, "ab") as logf:
            node.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)

    def _wait_ready(self, node: NodeProcess, statuses: tuple[str, ...] = ("ready",)) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if not node.running:
                raise NodeStartError(f"{node.node_id} exited with code {node.proc.returncode} "
                                     f"during start-up:\n{node.log_tail()}")
            if node.port == 0 or not node.port_file.exists():
                try:
                    node.port = int(node.port_file.read_text())
                except (OSError, ValueError):
                    time.sleep(0.05)
                    continue
            if self._ready(node, statuses):
                return
            time.sleep(0.05)
        raise NodeStartError(f"{node.node_id} not ready after {self.start_timeout} s:\n"
                             f"{node.log_tail()}")

    def _ready(self, node: NodeProcess, statuses: tuple[str, ...] = ("ready",)) -> bool:
        path = "/health/ready"
        req = urllib.request.Request(node.url + path,
                                     headers=sign_headers(self.secret, "GET", path))
        try:
            with _NO_PROXY.open(req, timeout=2) as resp:
                return json.loads(resp.read()).get("status") in statuses
        except (urllib.error.URLError, OSError, ValueError):
            return False


async def node_request(session, cluster: NodeCluster, i: int, method: str, path: str, *,
                       query: Mapping[str, str] | None = None, body: bytes | None = None,
                       headers: Mapping[str, str] | None = None, sign_body: bool = True,
                       signed: bool = True) -> tuple[int, Mapping[str, str], bytes]:
    """One request to node i through an aiohttp ClientSession, the path sent exactly as given
    (no normalisation, so tests can send path tricks); returns (status, headers, body).
    Writes get a random `nonce` query parameter, as the node refuses a replayed write."""
    from yarl import URL

    if method in ("PUT", "DELETE") and signed:
        query = {**(query or {}), "nonce": secrets.token_hex(8)}
    h: dict[str, str] = {}
    if signed:
        h.update(cluster.headers(i, method, path, query,
                                 (body or b"") if sign_body else None))
    h.update(headers or {})
    qs = urlencode(query or {})
    url = URL(cluster.nodes[i].url + path + (f"?{qs}" if qs else ""), encoded=True)
    async with session.request(method, url, data=body, headers=h) as resp:
        return resp.status, resp.headers, await resp.read()
