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
import fcntl
import http.client
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from gateway.cli.devchild import Child, child_preexec
from gateway.cli.devconfig import (
    PORTS,
    ROOT_USER,
    drive_promise,
    ensure_drives,
    ensure_sse,
    free_port,
    new_config,
    port_free,
    refresh_config,
    split_url,
    write_config,
)
from gateway.server.serve import MALLOC_ENV
from zonestore.cli import _size as parse_size
from zonestore.emulated import Geometry
from zonestore.nodeauth import sign_headers

CONFIG_NAME = "zonegate.toml"
ENV_NAME = "env.sh"  # the client environment, written at every start
LOCK_NAME = "zonegate-dev.lock"
MiB = 1024 * 1024
GiB = 1024 * MiB
READY_BANNER = "ZoneGate is ready"
REAP_S = 8.0  # what the rest of a dead child's group gets after SIGTERM before SIGKILL
PROMETHEUS_INTERVAL = "5s"  # --prometheus's scrape interval unless --prometheus-interval


def _prom_duration(text: str) -> str:
    """A Prometheus duration of one unit (`500ms`, `5s`, `1m`), checked here so a typo is a
    one-line usage error, not a Prometheus that fails to start."""
    if not re.fullmatch(r"[1-9][0-9]*(ms|s|m|h)", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 5s, 500ms or 1m")
    return text


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
    p.add_argument("--prometheus-interval", default=None, metavar="DURATION",
                   type=_prom_duration,
                   help="--prometheus's scrape interval (default 5s, so a dev cluster's "
                        "graphs move while you watch; deploy/prometheus.yml keeps 15s)")
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
    p.add_argument("--lifecycle-day-seconds", type=float, default=None, metavar="N",
                   help="make a lifecycle day N seconds long, to watch expirations happen "
                        "(written to [gateway] lifecycle_day_seconds; kept for later starts; "
                        "0 = real days again)")
    p.add_argument("--grace", type=float, default=10.0,
                   help="seconds a child gets after SIGTERM before SIGKILL")
    p.add_argument("--start-timeout", type=float, default=180.0,
                   help="seconds to wait for every process to be ready")
    p.set_defaults(func=cmd_dev)



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
    host, port = split_url(url)
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


def _shown(path: Path) -> str:
    """`path` relative to the working directory when it lies below it (what a user pastes)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


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
        self._moved = False  # a node got a new port during the start

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
        self._lifecycle_day(a.lifecycle_day_seconds)
        deadline = time.monotonic() + 5  # a gateway that is still stopping frees it soon
        while not port_free(a.host, a.port):
            if time.monotonic() > deadline:
                raise OSError(f"port {a.port} on {a.host} is in use (choose another with --port)")
            time.sleep(0.25)
        for note in ensure_sse(self.cfg, self.data, a.tls):
            self.say(note)
        write_config(self.config_path, self.cfg)
        geometry = Geometry(nr_zones=a.zones, zone_size=a.zone_size, zone_capacity=a.zone_size)
        made = ensure_drives(self.cfg, geometry)
        if made:
            self.say(f"created {made} emulated zoned drives ({a.zones} zones of "
                     f"{a.zone_size // MiB} MiB each, sparse)")
        self._check_disk()
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for k, v in MALLOC_ENV.items():
            self.env.setdefault(k, v)
        exe = [sys.executable, "-m", "gateway.cli"]
        node_exe = [sys.executable, "-m", "gateway.cli.devnode"]  # `zonegate node`, leaner
        logs = self.data / "logs"
        for node in self.cfg["nodes"]:
            self.children.append(Child(node["id"], node_exe + [
                "node", "--config", str(self.config_path), "--id", node["id"],
                "--log-format", a.log_format], logs / f"{node['id']}.log"))
        # info: each worker's start and stop (uvicorn writes no line per request here)
        serve = exe + ["serve", "--config", str(self.config_path), "--workers", str(a.workers),
                       "--log-level", "info", "--log-format", a.log_format]
        self.cert = self.ca = None
        if a.tls:
            from gateway.server.tls import ensure_dev_ca
            self.ca, self.cert, key = ensure_dev_ca(self.data / "tls", (a.host,))
            serve += ["--tls-cert", str(self.cert), "--tls-key", str(key)]
        self.gateway = Child("gateway", serve, logs / "gateway.log")

    def _check_disk(self) -> None:
        """One line when the sparse drives promise more than the disk under them holds:
        writes would fail with ENOSPC long before the drives look full."""
        promised = drive_promise(self.cfg)
        free = shutil.disk_usage(self.data).free
        if promised > free:
            self.say(f"warning: the emulated drives may still grow by {promised / GiB:.1f} GiB "
                     f"but the disk under {_shown(self.data)} has {free / GiB:.1f} GiB free "
                     "(smaller drives: --zones / --zone-size in a new data directory)")

    def _lifecycle_day(self, seconds: float | None) -> None:
        gw = self.cfg.setdefault("gateway", {})
        if seconds is not None:
            if seconds < 0:
                raise ValueError("--lifecycle-day-seconds must be 0 (real days) or more")
            if seconds:
                gw["lifecycle_day_seconds"] = seconds
            else:
                gw.pop("lifecycle_day_seconds", None)
        day = gw.get("lifecycle_day_seconds")
        if day:
            self.say(f"a lifecycle day lasts {day:g} s ([gateway] lifecycle_day_seconds; "
                     "--lifecycle-day-seconds 0 for real days)")

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
                                preexec_fn=lambda: child_preexec(parent))
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
        another port and start it again (and the gateway, which read the old one, once the
        nodes are up). Only during the start."""
        node = next((n for n in self.cfg["nodes"] if n["id"] == c.name), None)
        if node is None or len(c.starts) > 3:
            return False
        host, port = split_url(node["url"])
        if port_free(host, port):
            return False
        used = {split_url(n["url"])[1] for n in self.cfg["nodes"]} | {self.args.port}
        new = free_port(host, used, c.name)
        self.say(f"{c.name}: port {port} was taken by another process, moving it to {new}")
        node["url"] = f"http://{host}:{new}"
        write_config(self.config_path, self.cfg)
        self._moved = True
        c.spawn(self.env, self.keep_fds)
        return True

    def start(self) -> bool:
        """Start the nodes and the gateway together (the gateway waits for its write quorum
        by itself and answers 503 until then), then wait for all of them by probing."""
        nodes = {n["id"]: n for n in self.cfg["nodes"]}
        assert self.gateway is not None
        for c in self.children:
            c.spawn(self.env, self.keep_fds)
        # Recovery must finish before the gateway opens the store it rebuilds.
        early = not self.args.recover_metadata
        if early:
            self.gateway.spawn(self.env, self.keep_fds)
        self.say(f"started {len(self.children)} node daemons"
                 f"{' and the gateway' if early else ''}, waiting for them")
        self._moved = False
        if not self._wait("nodes", self.children, lambda c: self._node_ready(nodes[c.name])):
            return False
        if early and self._moved:
            # a node moved to another port after the gateway had read the config
            self.say("restarting the gateway for the nodes' new ports")
            self._stop([self.gateway])
            self.gateway.spawn(self.env, self.keep_fds)
        if self.args.recover_metadata:
            if not self._recover_metadata():
                return False
            self.gateway.spawn(self.env, self.keep_fds)
        if not self._wait("the gateway", [self.gateway], lambda c: self._gateway_ready()):
            return False
        if self.args.prometheus:
            self._start_prometheus()
        return True

    def _start_prometheus(self) -> None:
        from gateway.cli import promdev
        exe = promdev.binary()
        if exe is None:
            self.say("--prometheus: no `prometheus` binary on PATH (Debian: apt-get install "
                     "prometheus); going on without it")
            return
        host = self.args.host
        port = free_port(host, {split_url(n["url"])[1] for n in self.cfg["nodes"]},
                          "prometheus")
        doc = promdev.scrape_config(self.cfg, self.endpoint, ca_file=self.ca,
                                   interval=self.args.prometheus_interval or PROMETHEUS_INTERVAL)
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

    def client_env(self) -> dict[str, str]:
        """What an S3 client needs to reach this cluster as its root user (boto3 and the
        aws cli read every one of these from the environment)."""
        root = next(u for u in self.cfg["users"] if u.get("name") == ROOT_USER)
        env = {"AWS_ENDPOINT_URL": self.endpoint,
               "AWS_ACCESS_KEY_ID": root["access_key"],
               "AWS_SECRET_ACCESS_KEY": root["secret_key"],
               "AWS_DEFAULT_REGION": self.cfg.get("gateway", {}).get("region", "us-east-1")}
        if self.ca:
            env["AWS_CA_BUNDLE"] = str(self.ca)
        return env

    def write_env_file(self, env: dict[str, str]) -> Path:
        """DATA/env.sh: the client environment as `export` lines, for `. data/env.sh`."""
        path = self.data / ENV_NAME
        text = "# ZoneGate dev cluster: `. " + _shown(path) + "` points S3 clients at it.\n"
        text += "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        if self.ca:
            # not set by default: it replaces the system's CAs for everything in the shell
            text += ("# CRT-based clients (boto3's CRT transfer client, s3torchconnector) and "
                     "rustls ones (obstore, polars) trust the CA through this instead:\n"
                     f"# export SSL_CERT_FILE={shlex.quote(str(self.ca))}\n")
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds a secret
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        return path

    def banner(self) -> None:
        env = self.client_env()
        env_file = self.write_env_file(env)
        found = ""
        if self.config_path == Path.cwd().resolve() / "data" / CONFIG_NAME:
            found = ": `zonegate status`, `repair`, `user`... find it there by themselves"
        lines = [
            f"{READY_BANNER}: {len(self.children)} nodes, gateway pid {self.gateway.proc.pid}",
            f"  endpoint:    {self.endpoint}",
            f"  access key:  {env['AWS_ACCESS_KEY_ID']}",
            f"  secret key:  {env['AWS_SECRET_ACCESS_KEY']}",
            f"  region:      {env['AWS_DEFAULT_REGION']}",
            f"  data:        {_shown(self.data)}   (config {_shown(self.config_path)}{found})",
            f"  logs:        {_shown(self.data / 'logs')}",
        ]
        if self.cfg.get("gateway", {}).get("console", True) is not False:
            lines.append(f"  console:     {self.endpoint}/console/   (log in with the keys above)")
        if self.ca:
            lines.append(f"  trust CA:    {self.ca}   (e.g. AWS_CA_BUNDLE / SSL_CERT_FILE)")
        if self.prometheus_url:
            lines.append(f"  prometheus:  {self.prometheus_url}")
        lines.append(f"In another shell, `. {_shown(env_file)}` or paste:")
        lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
        bindir = Path(sys.executable).parent
        if (bindir / "aws").exists() and shutil.which("aws") != str(bindir / "aws"):
            # `make run` installed zonegate and the aws cli into the venv, not onto PATH
            lines.append(f"then `. {_shown(bindir / 'activate')}` for its zonegate and aws, "
                         "and try: aws s3 ls")
        else:
            lines.append("then try: aws s3 ls")
        lines.append("Ctrl-C stops the cluster.")
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
    if args.prometheus_interval is not None and not args.prometheus:
        raise ValueError("--prometheus-interval sets --prometheus's scrape interval: "
                         "add --prometheus")
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
