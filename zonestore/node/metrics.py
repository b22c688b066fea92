"""Prometheus metrics of a node: per-drive zone-log statistics and per-request counters.

Drive metrics are read from each ZoneLog's `stats()` at scrape time by a custom collector (so
they are always current and cost nothing between scrapes); the `drive` label is the drive's
index in the node's drive list, which keeps cardinality low. Request metrics are labelled by
method, route name (never the record id) and status.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest

PREFIX = "zonegate_node"
ROUTE_NAME: web.RequestKey[str] = web.RequestKey("zg_route", str)

# (stats attribute, metric name without prefix, help, counter?)
_DRIVE_FIELDS: tuple[tuple[str, str, str, bool], ...] = (
    ("used_bytes", "drive_capacity_used_bytes", "Bytes in zones holding data (live or garbage).",
     False),
    ("free_bytes", "drive_capacity_free_bytes", "Bytes still writable (empty zones and tails).",
     False),
    ("live_bytes", "drive_live_bytes", "Payload bytes of live records.", False),
    ("writable_bytes", "writable_bytes",
     "Bytes puts can still write without reclaim (empty zones beyond the reserve, room of "
     "open zones).", False),
    ("stranded_bytes", "stranded_bytes",
     "Unwritten room of finished zones (unusable until reclaim resets them).", False),
    ("garbage_bytes", "garbage_bytes", "Written bytes no live record points at.", False),
    ("live_bytes", "live_bytes", "Device bytes of live records (headers included).", False),
    ("reserve_bytes", "reserve_bytes", "Bytes held back for reclaim and deletes.", False),
    ("empty_zones", "empty_zones", "Empty zones.", False),
    ("records", "drive_records", "Live records.", False),
    ("user_bytes_written", "drive_user_written_bytes", "Payload bytes written by clients.", True),
    ("device_bytes_written", "drive_device_written_bytes",
     "Bytes written to the device (headers, padding and GC included).", True),
    ("gc_bytes_copied", "drive_gc_copied_bytes", "Bytes copied by reclaim (GC).", True),
    ("write_amplification", "drive_write_amplification",
     "Device bytes written per user byte written.", False),
    ("flushes", "drive_flushes", "Group-commit flushes.", True),
    ("flush_bytes", "drive_flush_bytes", "Bytes made durable by flushes.", True),
    ("read_errors", "drive_read_errors", "Device read errors.", True),
    ("crc_failures", "drive_crc_failures", "Records whose CRC32C check failed on read.", True),
    ("open_zones", "drive_open_zones", "Zones currently open.", False),
    ("max_open_zones", "drive_max_open_zones", "The device's open-zone limit (0 = none).", False),
    ("max_active_zones", "drive_max_active_zones", "The device's active-zone limit (0 = none).",
     False),
)


class DriveStatsCollector:
    """Reads `stats()` of each drive's log when Prometheus scrapes."""

    def __init__(self, drives: Callable[[], Sequence[Any]],
                 failed: Callable[[], Mapping[int, str]] | None = None) -> None:
        self._drives = drives  # returns the logs once the node is ready, [] before
        self._failed = failed or dict  # drive index -> error, for the failed drives

    def collect(self) -> Iterable[Metric]:
        logs = self._drives()
        failed = self._failed()
        broken = GaugeMetricFamily(f"{PREFIX}_drive_failed",
                                   "1 once the drive gave a device error (its records are no "
                                   "longer served).", labels=["drive"])
        for i in range(len(logs)):
            broken.add_metric([str(i)], 1.0 if i in failed else 0.0)
        yield broken
        families: dict[str, Metric] = {}
        for _attr, name, doc, counter in _DRIVE_FIELDS:
            cls = CounterMetricFamily if counter else GaugeMetricFamily
            families[name] = cls(f"{PREFIX}_{name}", doc, labels=["drive"])
        zones = GaugeMetricFamily(f"{PREFIX}_drive_zones", "Zones by condition.",
                                  labels=["drive", "condition"])
        histograms = {
            "flush_seconds": HistogramMetricFamily(
                f"{PREFIX}_drive_flush_seconds",
                "Latency of durable flushes (device write + fdatasync).", labels=["drive"]),
            "flush_sizes": HistogramMetricFamily(
                f"{PREFIX}_drive_flush_size_bytes", "Bytes per device write.", labels=["drive"]),
        }
        for i, log in enumerate(logs):
            stats = log.stats()
            for attr, family in histograms.items():
                snap = getattr(stats, attr, None)
                if snap is not None:
                    family.add_metric(
                        [str(i)],
                        [("+Inf" if b == float("inf") else repr(b), n) for b, n in snap.buckets],
                        sum_value=snap.sum)
            for attr, name, _doc, _counter in _DRIVE_FIELDS:
                value = getattr(stats, attr, None)
                if value is not None:
                    families[name].add_metric([str(i)], float(value))
            for cond, n in sorted((getattr(stats, "zones_by_condition", None) or {}).items()):
                zones.add_metric([str(i), str(cond).lower()], float(n))
        yield from families.values()
        yield zones
        yield from histograms.values()


