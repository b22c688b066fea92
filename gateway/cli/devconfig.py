"""`zonegate dev`'s cluster configuration: a fresh one with random secrets, the same one
adapted to a later start (ports taken by something else meanwhile, credentials from the
environment), written atomically; the emulated drives it names; and the ports it chooses,
claimed against other `zonegate dev` launchers on the machine."""

from __future__ import annotations

import fcntl
import json
import os
import random
import secrets
import socket
import string
import tempfile
from pathlib import Path
from typing import Any

import tomli_w

from erasure.config import ClusterConfig
from zonestore.emulated import (
    GEOMETRY_FILE,
    Geometry,
    create_emulated_drive,
    is_emulated_drive,
)

ROOT_USER = "root"
DRIVES_PER_NODE = 2

def _random_key(n: int, alphabet: str) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def port_free(host: str, port: int) -> bool:
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
    return 0 < port <= 65535 and port_free(host, port) and PORTS.claim(port, role)


def free_port(host: str, avoid: set[int], role: str = "") -> int:
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


def split_url(url: str) -> tuple[str, int]:
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
            nport = free_port(host, used, nid)
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
        nhost, nport = split_url(node["url"])
        if nport in used or not _available(nhost, nport, node["id"]):
            new = free_port(nhost, used, node["id"])
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


def ensure_sse(cfg: dict[str, Any], data: Path, tls: bool) -> list[str]:
    """SSE for the dev cluster: a master key file (created once, next to the metadata store;
    a reused configuration without one gets one too), and SSE-C over plain HTTP allowed only
    when the gateway does not serve TLS. Returns what changed."""
    from gateway.store.ssekeys import create_key_file
    gw = cfg.setdefault("gateway", {})
    notes = []
    path = gw.get("sse_master_key_file")
    if not path:
        path = gw["sse_master_key_file"] = str(data / "gateway" / "sse-master.keys")
        notes.append(f"SSE-S3 master key file: {path}")
    if not Path(path).exists():
        create_key_file(path)
    gw["sse_c_allow_http"] = not tls
    return notes


def drive_promise(cfg: dict[str, Any]) -> int:
    """Bytes the emulated drives may still take from the disk under them: every zone's
    capacity less what its sparse file holds already."""
    total = 0
    for node in cfg["nodes"]:
        for drive in node["drives"]:
            root = Path(drive)
            try:
                geo = json.loads((root / GEOMETRY_FILE).read_text())
                cap = int(geo.get("zone_capacity") or geo["zone_size"])
                entries = list(os.scandir(root / "zones"))
            except (OSError, ValueError, KeyError):
                continue  # not an emulated drive (a real one promises nothing here)
            for e in entries:
                try:
                    held = e.stat().st_blocks * 512
                except OSError:
                    continue
                total += max(0, cap - held)
    return total
