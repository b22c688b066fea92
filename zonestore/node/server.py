"""Start, run and stop a storage node: open its drives, serve the node API, reclaim, shut down.

`run_node(...)` is the blocking entry point (`python -m zonestore.node`, `zonegate node`);
`NodeServer` is the same thing as an object for callers that own an event loop.

Start-up order: the drives are checked and opened first (a missing or unusable drive stops the
node with a one-line error before it listens); then the node listens, so `/health/live`
answers while the zone logs rebuild their indexes; `/health/ready` turns 200 once every log is
open. SIGTERM/SIGINT stop accepting requests, let in-flight ones finish (bounded), stop the
reclaim tasks and close the logs (which flush) and the devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import random
import signal
import socket
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvloop
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from zonestore.device import ZonedDevice
from zonestore.emulated import Geometry, create_emulated_drive, is_emulated_drive
from zonestore.logsetup import take_request_id
from zonestore.node.auth import AuthCheck, check_signature, make_auth_check
from zonestore.node.drivelayout import NO_NEW_RECORDS, add_layout_routes, check_identities
from zonestore.node.errors import error_response, json_error
from zonestore.node.fastput import Delegate, LeanServer
from zonestore.node.handlers import add_routes
from zonestore.node.metrics import NodeMetrics
from zonestore.node.purge import add_purge_routes
from zonestore.node.scrub import DEFAULT_INTERVAL as SCRUB_INTERVAL
from zonestore.node.scrub import DEFAULT_RATE as SCRUB_RATE
from zonestore.node.scrub import SCRUBBER, add_scrubber
from zonestore.node.state import DEFAULT_MAX_RECORD_SIZE, MAX_META_SIZE, STATE, NodeState
from zonestore.nodeauth import DEFAULT_WINDOW
from zonestore.opener import open_device

log = logging.getLogger("zonestore.node")

INDEX_NAME = "index.sqlite"  # inside an emulated drive's directory, as ZoneLog.open_path does
LOCK_NAME = "node.lock"
REPLAY_NAME = "auth-replay.log"  # write signatures seen (zonestore/node/auth.py)
READ_BUFSIZE = 1 << 20  # socket read buffer per request: bounds a PUT's memory, keeps reads big


RECLAIM_ZONES_PER_PASS = 4


class _QuietBadRequests(logging.Filter):
    """aiohttp logs every malformed request (oversized header, bad framing) as an ERROR with a
    traceback; it already answers 400, so one warning line is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = "malformed request refused: %s"
            record.args = (" ".join(str(exc).split())[:200],)
            record.exc_info = record.exc_text = None
        return True


logging.getLogger("aiohttp.server").addFilter(_QuietBadRequests())


class DriveError(Exception):
    """The node cannot start: a drive (or the listen address) cannot be used. The message is
    one line naming the culprit and the fix."""


StartupError = DriveError


@dataclass
class NodeOptions:
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE
    auth_window: float = DEFAULT_WINDOW
    open_metrics: str = "loopback"  # who may read /metrics and /health/ready unsigned
    reclaim_interval: float = 5.0  # seconds between reclaim passes on a drive; 0 = never
    create_drives: bool = False  # create missing drives as emulated drives of `geometry`
    geometry: Geometry | None = None
    index_dir: Path | None = None  # where indexes of real (block-device) drives live
    port_file: Path | None = None  # written with the bound port once listening
    shutdown_timeout: float = 30.0
    log_tuning: dict[str, Any] = field(default_factory=dict)  # passed to ZoneLog.open (the
    # node runs reclaim itself, so the log's own background loop is turned off)
    scrub_rate: float = SCRUB_RATE  # bytes/s the scrubber re-reads (zonestore/node/scrub.py)
    scrub_interval: float = SCRUB_INTERVAL  # seconds of rest between scrub passes


def _index_path(drive: Path, index: int, node_id: str, index_dir: Path | None) -> Path:
    if index_dir is not None:
        return Path(index_dir) / f"{node_id}.d{index}.{INDEX_NAME}"
    if is_emulated_drive(drive):
        return drive / INDEX_NAME
    raise DriveError(f"{drive}: a block device needs --index-dir for its zone-log index")


def replay_path(node_id: str, drives: Sequence[Path], index_dir: Path | None) -> Path | None:
    """Where the node keeps the write signatures it accepted (zonestore/node/auth.py): beside
    its indexes, so that a restart does not reopen the replay window."""
    if index_dir is not None:
        return Path(index_dir) / f"{node_id}.{REPLAY_NAME}"
    for d in drives:
        if is_emulated_drive(Path(d)):
            return Path(d) / REPLAY_NAME
    return None


