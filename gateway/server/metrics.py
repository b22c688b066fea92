"""Prometheus metrics of the S3 gateway, correct with several uvicorn workers.

What is measured, and where:
- S3 requests (operation, status), time to first byte and total time, body bytes received and
  sent, requests in flight: `MetricsMiddleware`, an ASGI middleware around the S3 app.
- Node calls by node, operation and outcome, with latency: `NodeCallMetrics`, an observer
  (erasure.nodeclient.NodeCallObserver) given to the erasure cluster's HTTP session, told of
  each call by the node client itself. The latency runs to the node's response headers: for a
  PUT that is after the whole archive was sent and committed, for a GET it is the time to the
  first byte.
- Erasure events (degraded reads and writes, failed-quorum writes, fragment errors, encode and
  decode seconds and bytes): the erasure layer counts them in `ErasureCluster.stats` (a
  `collections.Counter`); `ErasureStats` is a Counter that also feeds them to Prometheus, so the
  erasure layer needs to know nothing about Prometheus or the gateway.
- Parts awaiting repair: the repair queue's files, counted at scrape time.
- Nodes full (up, but out of writable space): set by the erasure cluster's full-node hook
  (`ErasureCluster.full_observers`) whenever the set changes; with several workers the
  largest of their views.

Several workers: `zonegate serve` calls `prepare_multiprocess()` before uvicorn starts its
workers; each worker then writes its samples to files in PROMETHEUS_MULTIPROC_DIR and whichever
worker answers `/metrics` merges all of them (prometheus_client's multiprocess mode). Without
that directory (one process, tests) the metrics live in the process's own registry.

Labels are of low cardinality only: operation names, status codes, node ids, outcomes; never a
bucket or key.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from starlette.requests import Request

from gateway.s3.addressing import parse_query, parse_target
from gateway.s3.errors import S3Error
from gateway.server.routes import OPERATION_NAMES, UNKNOWN_OPERATION, route

log = logging.getLogger("zonegate.metrics")
BACKLOG_TIMEOUT = 2.0  # seconds a scrape waits for the repair queue's size

PREFIX = "zonegate_gateway"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0, 120.0, 300.0)

# ErasureCluster.stats keys -> (metric attribute on GatewayMetrics, labels)
_STATS_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "degraded_reads": ("degraded_reads", ()),
    "degraded_writes": ("degraded_writes", ()),
    "quorum_failures": ("quorum_failures", ()),
    "parts_written": ("parts_written", ()),
    "fragment_errors": ("fragment_errors", ()),
    "healed_parts": ("healed_parts", ()),
    "heal_failures": ("heal_failures", ()),
    "encode_seconds": ("coding_seconds", ("encode",)),
    "decode_seconds": ("coding_seconds", ("decode",)),
    "encode_bytes": ("coding_bytes", ("encode",)),
    "decode_bytes": ("coding_bytes", ("decode",)),
    # the data mover's (erasure/mover.py Mover.stats)
    "bytes_moved": ("move_bytes", ()),
    "fragments_moved": ("move_fragments", ()),
    "fragments_rebuilt": ("move_rebuilt", ()),
    "move_failures": ("move_failures", ()),
}


def multiprocess_active() -> bool:
    """True when this process's metric values go to PROMETHEUS_MULTIPROC_DIR (the variable was
    set before prometheus_client was imported here)."""
    return bool(os.environ.get(MULTIPROC_ENV)) and values.ValueClass is not values.MutexValue


def prepare_multiprocess(directory: str | os.PathLike[str] | None = None) -> Path:
    """Set up multiprocess metrics for the worker processes about to be started: an empty
    directory, exported as PROMETHEUS_MULTIPROC_DIR (inherited by the workers). Uses
    `directory`, else an existing PROMETHEUS_MULTIPROC_DIR, else a temporary directory that is
    removed when this process exits. Files left by an earlier run are removed, as the
    prometheus_client documentation requires (their counters would be counted again)."""
    given = directory or os.environ.get(MULTIPROC_ENV)
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for f in path.glob("*.db"):
            f.unlink(missing_ok=True)
    else:
        path = Path(tempfile.mkdtemp(prefix="zonegate-metrics-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    os.environ[MULTIPROC_ENV] = str(path)
    return path


class GatewayMetrics:
    """The gateway's metric objects (one set per process; see `get_metrics`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # repair queues to report (erasure RepairStores: the store's, shared by every
        # gateway, or a state directory's files) and the backlog last read from them
        self.repair_queues: list[Any] = []
        self.repair_backlog: int | None = None
        self.requests = Counter(f"{PREFIX}_requests", "S3 requests answered.",
                                ["operation", "status"], registry=r)
        self.duration = Histogram(f"{PREFIX}_request_duration_seconds",
                                  "Time from request to the last byte of the response.",
                                  ["operation"], buckets=LATENCY_BUCKETS, registry=r)
        self.ttfb = Histogram(f"{PREFIX}_time_to_first_byte_seconds",
                              "Time from request to the response's status line and headers.",
                              ["operation"], buckets=LATENCY_BUCKETS, registry=r)
        self.received = Counter(f"{PREFIX}_received_bytes", "Request body bytes received.",
                                ["operation"], registry=r)
        self.sent = Counter(f"{PREFIX}_sent_bytes", "Response body bytes sent.",
                            ["operation"], registry=r)
        self.in_flight = Gauge(f"{PREFIX}_requests_in_flight", "S3 requests being handled.",
                               registry=r, multiprocess_mode="livesum")
        self.node_calls = Counter(f"{PREFIX}_node_requests", "Requests to storage nodes.",
                                  ["node", "operation", "outcome"], registry=r)
        self.node_latency = Histogram(
            f"{PREFIX}_node_request_duration_seconds",
            "Time from sending a node request to its response headers.",
            ["node", "operation"], buckets=LATENCY_BUCKETS, registry=r)
        self.degraded_reads = Counter(
            f"{PREFIX}_degraded_reads", "Part reads that needed a fragment other than the first "
            "k they tried (a node down, a fragment missing or corrupt).", registry=r)
        self.degraded_writes = Counter(
            f"{PREFIX}_degraded_writes", "Part writes that succeeded without every fragment "
            "(the missing ones await repair).", registry=r)
        self.quorum_failures = Counter(
            f"{PREFIX}_failed_quorum_writes", "Part writes refused because fewer nodes than the "
            "write quorum took their fragment.", registry=r)
        self.parts_written = Counter(f"{PREFIX}_parts_written", "Parts written.", registry=r)
        self.nodes_full = Gauge(f"{PREFIX}_nodes_full", "Storage nodes that are up but out of "
                                "writable space: new fragments go to other nodes.", registry=r,
                                multiprocess_mode="livemax")
        self.write_quorum = Gauge(f"{PREFIX}_write_quorum", "Fragment writes a part needs "
                                  "(the cluster config's write_quorum): nodes that must be up "
                                  "for uploads.", registry=r, multiprocess_mode="max")
        self.layout_version = Gauge(f"{PREFIX}_layout_version", "The cluster layout version "
                                    "this gateway uses (zonegate layout).", registry=r,
                                    multiprocess_mode="livemin")
        self.parts_below_full = Gauge(f"{PREFIX}_parts_below_full_redundancy",
                                      "Parts with fewer than k+m fragments on the layout's "
                                      "nodes, at the last census.", registry=r,
                                      multiprocess_mode="livemax")
        self.fragment_errors = Counter(f"{PREFIX}_fragment_errors",
                                       "Fragment reads that failed or were corrupt.", registry=r)
        self.healed_parts = Counter(f"{PREFIX}_healed_parts",
                                    "Parts whose missing fragments the gateway rebuilt itself.",
                                    registry=r)
        self.heal_failures = Counter(f"{PREFIX}_heal_failures",
                                     "Background rebuilds that failed (retried, then left to "
                                     "`zonegate repair`).", registry=r)
        self.coding_seconds = Counter(f"{PREFIX}_erasure_seconds",
                                      "Seconds spent erasure encoding or decoding.",
                                      ["operation"], registry=r)
        self.coding_bytes = Counter(f"{PREFIX}_erasure_bytes",
                                    "Part bytes erasure encoded or decoded.",
                                    ["operation"], registry=r)
        self.move_bytes = Counter(f"{PREFIX}_move_bytes", "Fragment bytes the data mover "
                                  "moved (copied or rebuilt) and committed.", registry=r)
        self.move_fragments = Counter(f"{PREFIX}_move_fragments", "Fragments the data mover "
                                      "moved and committed.", registry=r)
        self.move_rebuilt = Counter(f"{PREFIX}_move_rebuilt_fragments", "Of them, rebuilt "
                                    "from parity (source gone, lost or unreadable).",
                                    registry=r)
        self.move_failures = Counter(f"{PREFIX}_move_failures", "Fragment moves that "
                                     "failed (retried by a later pass).", registry=r)
        self.mover_stores: list[Any] = []
        self.move_progress: dict[str, Any] | None = None
        for op in ("encode", "decode"):  # present (as 0) before the first part
            self.coding_seconds.labels(op)
            self.coding_bytes.labels(op)
        # labels() costs a lock and a tuple per call: keep the children of each operation
        self._per_op: dict[str, tuple[Any, Any, Any, Any]] = {}
        self._per_status: dict[tuple[str, int], Any] = {}
        self._per_stat: dict[str, Any] = {}  # ErasureCluster.stats key -> metric (child)

    def for_operation(self, op: str) -> tuple[Any, Any, Any, Any]:
        """(ttfb, duration, received, sent) children of an operation."""
        c = self._per_op.get(op)
        if c is None:
            c = self._per_op[op] = (self.ttfb.labels(op), self.duration.labels(op),
                                    self.received.labels(op), self.sent.labels(op))
        return c

    def request_counter(self, op: str, status: int) -> Any:
        c = self._per_status.get((op, status))
        if c is None:
            c = self._per_status[(op, status)] = self.requests.labels(op, str(status))
        return c

    # -- erasure events ----------------------------------------------------------------------

    def erasure_event(self, key: str, amount: float) -> None:
        """Count `amount` of an ErasureCluster.stats key; unknown keys are ignored."""
        if amount <= 0:
            return
        metric = self._per_stat.get(key)
        if metric is None:  # first time (the erasure layer counts twice per segment)
            spec = _STATS_KEYS.get(key)
            if spec is None:
                return
            metric = getattr(self, spec[0])
            metric = self._per_stat[key] = metric.labels(*spec[1]) if spec[1] else metric
        metric.inc(amount)

    def watch_repair_queue(self, queue: Any) -> None:
        """Report the parts queued in `queue` (an erasure RepairStore, with `size()`): the
        one gateway of this process's (an app made again replaces the last one's)."""
        self.repair_queues = [queue]

    async def refresh_repair_backlog(self) -> None:
        """Read the queues' sizes for the next `render` (None while one cannot be read: the
        gauge is then left out rather than reading 0)."""
        try:
            # bounded: a database that does not answer must not stall the scrape
            self.repair_backlog = sum([await asyncio.wait_for(q.size(), BACKLOG_TIMEOUT)
                                       for q in self.repair_queues])
        except Exception as e:
            log.debug("repair backlog not readable: %s", e)  # the store logs its outages
            self.repair_backlog = None

    async def refresh_move_progress(self) -> None:
        """Read the mover's run from the store for the next `render` (left out when it
        cannot be read)."""
        self.move_progress = None
        for store in self.mover_stores:
            try:
                doc = await asyncio.wait_for(store.get("run"), BACKLOG_TIMEOUT)
            except Exception as e:
                log.debug("mover progress not readable: %s", e)
                return
            self.move_progress = doc or {}

    # -- exposition --------------------------------------------------------------------------

    def render(self) -> bytes:
        """The Prometheus text of every worker (multiprocess mode) or of this process."""
        if multiprocess_active():
            from prometheus_client import multiprocess
            _forget_dead_workers(Path(os.environ[MULTIPROC_ENV]))
            reg = CollectorRegistry()
            multiprocess.MultiProcessCollector(reg)
            reg.register(RepairBacklogCollector(self.repair_backlog))
            reg.register(MoveProgressCollector(self.move_progress))
            return generate_latest(reg)
        text = generate_latest(self.registry)
        return (text + generate_latest(_single(RepairBacklogCollector(self.repair_backlog)))
                + generate_latest(_single(MoveProgressCollector(self.move_progress))))