class NodeMetrics:
    """The node's own registry (never the global one: several nodes may share a process)."""

    def __init__(self, drives: Callable[[], Sequence[Any]],
                 failed: Callable[[], Mapping[int, str]] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(DriveStatsCollector(drives, failed))
        self.requests = Counter(f"{PREFIX}_requests", "HTTP requests handled.",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram(
            f"{PREFIX}_request_duration_seconds", "Time to handle a request, body included.",
            ["method", "route"], registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                     60, 300),
        )
        self.received = Counter(f"{PREFIX}_received_bytes", "Record bytes received (PUT bodies).",
                                registry=self.registry)
        self.sent = Counter(f"{PREFIX}_sent_bytes", "Record bytes sent (GET bodies).",
                            registry=self.registry)
        self.auth_failures = Counter(f"{PREFIX}_auth_failures", "Requests refused with 403.",
                                     registry=self.registry)
        self.reclaims = Counter(f"{PREFIX}_reclaim_runs", "Background reclaim passes.",
                                ["drive", "result"], registry=self.registry)
        self.ready = Gauge(f"{PREFIX}_ready", "1 once every drive's zone log is open.",
                           registry=self.registry)
        self.inflight = Gauge(f"{PREFIX}_requests_inflight", "Requests being handled.",
                              registry=self.registry)
        self.zones_reset = Counter(f"{PREFIX}_drive_reclaimed_zones", "Zones reset by reclaim.",
                                   ["drive"], registry=self.registry)
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self.reclaim_copied = Counter(f"{PREFIX}_drive_reclaim_copied_bytes",
                                      "Bytes copied by the node's reclaim passes.", ["drive"],
                                      registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def observe(self, request: web.Request, status: int, start: float) -> None:
        """Count one answered request (`start` from time.perf_counter())."""
        route = request.get(ROUTE_NAME) or _route_name(request)
        method = request.method if request.method in _METHODS else "OTHER"
        self.count(method, route, status, start)

    def count(self, method: str, route: str, status: int, start: float) -> None:
        """Count one answered request by its labels (`method` one of GET/HEAD/PUT/DELETE/POST
        or OTHER, `route` a route name)."""
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            # labels() takes a lock and builds a key per call; the children never change, so
            # each label set is looked up once (a few dozen sets: methods x routes x statuses).
            children = (self.requests.labels(method, route, str(status)),
                        self.latency.labels(method, route))
            self._children[key] = children
        children[0].inc()
        children[1].observe(time.perf_counter() - start)
        if status == 403:
            self.auth_failures.inc()

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        start = time.perf_counter()
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            self.observe(request, status, start)


_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "POST"})


def _route_name(request: web.Request) -> str:
    info = request.match_info
    route = getattr(info, "route", None)
    name = getattr(route, "name", None) if route is not None else None
    return name or "other"