def _is_block_device(path: Path) -> bool:
    try:
        return stat.S_ISBLK(path.stat().st_mode)
    except OSError:
        return False


def _lock_path(drive: Path, index: int, node_id: str, index_dir: Path | None) -> Path:
    if is_emulated_drive(drive):
        return drive / LOCK_NAME
    return Path(index_dir or ".") / f"{node_id}.d{index}.{LOCK_NAME}"


class _Drive:
    def __init__(self, path: Path, device: ZonedDevice, index_path: Path, lock_fd: int) -> None:
        self.path = path
        self.device = device
        self.index_path = index_path
        self.lock_fd = lock_fd


def open_drives(paths: Sequence[str | Path], node_id: str, options: NodeOptions) -> list[_Drive]:
    """Open (and with create_drives, create) each drive, locking it against a second node."""
    if not paths:
        raise DriveError("a node needs at least one drive (--drive PATH)")
    resolved = [Path(p).resolve() for p in paths]
    if len(set(resolved)) != len(resolved):
        raise DriveError("the same drive is listed twice")
    if options.index_dir is not None:
        try:
            Path(options.index_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DriveError(f"index directory {options.index_dir}: {exc.strerror}") from None
    drives: list[_Drive] = []
    try:
        for i, path in enumerate(resolved):
            if not path.exists() or (path.is_dir() and not any(path.iterdir())):
                if not options.create_drives:
                    raise DriveError(
                        f"{path}: no such drive (create it with `zonegate drive create {path}` "
                        "or start the node with --create-drives)")
                create_emulated_drive(path, options.geometry)
                log.info("created emulated drive %s", path)
            if not is_emulated_drive(path) and not _is_block_device(path):
                # Not a drive: say why without touching anything (open_device only inspects).
                try:
                    open_device(path).close()
                except Exception as exc:
                    raise DriveError(f"{exc}") from None
                raise DriveError(f"{path}: not a zoned drive")
            index_path = _index_path(path, i, node_id, options.index_dir)
            # Lock before opening: opening an emulated drive trims a partly written block,
            # which must never happen under a node that is writing to it.
            lock = _lock_path(path, i, node_id, options.index_dir)
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise DriveError(f"{path}: cannot create lock file {lock}: "
                                 f"{exc.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise DriveError(f"{path}: drive is in use by another node process") from None
            try:
                device = open_device(path)
            except Exception as exc:
                os.close(fd)
                raise DriveError(f"{path}: {exc}") from None
            drives.append(_Drive(path, device, index_path, fd))
    except BaseException:
        for d in drives:
            _close_drive(d)
        raise
    return drives


def _close_drive(d: _Drive) -> None:
    with contextlib.suppress(Exception):
        d.device.close()
    with contextlib.suppress(OSError):
        os.close(d.lock_fd)


async def _finish(request: web.Request, resp: web.StreamResponse) -> None:
    """Write the whole answer of a request the lean path lent to aiohttp (fastput.Delegate)
    before it may read the next request (aiohttp would write it after the middleware)."""
    try:
        await resp.prepare(request)
        await resp.write_eof()
    except ConnectionError:  # aiohttp's own write then meets it quietly
        pass


def _node_middleware(state: NodeState, auth: AuthCheck):
    """Metrics, drain, errors and auth as one middleware (one frame and await per request
    instead of four), in the order they nest: metrics count every answer, refusals included;
    while draining, requests are refused before anything else; refusals and failures become
    JSON errors; auth runs last, just before the handler."""
    metrics = state.metrics

    @web.middleware
    async def node_middleware(request: web.Request, handler) -> web.StreamResponse:
        start = time.perf_counter()
        status = 500
        take_request_id(request.headers)
        lent = request.transport
        if type(lent) is not Delegate:
            lent = None
        try:
            if state.draining and request.path != "/health/live":
                resp = json_error(503, "shutting_down", "the node is shutting down")
                resp.force_close()
                status = resp.status
                if lent is not None:
                    await _finish(request, resp)
                return resp
            state.inflight += 1
            try:
                try:
                    auth(request)
                    resp = await handler(request)
                except web.HTTPException as exc:
                    if exc.status < 400:
                        raise
                    resp = error_response(request, exc)
                except Exception as exc:  # noqa: BLE001 - every failure becomes a response
                    resp = error_response(request, exc)
            finally:
                state.inflight -= 1
            status = resp.status
            if lent is not None:
                await _finish(request, resp)
            return resp
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            metrics.observe(request, status, start)
            if lent is not None:
                lent.answered()

    return node_middleware


def build_app(state: NodeState, secret: bytes, options: NodeOptions) -> web.Application:
    """The aiohttp application of one node (routes, auth, errors, metrics). Its auth check,
    one replay cache included, is `state.auth`, which the lean PUT path shares."""
    state.auth = make_auth_check(secret, window=options.auth_window,
                                 open_metrics=options.open_metrics, node_id=state.node_id,
                                 replay_path=replay_path(state.node_id, state.drive_paths,
                                                         options.index_dir))
    app = web.Application(
        middlewares=[_node_middleware(state, state.auth)],
        client_max_size=MAX_META_SIZE,  # only for request.read(); record bodies are streamed
    )
    app[STATE] = state
    state.metrics.ready.set_function(lambda: 1.0 if state.ready else 0.0)
    state.metrics.inflight.set_function(lambda: float(state.inflight))
    state.check_signature = functools.partial(check_signature, secret=secret,
                                              window=options.auth_window,
                                              node_id=state.node_id)
    add_routes(app)
    add_layout_routes(app)
    add_purge_routes(app)
    add_scrubber(app, state, options.scrub_rate, options.scrub_interval)
    return app


def _listen_socket(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, socktype, proto, _, addr = infos[0]
    sock = socket.socket(family, socktype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class NodeServer:
    """One storage node: `await start()`, then `await stop()`."""

    def __init__(self, node_id: str, drives: Sequence[str | Path], host: str, port: int,
                 secret: str | bytes, options: NodeOptions | None = None) -> None:
        if not secret:
            raise ValueError("the cluster secret is empty")
        self.node_id = node_id
        self.drive_paths = [Path(p) for p in drives]
        self.host = host
        self.port = port
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.options = options or NodeOptions()
        self.state: NodeState | None = None
        self._drives: list[_Drive] = []
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.AbstractServer | None = None
        self.lean: LeanServer | None = None
        self._tasks: list[asyncio.Task] = []
        self._ready = asyncio.Event()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._drives = open_drives(self.drive_paths, self.node_id, self.options)
        state = NodeState(node_id=self.node_id, drive_paths=[d.path for d in self._drives],
                          metrics=NodeMetrics(
                              lambda: self.state.logs if self.state else [],
                              lambda: getattr(self.state and self.state.pool, "failed", {})),
                          max_record_size=self.options.max_record_size)
        self.state = state
        app = build_app(state, self.secret, self.options)
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None,
            shutdown_timeout=self.options.shutdown_timeout,
            max_line_size=8190, max_field_size=8190, max_headers=64,
            read_bufsize=READ_BUFSIZE,
        )
        await self._runner.setup()
        try:
            sock = _listen_socket(self.host, self.port)
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise DriveError(f"cannot listen on {self.host}:{self.port}: "
                             f"{exc.strerror or exc}") from None
        self.port = sock.getsockname()[1]
        # Connections start on the lean PUT path (fastput.py), which hands any other request
        # to aiohttp's protocol factory (the runner's web.Server).
        self.lean = LeanServer(state, self._runner.server)
        self._listener = await asyncio.get_running_loop().create_server(
            self.lean, sock=sock, backlog=1024)
        log.info("node %s listening on %s with %d drive(s)", self.node_id, self.url,
                 len(self._drives))
        if self.options.port_file is not None:
            tmp = Path(f"{self.options.port_file}.tmp")
            tmp.write_text(f"{self.port}\n")
            os.replace(tmp, self.options.port_file)
        await self._open_logs(state)

    async def _open_logs(self, state: NodeState) -> None:
        from zonestore.pool import DrivePool
        from zonestore.zonelog import ZoneLog

        logs = []
        try:
            for d in self._drives:
                tuning = {"background_reclaim": False, **self.options.log_tuning}
                logs.append(await ZoneLog.open(d.device, d.index_path, **tuning))
        except BaseException:
            for lg in logs:
                with contextlib.suppress(Exception):
                    await lg.close()
            raise
        state.logs = logs
        state.identities = await asyncio.to_thread(check_identities, state.drive_paths)
        state.pool = DrivePool(logs)
        state.pool.no_new = {i for i, st in state.drive_states.items()
                             if st in NO_NEW_RECORDS}
        if self.options.reclaim_interval > 0:
            for i, lg in enumerate(logs):
                self._tasks.append(asyncio.create_task(self._reclaim_loop(i, lg),
                                                       name=f"reclaim-d{i}"))
        if self._runner is not None:
            self._tasks.append(asyncio.create_task(self._runner.app[SCRUBBER].run(),
                                                   name="scrub"))
        self._ready.set()
        log.info("node %s ready", self.node_id)

    async def _reclaim_loop(self, index: int, zlog: Any) -> None:
        """Per drive, every interval (jittered so drives do not copy in step) or at once when
        a put saw the empty zones run low: reset zones holding only dead records (cheap, no
        copying) and, when the empty zones are down to the low-water mark, evacuate a few
        zones by cost-benefit at the log's reclaim rate (reclaim.background_pass). A drive
        the layout drains has its zones without live data reset at once, and every zone
        once its last record is gone (reclaim.vacate)."""
        from zonestore.reclaim import background_pass, vacate

        interval = self.options.reclaim_interval
        metrics = self.state.metrics if self.state else None
        label = str(index)
        wanted = getattr(zlog, "reclaim_wanted", None) or asyncio.Event()
        while True:
            try:
                await asyncio.wait_for(wanted.wait(), interval * random.uniform(0.8, 1.2))
            except TimeoutError:
                pass
            wanted.clear()
            if index in getattr(self.state and self.state.pool, "failed", {}):
                return  # a failed drive is left alone
            try:
                results = await background_pass(zlog, max_zones=RECLAIM_ZONES_PER_PASS,
                                                rate=getattr(zlog, "reclaim_rate", None))
                if self.state is not None and \
                        self.state.drive_states.get(index) == "draining":
                    results.append(await vacate(zlog))
                outcome = "ok"
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reclaim on drive %d failed", index)
                outcome, results = "error", []
            if metrics is not None:
                metrics.reclaims.labels(label, outcome).inc()
                for r in results:
                    metrics.zones_reset.labels(label).inc(
                        getattr(r, "zones_reset", 0) + getattr(r, "zones_evacuated", 0))
                    metrics.reclaim_copied.labels(label).inc(getattr(r, "bytes_copied", 0))

    async def stop(self) -> None:
        started = self.state is not None
        if self._listener is not None and self.state is not None:
            # aiohttp's own graceful shutdown stops reading request bodies at once, which would
            # fail every upload in progress: stop listening, let requests in flight finish
            # (bounded), and only then close the connections.
            self._listener.close()
            self.state.draining = True
            deadline = asyncio.get_running_loop().time() + self.options.shutdown_timeout
            while self.state.inflight and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
        self._listener = None
        if self.lean is not None:
            self.lean.close()
            self.lean = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        if self.state is not None:
            pool, self.state.pool = self.state.pool, None
            logs, self.state.logs = self.state.logs, []
            close = getattr(pool, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
            for lg in logs:
                try:
                    await lg.close()
                except Exception:
                    log.exception("closing a zone log failed")
            if self.state.auth is not None:
                self.state.auth.replays.close()
        for d in self._drives:
            _close_drive(d)
        self._drives = []
        if started:
            log.info("node %s stopped", self.node_id)
        self.state = None


async def serve(node_id: str, drives: Sequence[str | Path], host: str, port: int,
                secret: str | bytes, options: NodeOptions | None = None) -> None:
    """Run a node until SIGTERM or SIGINT."""
    node = NodeServer(node_id, drives, host, port, secret, options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        start = asyncio.create_task(node.start())
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait({start, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if start.done():
            start.result()  # start-up errors surface here
            await waiter
        else:
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await start
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await node.stop()


def run_node(node_id: str, drives: Sequence[str | Path], host: str, port: int,
             secret: str | bytes, **options: Any) -> None:
    """Run a storage node in this process until SIGTERM/SIGINT. `options` are the fields of
    `NodeOptions` (max_record_size, create_drives, geometry, reclaim_interval, ...).
    Raises DriveError (one line) if a drive is missing or unusable."""
    # uvloop: the node's work is many small socket reads and thread hand-offs per request,
    # which uvloop's C event loop dispatches for a fraction of asyncio's Python loop.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(node_id, drives, host, port, secret, NodeOptions(**options)))