def _single(collector: Any) -> CollectorRegistry:
    reg = CollectorRegistry()
    reg.register(collector)
    return reg


class RepairBacklogCollector:
    """Parts awaiting repair, as last read from the repair queue (the metadata store's, which
    every gateway shares: each reports the cluster's backlog, not a sum of its own)."""

    def __init__(self, backlog: int | None) -> None:
        self.backlog = backlog

    def collect(self) -> Iterable[Metric]:
        if self.backlog is None:
            return
        g = GaugeMetricFamily(f"{PREFIX}_parts_awaiting_repair",
                              "Parts with fragments missing or corrupt, queued for repair.")
        g.add_metric([], float(self.backlog))
        yield g


class MoveProgressCollector:
    """The data mover's run as stored (every gateway reports the cluster's one run): bytes
    and parts left, the ETA, and whether it runs."""

    def __init__(self, doc: dict[str, Any] | None) -> None:
        self.doc = doc

    def collect(self) -> Iterable[Metric]:
        if self.doc is None:
            return
        from erasure.movetypes import RunState, progress_report
        st = RunState.from_dict(self.doc)
        active = progress_report(self.doc)["active"]
        for name, helptext, value in (
                ("move_bytes_left", "Fragment bytes the data mover still has to move "
                 "(estimate).", st.bytes_left if active else 0),
                ("move_parts_left", "Parts with a fragment still to move (estimate).",
                 st.parts_left if active else 0),
                ("move_active", "1 while a data mover run is unfinished.", int(active)),
                ("move_layout_version", "Cluster layout version of the last mover run.",
                 st.version)):
            g = GaugeMetricFamily(f"{PREFIX}_{name}", helptext)
            g.add_metric([], float(value))
            yield g
        eta = st.eta if active else 0.0
        if eta is not None:
            g = GaugeMetricFamily(f"{PREFIX}_move_eta_seconds", "Seconds until the data "
                                  "mover's run is done at its rate so far.")
            g.add_metric([], float(eta))
            yield g


