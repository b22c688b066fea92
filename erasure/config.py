"""The cluster configuration file (TOML) shared by the gateway, the nodes and the tools.

`ClusterConfig.load(path)` refuses a wrong or inconsistent file with one line naming the bad
field (`nodes[3].url: ...`). Paths in the file are used as written (relative ones are relative
to the working directory of the process). `write_config` writes one back (used by `zonegate dev`).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tomli_w

from erasure.codec import DEFAULT_BACKEND, DEFAULT_SEGMENT, Scheme
from erasure.placement import NodeSlot


class ConfigError(ValueError):
    """The configuration is wrong; the message names the field."""


@dataclass(frozen=True)
class NodeSpec:
    id: str
    url: str
    domain: str
    drives: tuple[str, ...]

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 80


@dataclass(frozen=True)
class ErasureSettings:
    k: int = 8
    m: int = 2
    segment_size: int = DEFAULT_SEGMENT
    backend: str = DEFAULT_BACKEND
    write_quorum: int = 9
    node_timeout: float = 30.0       # seconds without progress before a node counts as failed
    state_dir: str = "data/erasure"  # repair queue
    # the data mover's pace (bytes/s; 0 = unpaced): per node (what it sends and receives) and
    # for the whole cluster, so that rebalancing leaves the foreground its throughput
    move_rate: float = 32 * 1024 * 1024
    move_rate_total: float = 256 * 1024 * 1024
    # ... and per node while the gateway has foreground S3 requests in flight (0: no slow-down;
    # the cluster-wide rate is scaled down alike)
    move_rate_busy: float = 2 * 1024 * 1024
    # seconds a fragment write may go without the node taking bytes or answering before the
    # fragment is handed off to another node (used: at most half the node timeout)
    write_stall: float = 1.5
    # seconds between the gateway's health checks of every node (how soon a node's return or
    # loss is seen when no request tells it first)
    health_interval: float = 5.0

    @property
    def scheme(self) -> Scheme:
        return Scheme(self.k, self.m, self.segment_size, self.backend)


@dataclass(frozen=True)
class User:
    name: str
    access_key: str
    secret_key: str


@dataclass(frozen=True)
class ClusterConfig:
    secret: str
    nodes: tuple[NodeSpec, ...]
    erasure: ErasureSettings = field(default_factory=ErasureSettings)
    gateway: dict[str, Any] = field(default_factory=dict)  # validated by the gateway layer
    users: tuple[User, ...] = ()
    source: str = "<dict>"

    def node(self, node_id: str) -> NodeSpec:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise ConfigError(f"{self.source}: no node with id {node_id!r} "
                          f"(nodes: {', '.join(n.id for n in self.nodes)})")

    def slots(self) -> list[NodeSlot]:
        return [NodeSlot(n.id, n.domain) for n in self.nodes]

    def placeholder_warnings(self, users: bool = True) -> list[str]:
        """One line per secret still holding a shipped example value ("change-me..." or
        "...EXAMPLE..."; deploy/cluster.toml ships such values so that compose starts as is)."""
        def placeholder(value: str) -> bool:
            return "change-me" in value.lower() or "example" in value.lower()

        out = []
        if placeholder(self.secret):
            out.append(f"{self.source}: `secret` is still the shipped example: anyone who knows "
                       "it can sign requests to the nodes; set a random one on every machine")
        for u in self.users if users else ():
            for what, value in (("access_key", u.access_key), ("secret_key", u.secret_key)):
                if placeholder(value):
                    out.append(f"{self.source}: user {u.name!r} still has the example "
                               f"{what}: change it before exposing the S3 port")
        return out

    @classmethod
    def load(cls, path: str | Path) -> ClusterConfig:
        p = Path(path)
        try:
            with p.open("rb") as f:
                raw = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{p}: no such config file") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{p}: not valid TOML: {e}") from None
        return cls.from_dict(raw, source=str(p))

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, source: str = "<dict>") -> ClusterConfig:
        return _Parser(source).parse(raw)

    def to_dict(self) -> dict[str, Any]:
        e = self.erasure
        out: dict[str, Any] = {
            "secret": self.secret,
            "erasure": {"k": e.k, "m": e.m, "segment_size": e.segment_size, "backend": e.backend,
                        "write_quorum": e.write_quorum, "node_timeout": e.node_timeout,
                        "state_dir": e.state_dir, "move_rate": e.move_rate,
                        "move_rate_total": e.move_rate_total,
                        "move_rate_busy": e.move_rate_busy, "write_stall": e.write_stall,
                        "health_interval": e.health_interval},
        }
        if self.gateway:
            out["gateway"] = dict(self.gateway)
        if self.users:
            out["users"] = [{"name": u.name, "access_key": u.access_key,
                             "secret_key": u.secret_key} for u in self.users]
        out["nodes"] = [{"id": n.id, "url": n.url, "domain": n.domain, "drives": list(n.drives)}
                        for n in self.nodes]
        return out


def write_config(path: str | Path, config: ClusterConfig | dict[str, Any]) -> Path:
    """Validate and write a config file; returns its path."""
    cfg = config if isinstance(config, ClusterConfig) else ClusterConfig.from_dict(config)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_bytes(tomli_w.dumps(cfg.to_dict()).encode())
    tmp.replace(p)
    return p


_MISSING = object()


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, msg: str) -> ConfigError:
        return ConfigError(f"{self.source}: {where}: {msg}")

    def get(self, d: dict, key: str, where: str, typ: type | tuple, default: Any = _MISSING) -> Any:
        v = d.get(key, _MISSING)
        if v is _MISSING:
            if default is _MISSING:
                raise self.fail(where, "missing")
            return default
        # bool is an int in Python; a config's `k = true` is still a mistake
        if isinstance(v, bool) and bool not in (typ if isinstance(typ, tuple) else (typ,)):
            raise self.fail(where, f"must be {_tname(typ)}, got {v!r}")
        if not isinstance(v, typ):
            raise self.fail(where, f"must be {_tname(typ)}, got {v!r}")
        return v

    def table(self, d: dict, key: str) -> dict:
        v = d.get(key, {})
        if not isinstance(v, dict):
            raise self.fail(key, "must be a table")
        return v

    def unknown(self, d: dict, allowed: set[str], where: str) -> None:
        extra = sorted(set(d) - allowed)
        if extra:
            prefix = f"{where}." if where else ""
            raise self.fail(f"{prefix}{extra[0]}", f"unknown setting (known: {', '.join(sorted(allowed))})")

    def parse(self, raw: dict[str, Any]) -> ClusterConfig:
        if not isinstance(raw, dict):
            raise self.fail("<top>", "must be a table")
        self.unknown(raw, {"secret", "erasure", "gateway", "users", "nodes"}, "")
        secret = self.get(raw, "secret", "secret", str)
        if len(secret) < 8:
            raise self.fail("secret", "must be at least 8 characters")
        nodes = self.nodes(raw.get("nodes", _MISSING))
        erasure = self.erasure(self.table(raw, "erasure"), len(nodes))
        gateway = self.table(raw, "gateway")
        users = self.users(raw.get("users", []))
        return ClusterConfig(secret=secret, nodes=nodes, erasure=erasure, gateway=dict(gateway),
                             users=users, source=self.source)

    def erasure(self, e: dict, n_nodes: int) -> ErasureSettings:
        d = ErasureSettings()
        self.unknown(e, {"k", "m", "segment_size", "backend", "write_quorum", "node_timeout",
                         "state_dir", "move_rate", "move_rate_total", "move_rate_busy",
                         "write_stall", "health_interval"}, "erasure")
        k = self.get(e, "k", "erasure.k", int, d.k)
        m = self.get(e, "m", "erasure.m", int, d.m)
        if k < 1:
            raise self.fail("erasure.k", f"must be >= 1, got {k}")
        if m < 1:
            raise self.fail("erasure.m", f"must be >= 1, got {m}")
        if k + m > n_nodes:
            raise self.fail("erasure", f"k+m = {k + m} fragments need at least {k + m} nodes, "
                                       f"the config has {n_nodes}")
        seg = self.get(e, "segment_size", "erasure.segment_size", int, d.segment_size)
        if not 1 <= seg <= 64 * 1024 * 1024:
            raise self.fail("erasure.segment_size", f"must be 1 .. 64 MiB, got {seg}")
        backend = self.get(e, "backend", "erasure.backend", str, d.backend)
        from pyeclib.ec_iface import ECDriver  # import here: the check is the only use
        try:
            ECDriver(k=k, m=m, ec_type=backend)
        except Exception as ex:
            raise self.fail("erasure.backend", f"{backend!r} cannot do k={k} m={m}: {ex}") from None
        wq = self.get(e, "write_quorum", "erasure.write_quorum", int, min(k + 1, k + m))
        if not k <= wq <= k + m:
            raise self.fail("erasure.write_quorum", f"must be between k={k} and k+m={k + m}, got {wq}")
        timeout = self.get(e, "node_timeout", "erasure.node_timeout", (int, float), d.node_timeout)
        if not timeout > 0:
            raise self.fail("erasure.node_timeout", f"must be > 0 seconds, got {timeout}")
        state = self.get(e, "state_dir", "erasure.state_dir", str, d.state_dir)
        rates = []
        for name in ("move_rate", "move_rate_total", "move_rate_busy"):
            v = self.get(e, name, f"erasure.{name}", (int, float), getattr(d, name))
            if not v >= 0:
                raise self.fail(f"erasure.{name}", f"must be >= 0 bytes/s (0: unpaced), got {v}")
            rates.append(float(v))
        stall = self.get(e, "write_stall", "erasure.write_stall", (int, float), d.write_stall)
        if not stall > 0:
            raise self.fail("erasure.write_stall", f"must be > 0 seconds, got {stall}")
        health = self.get(e, "health_interval", "erasure.health_interval", (int, float),
                          d.health_interval)
        if not health > 0:
            raise self.fail("erasure.health_interval", f"must be > 0 seconds, got {health}")
        return ErasureSettings(k, m, seg, backend, wq, float(timeout), state, *rates[:2],
                               move_rate_busy=rates[2], write_stall=float(stall),
                               health_interval=float(health))

    def nodes(self, raw: Any) -> tuple[NodeSpec, ...]:
        if raw is _MISSING or raw == []:
            raise self.fail("nodes", "missing: add [[nodes]] entries")
        if not isinstance(raw, list):
            raise self.fail("nodes", "must be an array of tables ([[nodes]])")
        out: list[NodeSpec] = []
        ids: set[str] = set()
        urls: set[str] = set()
        for i, n in enumerate(raw):
            w = f"nodes[{i}]"
            if not isinstance(n, dict):
                raise self.fail(w, "must be a table")
            self.unknown(n, {"id", "url", "domain", "drives"}, w)
            nid = self.get(n, "id", f"{w}.id", str)
            if not nid or not all(c.isalnum() or c in "-_." for c in nid):
                raise self.fail(f"{w}.id", f"must be letters, digits, '-', '_' or '.', got {nid!r}")
            if nid in ids:
                raise self.fail(f"{w}.id", f"duplicate node id {nid!r}")
            url = self.get(n, "url", f"{w}.url", str).rstrip("/")
            try:
                u = urlsplit(url)
                port = u.port
            except ValueError:
                u, port = None, None
            if u is None or u.scheme not in ("http", "https") or not u.hostname or port is None \
                    or u.path or u.query:
                raise self.fail(f"{w}.url", f"must be http://host:port, got {url!r}")
            if url in urls:
                raise self.fail(f"{w}.url", f"duplicate node url {url!r}")
            domain = self.get(n, "domain", f"{w}.domain", str, nid)
            if not domain:
                raise self.fail(f"{w}.domain", "must not be empty")
            drives = self.get(n, "drives", f"{w}.drives", list, [])
            for j, dpath in enumerate(drives):
                if not isinstance(dpath, str) or not dpath:
                    raise self.fail(f"{w}.drives[{j}]", f"must be a path, got {dpath!r}")
            ids.add(nid)
            urls.add(url)
            out.append(NodeSpec(nid, url, domain, tuple(drives)))
        return tuple(out)

    def users(self, raw: Any) -> tuple[User, ...]:
        if not isinstance(raw, list):
            raise self.fail("users", "must be an array of tables ([[users]])")
        out, keys = [], set()
        for i, u in enumerate(raw):
            w = f"users[{i}]"
            if not isinstance(u, dict):
                raise self.fail(w, "must be a table")
            self.unknown(u, {"name", "access_key", "secret_key"}, w)
            name = self.get(u, "name", f"{w}.name", str)
            ak = self.get(u, "access_key", f"{w}.access_key", str)
            sk = self.get(u, "secret_key", f"{w}.secret_key", str)
            if not ak:
                raise self.fail(f"{w}.access_key", "must not be empty")
            if not sk:
                raise self.fail(f"{w}.secret_key", "must not be empty")
            if ak in keys:
                raise self.fail(f"{w}.access_key", f"duplicate access key {ak!r}")
            keys.add(ak)
            out.append(User(name, ak, sk))
        return tuple(out)


def _tname(typ: type | tuple) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "an array",
             dict: "a table", bool: "true/false"}
    if isinstance(typ, tuple):
        return " or ".join(names.get(t, t.__name__) for t in typ)
    return names.get(typ, typ.__name__)
