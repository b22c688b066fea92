"""A real local cluster for end-to-end tests: `zonegate dev` as a subprocess.

The cluster runs exactly as a user runs it (12 `zonegate node` processes and `zonegate serve`)
on free ports with a temporary data directory and small sparse drives; tests talk to it with
real clients (boto3, the aws cli, s3fs, raw sockets). `stop()` sends SIGTERM, as Ctrl-C would.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from gateway.cli.devchild import child_preexec

ACCESS_KEY = "ZGTESTACCESSKEY00001"
SECRET_KEY = "zgTestSecretKey/0123456789abcdefghijklmn"
REGION = "us-east-1"
READY_BANNER = "ZoneGate is ready"
MiB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_port() -> int:
    """A free port for a cluster's gateway, with the ports its 12 nodes get first (+101..+112) free too.

    Taken below the kernel's ephemeral range (32768+), where outgoing connections - of which
    the machine makes many - would otherwise grab the ports between our check and the bind."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10_000, 32_000)
        if all(_free(p) for p in (port, *range(port + 101, port + 113))):
            return port
    return free_port()


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class ClusterError(RuntimeError):
    pass


class DevCluster:
    """One `zonegate dev` process and everything it starts."""

    def __init__(self, data: Path, *, nodes: int = 12, tls: bool = False, zones: int = 48,
                 zone_size: str = "32M", workers: int = 2, port: int | None = None) -> None:
        self.data = Path(data)
        self.nodes = nodes
        self.tls = tls
        self.zones = zones
        self.zone_size = zone_size
        self.workers = workers
        self.port = port or cluster_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._clients: list = []
        self.log = self.data.parent / f"{self.data.name}-dev-{self.port}.log"

    # -- lifecycle
    @property
    def config_path(self) -> Path:
        return self.data / "zonegate.toml"

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def cert(self) -> Path | None:
        return self.data / "tls" / "cert.pem" if self.tls else None

    @property
    def ca(self) -> Path | None:
        """The dev CA that signed the server certificate: what clients are told to trust."""
        return self.data / "tls" / "ca.pem" if self.tls else None

    @property
    def verify(self) -> str | bool:
        """What boto3's `verify=` takes: the self-signed certificate's path, or False for HTTP."""
        return str(self.cert) if self.tls else False

    def env(self) -> dict[str, str]:
        return {**os.environ, "ZONEGATE_ACCESS_KEY": ACCESS_KEY,
                "ZONEGATE_SECRET_KEY": SECRET_KEY, "PYTHONUNBUFFERED": "1"}

    def start(self, timeout: float = 240.0, extra: tuple[str, ...] = ()) -> DevCluster:
        argv = [sys.executable, "-m", "gateway.cli", "dev", "--data", str(self.data),
                "--port", str(self.port), "--nodes", str(self.nodes), "--zones", str(self.zones),
                "--zone-size", self.zone_size, "--workers", str(self.workers), "--grace", "15"]
        if self.tls:
            argv.append("--tls")
        argv += extra
        self.data.parent.mkdir(parents=True, exist_ok=True)
        offset = len(self.output())  # a restart appends to the same log
        parent = os.getpid()
        with open(self.log, "ab") as out:
            # Should pytest itself be killed, the launcher gets SIGTERM and stops its cluster.
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env(),
                                         preexec_fn=lambda: child_preexec(parent))
        deadline = time.monotonic() + timeout
        while True:
            text = self.output()[offset:]
            if READY_BANNER in text:
                return self
            if self.proc.poll() is not None:
                raise ClusterError(f"zonegate dev exited with {self.proc.returncode}:\n"
                                   f"{text[-4000:]}\n{self.child_logs()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ClusterError(f"zonegate dev not ready after {timeout:g}s:\n{text[-4000:]}")
            time.sleep(0.2)

    def stop(self, timeout: float = 90.0) -> int | None:
        """SIGTERM, as Ctrl-C would; SIGKILL everything left if that fails."""
        if self.proc is None:
            return None
        # Idle keep-alive connections (TLS ones above all) would hold up the server's stop.
        for c in self._clients:
            c.close()
        self._clients.clear()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.child_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        code = self.proc.returncode
        self.proc = None
        return code

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def child_logs(self, lines: int = 20) -> str:
        out = []
        for log in sorted((self.data / "logs").glob("*.log"))[:3]:
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def child_pids(self) -> list[int]:
        """Processes started for this cluster: their command line names its config file, or
        (the gateway's uvicorn workers, started by multiprocessing) their environment does."""
        needle = str(self.config_path).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if needle in (entry / "cmdline").read_bytes() or \
                        needle in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    # -- clients
    def client(self, *, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY,
               **config: object):
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=access_key,
            aws_secret_access_key=secret_key, region_name=REGION, verify=self.verify,
            config=Config(retries={"max_attempts": 2, "mode": "standard"}, **config),
        )
        self._clients.append(client)
        return client

    def aws_env(self, config_file: Path) -> dict[str, str]:
        """Environment for the aws cli (its config file kept out of the user's home)."""
        config_file.write_text("[default]\nregion = us-east-1\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_DEFAULT_REGION=REGION, AWS_CONFIG_FILE=str(config_file),
                   AWS_SHARED_CREDENTIALS_FILE=str(config_file.with_suffix(".creds")))
        if self.cert:
            env["AWS_CA_BUNDLE"] = str(self.cert)
        return env


def make_file(path: Path, size: int, seed: int = 0) -> str:
    """Write `size` bytes that differ in every MiB (so swapped parts are caught); return MD5."""
    block = hashlib.shake_256(f"zonegate-{seed}".encode()).digest(MiB)
    md5 = hashlib.md5()
    with open(path, "wb") as f:
        i = 0
        while size > 0:
            chunk = (struct.pack(">QQ", seed, i) + block[16:])[:size]
            f.write(chunk)
            md5.update(chunk)
            size -= len(chunk)
            i += 1
    return md5.hexdigest()


def file_md5(path: Path) -> str:
    md5 = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(MiB):
            md5.update(chunk)
    return md5.hexdigest()


def multipart_etag(part_md5s: list[bytes]) -> str:
    return f'"{hashlib.md5(b"".join(part_md5s)).hexdigest()}-{len(part_md5s)}"'


def start_cluster(tmp_path_factory, name: str, **kwargs: object):
    """Body of a module-scoped fixture: yields a started DevCluster, stops it afterwards."""
    cluster = DevCluster(tmp_path_factory.mktemp(name) / "data", **kwargs)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