def _forget_dead_workers(directory: Path) -> None:
    """Drop the live-gauge files of workers that died without saying so (a crash, SIGKILL):
    otherwise their last in-flight count would be added forever. Counters stay (they must
    never go down)."""
    for f in directory.glob("gauge_live*_*.db"):
        try:
            pid = int(f.stem.rsplit("_", 1)[1])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            from prometheus_client import multiprocess
            multiprocess.mark_process_dead(pid, str(directory))
        except PermissionError:
            pass  # alive, someone else's


_metrics: GatewayMetrics | None = None


def get_metrics() -> GatewayMetrics:
    """This process's GatewayMetrics (created on first use)."""
    global _metrics
    if _metrics is None:
        _metrics = GatewayMetrics()
    return _metrics


class ErasureStats(collections.Counter):
    """`ErasureCluster.stats` that also counts every increase in Prometheus."""

    def __init__(self, metrics: GatewayMetrics, initial: Iterable[tuple[str, float]] = ()) -> None:
        super().__init__()
        self._metrics = metrics
        for k, v in initial:
            dict.__setitem__(self, k, v)

    def __setitem__(self, key: str, value: float) -> None:
        delta = value - self.get(key, 0)
        super().__setitem__(key, value)
        if delta > 0:
            self._metrics.erasure_event(key, delta)


