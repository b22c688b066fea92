"""Request authentication for the node API (zonestore/nodeauth.py signatures).

Every request is verified with `verify_request` except:
- `/health/live`: always open, it says only that the process runs;
- `/health/ready` and `/metrics`: signed requests are verified as usual; unsigned ones are
  accepted according to `open_metrics`: "loopback" (default: from 127.0.0.1/::1 only, where a
  local Prometheus agent or the operator's curl runs), "any" (Prometheus scraping from another
  host; these endpoints reveal counters and sizes, never data or ids), or "signed" (never).

Replays:
- In time: a request is accepted only within the signature's time window (nodeauth's
  DEFAULT_WINDOW, 300 s either side of the node's clock).
- To another node: a signature names the node it is for (`X-ZG-Node`, signed); a node
  refuses one made for another node, and refuses a write (PUT, DELETE, ...) that names none.
- Twice to the same node: within the window a write signature is accepted only once
  (streamed PUTs are UNSIGNED-PAYLOAD: a replay could carry another body). Identical
  legitimate writes within one second would carry identical signatures, so writers add a
  random `nonce` query parameter (covered by the signature; erasure/nodeclient.py does).
- Across a restart: the write signatures accepted are also appended to a file beside the
  node's indexes (`replay_path`: `<index dir>/<node>.auth-replay.log`, or `auth-replay.log`
  in the first emulated drive's directory; zonestore/node/server.py:replay_path), and a
  restarted node loads those of the last 2 x window. We chose this over "refuse signatures
  older than the process start": that rule would either refuse every write of a gateway
  whose clock is behind the node's (for up to the skew the window allows) or, given that
  much slack, leave the window open again after a restart; remembering works whatever the
  clocks say. Each accepted write costs one small append (a write() into the page cache, no
  fsync): it survives any kill or crash of the process; a power loss may lose the last
  ~30 s of entries (the kernel's writeback delay), and a machine back up within the window
  would then accept replays of those few writes until the window ends.
  The file is rotated every 2 x window, so it holds at most two windows' worth; the memory of
  seen signatures is bounded (100,000 writes).
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

from aiohttp import web

from zonestore.node.errors import NodeError
from zonestore.nodeauth import (
    AUTH_HEADER,
    DEFAULT_WINDOW,
    AuthError,
    signed_node,
    verify_request,
)

log = logging.getLogger("zonestore.node.auth")

BODY_HASH: web.RequestKey[str] = web.RequestKey("zg_body_hash", str)
OPEN_PATHS = frozenset({"/health/live"})
SCRAPE_PATHS = frozenset({"/health/ready", "/metrics"})
OPEN_METRICS_CHOICES = ("loopback", "any", "signed")
WRITE_METHODS = frozenset({"PUT", "DELETE", "POST", "PATCH"})
LOOPBACK = frozenset({"127.0.0.1", "::1", "::ffff:127.0.0.1"})


def check_signature(request: web.Request, secret: bytes, window: float = DEFAULT_WINDOW,
                    node_id: str | None = None) -> str:
    """Verify the request's signature (no replay bookkeeping); returns the signed body hash.
    Raises NodeError 403."""
    return verify_parts(secret, request.method, request.rel_url.raw_path,
                        list(request.rel_url.query.items()), request.headers, window,
                        node_id=node_id)


def verify_parts(secret: bytes, method: str, raw_path: str, query: list[tuple[str, str]],
                 headers: Mapping[str, str], window: float = DEFAULT_WINDOW, *,
                 node_id: str | None = None) -> str:
    """`check_signature` on a request's parts (the raw path as sent, the decoded query items),
    for callers without an aiohttp Request. With `node_id`, a signature made for another node
    is refused, and so is a write that names no node."""
    try:
        body_hash = verify_request(secret, method, raw_path, query, headers, node=node_id,
                                   window=window)
    except AuthError as exc:
        raise NodeError(403, "forbidden", str(exc)) from None
    if node_id is not None and method in WRITE_METHODS and signed_node(headers) != node_id:
        raise NodeError(403, "forbidden", "a write must be signed for this node (X-ZG-Node)")
    return body_hash


class ReplayCache:
    """Signatures of writes seen within the window, oldest first, bounded in number; with a
    `path`, also kept in a file (and its predecessor `<path>.old`) so that a restarted node
    still knows them (see the module docstring)."""

    def __init__(self, window: float, max_entries: int = 100_000, *,
                 path: str | os.PathLike[str] | None = None, now: float | None = None) -> None:
        self.window = window
        self.max_entries = max_entries
        self._seen: OrderedDict[str, float] = OrderedDict()
        self.path = Path(path) if path is not None else None
        self._fd = -1
        self._file_started = 0.0
        self._write_failed = False
        if self.path is not None:
            self._load(time.time() if now is None else now)

    @property
    def horizon_seconds(self) -> float:
        return 2 * self.window  # a timestamp is valid for `window` either side

    def _load(self, now: float) -> None:
        assert self.path is not None
        entries: list[tuple[float, str]] = []
        for p in (Path(f"{self.path}.old"), self.path):
            try:
                text = p.read_bytes().decode("ascii", "replace")
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("replay cache %s unreadable: %s", p, exc)
                continue
            for line in text.splitlines():
                seen_s, _, sig = line.partition(" ")
                try:
                    seen = float(seen_s)
                except ValueError:
                    continue  # a line torn by a crash
                if sig and seen >= now - self.horizon_seconds:
                    entries.append((seen, sig))
        entries.sort()
        for seen, sig in entries[-self.max_entries:]:
            self._seen[sig] = seen
        self._rotate(now)

    def _rotate(self, now: float) -> None:
        """Start a new file; the current one becomes `.old` (entries older than both are
        past the horizon once the new file is itself a horizon old)."""
        assert self.path is not None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                os.replace(self.path, f"{self.path}.old")
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                               0o600)
            # The entries loaded from older files stay remembered through the new one.
            if self._seen:
                os.write(self._fd, "".join(f"{seen:.0f} {sig}\n"
                                           for sig, seen in self._seen.items()).encode())
        except OSError as exc:
            self._persist_failed(exc)
        self._file_started = now

    def _persist_failed(self, exc: OSError) -> None:
        if not self._write_failed:
            log.error("replay cache %s cannot be written (%s): a restart of this node would "
                      "accept replays of writes seen in the last %.0f s", self.path, exc,
                      self.horizon_seconds)
        self._write_failed = True

    def first_time(self, signature: str, now: float | None = None) -> bool:
        """True (and remember it) if `signature` was not seen yet; False for a replay."""
        now = time.time() if now is None else now
        horizon = now - self.horizon_seconds
        while self._seen:
            oldest_at = next(iter(self._seen.values()))
            if oldest_at >= horizon and len(self._seen) < self.max_entries:
                break
            self._seen.popitem(last=False)
        if signature in self._seen:
            return False
        self._seen[signature] = now
        if self.path is not None:
            if now - self._file_started > self.horizon_seconds:
                self._seen.pop(signature)
                self._rotate(now)  # writes what is remembered, then this one below
                self._seen[signature] = now
            if self._fd >= 0:
                try:
                    # One small append into the page cache (no fsync): see the docstring.
                    os.write(self._fd, f"{now:.0f} {signature}\n".encode("ascii", "replace"))
                except OSError as exc:
                    self._persist_failed(exc)
        return True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class AuthCheck:
    """The node's request check (see the module docstring), with one replay cache for every
    way a request arrives: call it with an aiohttp Request (the middleware), or `check()` with
    the request's parts (zonestore/node/fastput.py). Synchronous, so that the node's one
    middleware runs it without a frame."""

    def __init__(self, secret: bytes, *, window: float = DEFAULT_WINDOW,
                 open_metrics: str = "loopback", node_id: str | None = None,
                 replay_path: str | os.PathLike[str] | None = None) -> None:
        if open_metrics not in OPEN_METRICS_CHOICES:
            raise ValueError(f"open_metrics must be one of {OPEN_METRICS_CHOICES}, "
                             f"not {open_metrics!r}")
        self.secret = secret
        self.window = window
        self.open_metrics = open_metrics
        self.node_id = node_id
        self.replays = ReplayCache(window, path=replay_path)

    def is_open(self, raw_path: str, headers: Mapping[str, str], remote: str | None) -> bool:
        """True if the request may go on unsigned."""
        if raw_path in OPEN_PATHS:
            return True
        return AUTH_HEADER not in headers and raw_path in SCRAPE_PATHS and self._open_to(remote)

    def _open_to(self, remote: str | None) -> bool:
        return self.open_metrics == "any" or (self.open_metrics == "loopback"
                                              and remote in LOOPBACK)

    def verify(self, method: str, raw_path: str, query: list[tuple[str, str]],
               headers: Mapping[str, str]) -> str:
        """Verify the signature and refuse a replayed write; returns the signed body hash.
        Raises NodeError 403."""
        body_hash = verify_parts(self.secret, method, raw_path, query, headers, self.window,
                                 node_id=self.node_id)
        if method in WRITE_METHODS:
            signature = headers[AUTH_HEADER].partition(" ")[2]
            if not self.replays.first_time(signature):
                raise NodeError(403, "forbidden", "replayed request: this write was already "
                                "received (sign each write anew, with a random nonce parameter)")
        return body_hash

    def check(self, method: str, raw_path: str, query: list[tuple[str, str]],
              headers: Mapping[str, str], remote: str | None) -> str | None:
        """The signed body hash, or None for an open request; raises NodeError 403."""
        if self.is_open(raw_path, headers, remote):
            return None
        return self.verify(method, raw_path, query, headers)

    def __call__(self, request: web.Request) -> None:
        """Check an aiohttp request; the signed body hash goes into `request[BODY_HASH]`."""
        path = request.rel_url.raw_path
        if path in OPEN_PATHS or (AUTH_HEADER not in request.headers and path in SCRAPE_PATHS
                                  and self._open_to(request.remote)):  # (a peername look-up)
            return
        request[BODY_HASH] = self.verify(request.method, path,
                                         list(request.rel_url.query.items()), request.headers)


def make_auth_check(secret: bytes, *, window: float = DEFAULT_WINDOW,
                    open_metrics: str = "loopback", node_id: str | None = None,
                    replay_path: str | os.PathLike[str] | None = None) -> AuthCheck:
    """The node's request check: returns if the request may go on (with the signed body hash
    in `request[BODY_HASH]` when it was verified), raises NodeError 403 otherwise."""
    return AuthCheck(secret, window=window, open_metrics=open_metrics, node_id=node_id,
                     replay_path=replay_path)

