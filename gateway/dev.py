"""`zonegate dev`: a whole local cluster in one command (what `make run` starts).

It writes a cluster configuration under the data directory on first start (random cluster
secret and root credentials, or ZONEGATE_ACCESS_KEY / ZONEGATE_SECRET_KEY), creates the
emulated zoned drives, starts one `zonegate node` process per node and the gateway
(`zonegate serve`), waits until all of them answer, prints the endpoint and credentials, and
supervises them until Ctrl-C or SIGTERM. A restart finds the same configuration and data.

Children never outlive the launcher: each runs in its own process group (so a terminal's
Ctrl-C reaches only the launcher, which then stops the gateway before the nodes), and asks the
kernel for SIGTERM should the launcher die, even by SIGKILL (PR_SET_PDEATHSIG).

A child that dies is started again, after its process group is reaped (the gateway's workers
leave with their master, and whatever lingers is SIGKILLed before a new master binds the
port), with a backoff that doubles from RESTART_DELAY_S up to RESTART_DELAY_MAX_S while it
keeps dying soon after its start; the cluster is never given up.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import http.client
import os
import random
import secrets
import shutil
import signal
import socket
import ssl
import string
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from erasure.config import ClusterConfig
from zonestore.cli import _size as parse_size
from zonestore.emulated import Geometry, create_emulated_drive, is_emulated_drive
from zonestore.nodeauth import sign_headers

CONFIG_NAME = "zonegate.toml"
LOCK_NAME = "zonegate-dev.lock"
ROOT_USER = "root"
DRIVES_PER_NODE = 2
MiB = 1024 * 1024
# glibc's default trim/mmap thresholds make CPython regrow its heap for every large buffer;
# measured to matter 2-12x for the servers (shared/notes/performance.md, Makefile).
MALLOC_ENV = {
    "MALLOC_TRIM_THRESHOLD_": "268435456",
    "MALLOC_TOP_PAD_": "67108864",
    "MALLOC_MMAP_THRESHOLD_": "268435456",
}
READY_BANNER = "ZoneGate is ready"
PR_SET_PDEATHSIG = 1
RESTART_DELAY_S = 0.5
RESTART_DELAY_MAX_S = 30.0
STABLE_S = 60.0  # a child that ran this long before dying is restarted without delay
REAP_S = 8.0  # what the rest of a dead child's group gets after SIGTERM before SIGKILL


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dev", help="run a whole local cluster (nodes + gateway) in one command",
        description="Start a local ZoneGate cluster: node daemons with emulated zoned drives "
                    "and the S3 gateway, all under --data; Ctrl-C stops it, and a restart finds "
                    "the same data. ZONEGATE_ACCESS_KEY / ZONEGATE_SECRET_KEY, when set, are the "
                    "root user's credentials.")
    p.add_argument("--data", default="data", help="data directory (default ./data)")
    p.add_argument("--port", type=int, default=9000, help="S3 port (default 9000)")
    p.add_argument("--host", default="127.0.0.1", help="address the gateway and the nodes bind (default 127.0.0.1)")
    p.add_argument("--nodes", type=int, default=None,
                   help="node daemons, on first start (default 12)")
    p.add_argument("--workers", type=int, default=2, help="gateway worker processes (default 2)")
    p.add_argument("--tls", action="store_true",
                   help="serve HTTPS with a certificate signed by a small CA made under --data "
                        "(trust DIR/tls/ca.pem)")
    p.add_argument("--prometheus", action="store_true",
                   help="also run Prometheus (the `prometheus` binary, when installed) scraping "
                        "every process, configured under DIR/prometheus")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="children's log lines as text (default) or JSON objects")
    g = Geometry()
    p.add_argument("--zones", type=int, default=g.nr_zones,
                   help=f"zones per emulated drive, on first start (default {g.nr_zones})")
    p.add_argument("--zone-size", type=parse_size, default=g.zone_size,
                   help=f"zone size, on first start (default {g.zone_size // MiB}M; sparse)")
    p.add_argument("--recover-metadata", action="store_true",
                   help="rebuild a lost metadata store from the nodes (`zonegate recover-metadata`) "
                        "before the gateway starts")
    p.add_argument("--grace", type=float, default=10.0,
                   help="seconds a child gets after SIGTERM before SIGKILL")
    p.add_argument("--start-timeout", type=float, default=180.0,
                   help="seconds to wait for every process to be ready")
    p.set_defaults(func=cmd_dev)


# ---------------------------------------------------------------------------------- config

def _random_key(n: int, alphabet: str) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class PortClaims:
    """Ports this launcher has chosen, claimed against other `zonegate dev` launchers on the
    machine: a probe alone cannot see a port another cluster has chosen but whose node has not
    bound it yet (two clusters on nearby --ports start at the same time). A claim is an flock
    on DIR/PORT.lock (held until this process exits) naming the cluster and the role."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.gettempdir()) / f"zonegate-dev-ports-{os.getuid()}"
        self.held: dict[int, int] = {}
        self.owner = "?"

    def claim(self, port: int, role: str = "") -> bool:
        if port in self.held:
            return True
        try:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(self.dir / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return True  # no shared directory: the bind probe alone decides
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{role} of the `zonegate dev` cluster in {self.owner}\n".encode())
        self.held[port] = fd
        return True

    def holder(self, port: int) -> str | None:
        """Who claims `port`, when another launcher does."""
        if port in self.held:
            return None
        try:
            fd = os.open(self.dir / f"{port}.lock", os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # nobody holds it
        except BlockingIOError:
            return os.pread(fd, 300, 0).decode(errors="replace").strip() or "another launcher"
        finally:
            os.close(fd)


PORTS = PortClaims()


def _available(host: str, port: int, role: str = "") -> bool:
    return 0 < port <= 65535 and _port_free(host, port) and PORTS.claim(port, role)


def _free_port(host: str, avoid: set[int], role: str = "") -> int:
    """A free port below the kernel's ephemeral range (32768+), where the machine's outgoing
    connections would take it back before the node binds it; the kernel's choice if none."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10_000, 32_000)
        if port not in avoid and _available(host, port, role):
            return port
    while True:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in avoid and PORTS.claim(port, role):
            return port


def _split_url(url: str) -> tuple[str, int]:
    hostport = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def new_config(data: Path, nodes: int, host: str, port: int) -> dict[str, Any]:
    """A fresh cluster configuration (docs/design.md format) with random secrets."""
    if not 1 <= nodes <= 99:
        raise ValueError(f"--nodes must be between 1 and 99, not {nodes}")
    access = os.environ.get("ZONEGATE_ACCESS_KEY") or _random_key(
        20, string.ascii_uppercase + string.digits)
    secret = os.environ.get("ZONEGATE_SECRET_KEY") or _random_key(
        40, string.ascii_letters + string.digits)
    used = {port}
    node_list = []
    for i in range(1, nodes + 1):
        nid = f"node{i:02d}"
        nport = port + 100 + i
        if nport in used or not _available(host, nport, nid):
            nport = _free_port(host, used, nid)
        used.add(nport)
        node_list.append({
            "id": nid,
            "url": f"http://{host}:{nport}",
            "domain": nid,
            "drives": [str(data / nid / f"d{d}") for d in range(DRIVES_PER_NODE)],
        })
    return {
        "secret": secrets.token_hex(32),
        # Absolute, so that nothing depends on the directory `zonegate dev` was started from.
        "erasure": {"state_dir": str(data / "erasure")},
        "gateway": {
            "listen": f"{host}:{port}",
            "metadata": str(data / "gateway" / "meta.sqlite"),
            "region": "us-east-1",
        },
        "users": [{"name": ROOT_USER, "access_key": access, "secret_key": secret}],
        "nodes": node_list,
    }


def refresh_config(cfg: dict[str, Any], host: str, port: int) -> list[str]:
    """Adapt a reused configuration to this start: the gateway's port, node ports that are
    taken by something else, and credentials from the environment. Returns what changed."""
    notes = []
    listen = f"{host}:{port}"
    if cfg.get("gateway", {}).get("listen") != listen:
        cfg.setdefault("gateway", {})["listen"] = listen
    used = {port}
    for node in cfg.get("nodes", []):
        nhost, nport = _split_url(node["url"])
        if nport in used or not _available(nhost, nport, node["id"]):
            new = _free_port(nhost, used, node["id"])
            notes.append(f"{node['id']}: port {nport} is taken, using {new}")
            node["url"] = f"http://{nhost}:{new}"
            nport = new
        used.add(nport)
    env_access = os.environ.get("ZONEGATE_ACCESS_KEY")
    env_secret = os.environ.get("ZONEGATE_SECRET_KEY")
    if env_access or env_secret:
        users = cfg.setdefault("users", [])
        root = next((u for u in users if u.get("name") == ROOT_USER), None)
        if root is None:
            root = {"name": ROOT_USER, "access_key": "", "secret_key": ""}
            users.insert(0, root)
        if env_access and root["access_key"] != env_access:
            root["access_key"] = env_access
            notes.append("root access key taken from ZONEGATE_ACCESS_KEY")
        if env_secret and root["secret_key"] != env_secret:
            root["secret_key"] = env_secret
            notes.append("root secret key taken from ZONEGATE_SECRET_KEY")
    return notes


def write_config(path: Path, cfg: dict[str, Any]) -> None:
    ClusterConfig.from_dict(cfg, source=str(path))  # refuse to write what nodes would refuse
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds secrets
    with os.fdopen(fd, "wb") as f:
        f.write(b"# ZoneGate local cluster, written by `zonegate dev`.\n")
        tomli_w.dump(cfg, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def ensure_drives(cfg: dict[str, Any], geometry: Geometry) -> int:
    made = 0
    for node in cfg["nodes"]:
        for drive in node["drives"]:
            if not is_emulated_drive(drive):
                create_emulated_drive(drive, geometry)
                made += 1
    return made


# ------------------------------------------------------------------------------- processes

_libc = ctypes.CDLL(None, use_errno=True)


def _child_preexec(parent: int) -> None:
    # Runs in the child between fork and exec: die with the launcher, however it dies. The
    # signal follows the *thread* that forked, so the launcher spawns only from its main thread.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(1)


@dataclass
class Child:
    name: str
    argv: list[str]
    log: Path
    proc: Any = None
    starts: list[float] = field(default_factory=list)
    failures: int = 0  # deaths in a row, each soon after its start
    restart_at: float | None = None  # when a dead child is to be started again

    def spawn(self, env: dict[str, str], keep_fds: tuple[int, ...] = ()) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        with open(self.log, "ab") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: "
                      f"{' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                env=env, process_group=0, preexec_fn=lambda: _child_preexec(parent),
                pass_fds=keep_fds,
            )
        self.starts.append(time.monotonic())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, sig: int) -> bool:
        """Signal the child's process group; False when the group is gone."""
        if self.proc is None:
            return False
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def reap_group(self, grace: float) -> None:
        """After the child itself died: SIGTERM what is left of its process group (a
        gateway's workers), SIGKILL it after `grace` seconds, and wait until it is gone."""
        if not self.signal_group(signal.SIGTERM):
            return
        deadline = time.monotonic() + grace
        while self.signal_group(0):
            if time.monotonic() > deadline:
                self.signal_group(signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.1)

    def restart_delay(self, now: float) -> float:
        """How long to wait before starting the dead child again (doubling while it keeps
        dying soon after its start)."""
        if self.starts and now - self.starts[-1] >= STABLE_S:
            self.failures = 0
        self.failures += 1
        if self.failures == 1:
            return 0.0
        return min(RESTART_DELAY_MAX_S, RESTART_DELAY_S * 2 ** (self.failures - 2))

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("    " + t for t in text[-lines:])


def _launcher_alive(lock_fd: int) -> bool:
    """Whether the launcher that wrote its pid into the lock file still runs (then waiting is
    pointless; otherwise its children are on their way out)."""
    try:
        pid = int(os.pread(lock_fd, 32, 0).split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (ValueError, IndexError, OSError):
        return False
    return b"dev" in cmdline.split(b"\0")


def _http_status(url: str, path: str, headers: dict[str, str], timeout: float = 2.0) -> int | None:
    host, port = _split_url(url)
    if url.startswith("https"):
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ssl._create_unverified_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


class Launcher:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data = Path(args.data).resolve()
        self.config_path = self.data / CONFIG_NAME
        self.stopping = 0  # the signal that asked us to stop
        self.children: list[Child] = []
        self.gateway: Child | None = None
        self.cfg: dict[str, Any] = {}
        self.keep_fds: tuple[int, ...] = ()
        self.prometheus: Child | None = None
        self.prometheus_url: str | None = None

    def say(self, msg: str) -> None:
        print(f"zonegate dev: {msg}", flush=True)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stopping = signum

    # -- setup
    def _lock_data(self) -> None:
        """One cluster per data directory: two sets of nodes on the same drives would destroy
        them. The children inherit the locked descriptor, so the lock lasts until the last of
        them has exited, even when the launcher itself was killed."""
        fd = os.open(self.data / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + 15  # a killed launcher's children may still be stopping
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if _launcher_alive(fd) or time.monotonic() > deadline:
                    os.close(fd)
                    raise OSError(f"{self.data} is in use by another `zonegate dev` (or processes "
                                  "it started that are still stopping)") from None
                time.sleep(0.25)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.keep_fds = (fd,)

    def prepare(self) -> None:
        a = self.args
        self.data.mkdir(parents=True, exist_ok=True)
        self._lock_data()
        PORTS.owner = str(self.data)
        if not PORTS.claim(a.port, "the gateway"):
            raise OSError(f"port {a.port} is taken by {PORTS.holder(a.port) or 'another cluster'}"
                          " (choose another with --port)")
        if self.config_path.exists():
            with open(self.config_path, "rb") as f:
                self.cfg = tomllib.load(f)
            n = len(self.cfg.get("nodes", []))
            self.say(f"reusing {self.config_path} ({n} nodes)")
            if a.nodes is not None and n != a.nodes:
                self.say(f"ignoring --nodes {a.nodes}: the cluster was created with {n}")
            for note in refresh_config(self.cfg, a.host, a.port):
                self.say(note)
            meta = Path(self.cfg.get("gateway", {}).get("metadata", ""))
            if meta.name and not meta.exists():
                self._set_aside_stale_wal(meta)
                if not a.recover_metadata:
                    self.say(f"the metadata store {meta} is missing: if the nodes hold data, "
                             "restart with --recover-metadata to rebuild it from them")
        else:
            self.cfg = new_config(self.data, a.nodes or 12, a.host, a.port)
            self.say(f"new cluster: wrote {self.config_path}")
        deadline = time.monotonic() + 5  # a gateway that is still stopping frees it soon
        while not _port_free(a.host, a.port):
            if time.monotonic() > deadline:
                raise OSError(f"port {a.port} on {a.host} is in use (choose another with --port)")
            time.sleep(0.25)
        write_config(self.config_path, self.cfg)
        geometry = Geometry(nr_zones=a.zones, zone_size=a.zone_size, zone_capacity=a.zone_size)
        made = ensure_drives(self.cfg, geometry)
        if made:
            self.say(f"created {made} emulated zoned drives ({a.zones} zones of "
                     f"{a.zone_size // MiB} MiB each, sparse)")
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for k, v in MALLOC_ENV.items():
            self.env.setdefault(k, v)
        exe = [sys.executable, "-m", "gateway.cli"]
        logs = self.data / "logs"
        for node in self.cfg["nodes"]:
            self.children.append(Child(node["id"], exe + [
                "node", "--config", str(self.config_path), "--id", node["id"],
                "--log-format", a.log_format], logs / f"{node['id']}.log"))
        # info: each worker's start and stop (uvicorn writes no line per request here)
        serve = exe + ["serve", "--config", str(self.config_path), "--workers", str(a.workers),
                       "--log-level", "info", "--log-format", a.log_format]
        self.cert = self.ca = None
        if a.tls:
            from gateway.tls import ensure_dev_ca
            self.ca, self.cert, key = ensure_dev_ca(self.data / "tls", (a.host,))
            serve += ["--tls-cert", str(self.cert), "--tls-key", str(key)]
        self.gateway = Child("gateway", serve, logs / "gateway.log")

    def _set_aside_stale_wal(self, meta: Path) -> None:
        # A WAL left behind by a deleted database would be replayed into the new, empty one.
        for suffix in ("-wal", "-shm"):
            stale = meta.with_name(meta.name + suffix)
            if stale.exists():
                aside = stale.with_name(stale.name + f".orphaned-{int(time.time())}")
                stale.rename(aside)
                self.say(f"moved {stale.name} of the missing metadata store aside to {aside.name}")

    def _recover_metadata(self) -> bool:
        argv = [sys.executable, "-m", "gateway.cli", "recover-metadata", "--config",
                str(self.config_path)]
        self.say("rebuilding the metadata store from the nodes: " + " ".join(argv[2:]))
        parent = os.getpid()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=self.env,
                                preexec_fn=lambda: _child_preexec(parent))
        while proc.poll() is None:
            if self.stopping:
                proc.terminate()
                proc.wait()
                return False
            time.sleep(0.2)
        if proc.returncode:
            self.say(f"recover-metadata failed (exit {proc.returncode}); not starting the gateway")
            return False
        return True

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.args.tls else 'http'}://{self.args.host}:{self.args.port}"

    # -- readiness
    def _node_ready(self, node: dict[str, Any]) -> bool:
        headers = sign_headers(self.cfg["secret"], "GET", "/health/ready")
        return _http_status(node["url"], "/health/ready", headers) == 200

    def _wait(self, what: str, children: list[Child], ready: Any) -> bool:
        from zonestore.progress import progress
        with progress(transient=True, stream=sys.stdout) as bar:
            task = bar.add_task(f"waiting for {what}", total=len(children))
            return self._wait_for(what, children, ready,
                                  lambda n: bar.update(task, completed=n))

    def _wait_for(self, what: str, children: list[Child], ready: Any, done: Any) -> bool:
        deadline = time.monotonic() + self.args.start_timeout
        pending = list(children)
        while pending:
            if self.stopping:
                return False
            for c in list(pending):
                if not c.alive():
                    if self._port_stolen(c):
                        continue
                    self.say(f"{c.name} exited during start (code {c.proc.returncode}); "
                             f"last lines of {c.log}:\n{c.tail()}")
                    return False
                if ready(c):
                    pending.remove(c)
                    done(len(children) - len(pending))
            if pending and time.monotonic() > deadline:
                names = ", ".join(c.name for c in pending)
                self.say(f"timed out waiting for {what}: {names} (logs in {self.data / 'logs'})")
                for c in pending[:2]:
                    self.say(f"last lines of {c.log}:\n{c.tail()}")
                return False
            if pending:
                time.sleep(0.25)
        return True

    def _port_stolen(self, c: Child) -> bool:
        """A node that died because another process took its port between our check and its
        bind (ports near a random test port lie in the kernel's ephemeral range): give it
        another port and start it again. Only before the gateway has read the config."""
        node = next((n for n in self.cfg["nodes"] if n["id"] == c.name), None)
        if node is None or len(c.starts) > 3:
            return False
        host, port = _split_url(node["url"])
        if _port_free(host, port):
            return False
        used = {_split_url(n["url"])[1] for n in self.cfg["nodes"]} | {self.args.port}
        new = _free_port(host, used, c.name)
        self.say(f"{c.name}: port {port} was taken by another process, moving it to {new}")
        node["url"] = f"http://{host}:{new}"
        write_config(self.config_path, self.cfg)
        c.spawn(self.env, self.keep_fds)
        return True

    def start(self) -> bool:
        nodes = {n["id"]: n for n in self.cfg["nodes"]}
        for c in self.children:
            c.spawn(self.env, self.keep_fds)
        self.say(f"started {len(self.children)} node daemons, waiting for them")
        if not self._wait("nodes", self.children, lambda c: self._node_ready(nodes[c.name])):
            return False
        if self.args.recover_metadata and not self._recover_metadata():
            return False
        assert self.gateway is not None
        self.gateway.spawn(self.env, self.keep_fds)
        if not self._wait("the gateway", [self.gateway], lambda c: self._gateway_ready()):
            return False
        if self.args.prometheus:
            self._start_prometheus()
        return True

    def _start_prometheus(self) -> None:
        from gateway import promdev
        exe = promdev.binary()
        if exe is None:
            self.say("--prometheus: no `prometheus` binary on PATH (Debian: apt-get install "
                     "prometheus); going on without it")
            return
        host = self.args.host
        port = _free_port(host, {_split_url(n["url"])[1] for n in self.cfg["nodes"]},
                          "prometheus")
        doc = promdev.scrape_config(self.cfg, self.endpoint, ca_file=self.ca)
        listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        argv = promdev.prepare(self.data / "prometheus", doc, listen, exe)
        self.prometheus = Child("prometheus", argv, self.data / "logs" / "prometheus.log")
        self.prometheus.spawn(self.env, self.keep_fds)
        url = f"http://{listen}"
        if self._wait("prometheus", [self.prometheus],
                      lambda c: _http_status(url, "/-/ready", {}) == 200):
            self.prometheus_url = url

    def _gateway_ready(self) -> bool:
        # 200 once the metadata store answers and a write quorum of nodes is reachable; 503
        # until then. (Any other answer: a gateway without operator endpoints, but serving.)
        status = _http_status(self.endpoint, "/health/ready", {})
        return status is not None and status < 500

    def banner(self) -> None:
        root = next(u for u in self.cfg["users"] if u.get("name") == ROOT_USER)
        ak, sk = root["access_key"], root["secret_key"]
        region = self.cfg.get("gateway", {}).get("region", "us-east-1")
        verify = f" --ca-bundle {self.ca}" if self.ca else ""
        aws = "aws"
        venv_aws = Path(sys.executable).with_name("aws")
        if not shutil.which("aws") and venv_aws.exists():
            aws = str(venv_aws)  # the aws cli that `make` installed into the venv
        lines = [
            f"{READY_BANNER}: {len(self.children)} nodes, gateway pid {self.gateway.proc.pid}",
            f"  endpoint:    {self.endpoint}",
            f"  access key:  {ak}",
            f"  secret key:  {sk}",
            f"  region:      {region}",
            f"  data:        {self.data}   (config {self.config_path})",
            f"  logs:        {self.data / 'logs'}",
        ]
        if self.cfg.get("gateway", {}).get("console", True) is not False:
            lines.append(f"  console:     {self.endpoint}/console/   (log in with the keys above)")
        if self.ca:
            lines.append(f"  trust CA:    {self.ca}   (e.g. AWS_CA_BUNDLE / SSL_CERT_FILE)")
        if self.prometheus_url:
            lines.append(f"  prometheus:  {self.prometheus_url}")
        lines += [
            "  try:",
            f"    AWS_ACCESS_KEY_ID={ak} AWS_SECRET_ACCESS_KEY={sk} AWS_DEFAULT_REGION={region} \\",
            f"      {aws} --endpoint-url {self.endpoint}{verify} s3 ls",
            "  Ctrl-C stops the cluster.",
        ]
        print("\n".join(lines), flush=True)

    # -- supervision
    def supervise(self) -> None:
        assert self.gateway is not None
        while not self.stopping:
            time.sleep(0.25)
            for c in [*self.children, self.gateway]:
                if self.stopping:
                    break
                if c.restart_at is not None:
                    if time.monotonic() >= c.restart_at:
                        c.restart_at = None
                        c.spawn(self.env, self.keep_fds)
                    continue
                if c.alive():
                    continue
                code = c.proc.returncode
                # The old group first: a gateway's workers must not keep serving the port.
                c.reap_group(REAP_S)
                delay = c.restart_delay(time.monotonic())
                when = f"in {delay:g}s" if delay else "now"
                self.say(f"{c.name} exited (code {code}); restarting it {when} (log {c.log})")
                if c.failures > 2:
                    self.say(f"last lines of {c.log}:\n{c.tail()}")
                c.restart_at = time.monotonic() + delay

    def _stop(self, group: list[Child]) -> None:
        live = [c for c in group if c.alive()]
        for c in live:
            c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.args.grace
        while any(c.alive() for c in live) and time.monotonic() < deadline:
            time.sleep(0.1)
        for c in live:
            if c.alive():
                self.say(f"{c.name} did not stop within {self.args.grace:g}s: SIGKILL")
        for c in group:
            # Also reaps anything the child left in its group (e.g. worker processes).
            c.signal_group(signal.SIGKILL)
            if c.proc is not None:
                c.proc.wait()

    def stop(self) -> None:
        if self.prometheus is not None:
            self._stop([self.prometheus])
        # The gateway first so that no request is cut off by a node going away under it.
        if self.gateway is not None:
            self._stop([self.gateway])
        self._stop(self.children)


def cmd_dev(args: argparse.Namespace) -> int:
    launcher = Launcher(args)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, launcher._on_signal)
    launcher.prepare()
    try:
        ok = launcher.start()
        if ok and not launcher.stopping:
            launcher.banner()
            launcher.supervise()
    finally:
        if launcher.stopping:
            launcher.say(f"stopping ({signal.Signals(launcher.stopping).name})")
        # Further Ctrl-Cs must not interrupt the orderly stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        launcher.stop()
        launcher.say("stopped")
    return 0 if ok else 1