# -- S3 requests ------------------------------------------------------------------------------

def operation_of(scope: Scope) -> str:
    """The S3 operation a request names (ListObjectsV2, PutObject, ...), as the app routes it."""
    app = scope.get("app")
    gw = getattr(getattr(app, "state", None), "gateway", None)
    if gw is None:
        return UNKNOWN_OPERATION
    try:
        request = Request(scope)
        bucket, key = parse_target(gw.domains, request)
        req = SimpleNamespace(method=request.method, query=parse_query(request),
                              bucket=bucket, key=key, headers=request.headers)
        handler = route(req)  # type: ignore[arg-type]
    except S3Error:
        return UNKNOWN_OPERATION
    except Exception:
        return UNKNOWN_OPERATION
    name = getattr(handler, "__name__", "")
    return OPERATION_NAMES.get(name, UNKNOWN_OPERATION)


_s3_in_flight = 0  # this process's S3 requests being handled (not health checks or scrapes)


def s3_requests_in_flight() -> int:
    """S3 requests this process is handling now: the foreground the data mover yields to
    (gateway/store/movework.py)."""
    return _s3_in_flight


class MetricsMiddleware:
    """ASGI middleware counting every S3 request: operation, status, bytes, latencies."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics | None = None) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        m = self.metrics or get_metrics()
        start = time.perf_counter()
        op = operation_of(scope)
        ttfb, duration, received_bytes, sent_bytes = m.for_operation(op)
        received = sent = 0
        status = 0
        first_byte = False

        async def counting_receive() -> MutableMapping[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
            return message

        async def counting_send(message: MutableMapping[str, Any]) -> None:
            nonlocal sent, status, first_byte
            if message["type"] == "http.response.start":
                status = int(message["status"])
                if not first_byte:
                    first_byte = True
                    ttfb.observe(time.perf_counter() - start)
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        global _s3_in_flight
        s3 = op != UNKNOWN_OPERATION
        m.in_flight.inc()
        _s3_in_flight += s3
        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            m.in_flight.dec()
            _s3_in_flight -= s3
            # a request that died before answering counts as a 500 (uvicorn sends one)
            m.request_counter(op, status or 500).inc()
            duration.observe(time.perf_counter() - start)
            if received:
                received_bytes.inc(received)
            if sent:
                sent_bytes.inc(sent)


def metrics_endpoint(metrics: GatewayMetrics | None = None) -> ASGIApp:
    """An ASGI endpoint answering with the Prometheus text of every worker."""

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        m = metrics or get_metrics()
        await m.refresh_repair_backlog()
        await m.refresh_move_progress()
        body = m.render()
        head = scope.get("method") == "HEAD"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", CONTENT_TYPE_LATEST.encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": b"" if head else body})

    return endpoint


# -- node calls -------------------------------------------------------------------------------

def _outcome(status: int) -> str:
    if status < 400:
        return "ok"
    if status == 404:
        return "not_found"
    if status == 507:
        return "no_space"
    return "client_error" if status < 500 else "server_error"


class NodeCallMetrics:
    """Counts and times the node calls of an erasure cluster's node clients (their
    NodeCallObserver): `node_requests_total{node,operation,outcome}` and
    `node_request_duration_seconds{node,operation}`; a call that got no answer (connection
    refused, timeout, cancelled) has the outcome `unavailable`."""

    def __init__(self, metrics: GatewayMetrics | None = None) -> None:
        self._metrics = metrics
        # labels() costs a lock and a tuple per call: keep the children
        self._calls: dict[tuple[str, str, int | None], Any] = {}
        self._latency: dict[tuple[str, str], Any] = {}

    def node_call(self, node: str, operation: str, status: int | None, seconds: float) -> None:
        calls = self._calls.get((node, operation, status))
        if calls is None:
            m = self._metrics or get_metrics()
            outcome = "unavailable" if status is None else _outcome(status)
            calls = self._calls[(node, operation, status)] = m.node_calls.labels(
                node, operation, outcome)
        latency = self._latency.get((node, operation))
        if latency is None:
            m = self._metrics or get_metrics()
            latency = self._latency[(node, operation)] = m.node_latency.labels(node, operation)
        calls.inc()
        latency.observe(seconds)


def instrument_cluster(cluster: Any, metrics: GatewayMetrics | None = None) -> None:
    """Before `cluster.start()`: count the erasure cluster's node calls and events."""
    m = metrics or get_metrics()
    cluster.stats = ErasureStats(m, getattr(cluster, "stats", {}).items())
    if getattr(cluster, "write_quorum", None) is not None:
        m.write_quorum.set(cluster.write_quorum)
    if hasattr(cluster, "trace_configs"):
        cluster.trace_configs.append(NodeCallMetrics(m))
    if hasattr(cluster, "full_observers"):
        m.nodes_full.set(0)
        cluster.full_observers.append(lambda full: m.nodes_full.set(len(full)))
    if hasattr(cluster, "layout_observers"):
        m.layout_version.set(cluster.layout.version)

        def adopted(layout: Any) -> None:
            m.layout_version.set(layout.version)
            m.write_quorum.set(cluster.write_quorum)
        cluster.layout_observers.append(adopted)
    if hasattr(cluster, "census_observers"):
        cluster.census_observers.append(lambda c: m.parts_below_full.set(c.below_full))
    queue = getattr(cluster, "repair_queue", None)
    if queue is not None and hasattr(queue, "size"):
        m.watch_repair_queue(queue)


def instrument_mover(service: Any, metrics: GatewayMetrics | None = None) -> None:
    """Count the data mover's moves (gateway/store/movework.py) and report its run."""
    m = metrics or get_metrics()
    mover = service.mover
    mover.stats = ErasureStats(m, mover.stats.items())
    m.mover_stores = [mover.store]
