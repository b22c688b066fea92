"""A logging HTTP/1.1 proxy for benchmarks: what requests a client really sends (method, Range,
sizes, how many at once), without touching the client or the gateway.

It relays bytes unchanged (SigV4 signs the Host header, which it forwards as it came), parsing
just enough of each request and response head to know where a message ends: Content-Length
bodies, chunked responses, and no body for HEAD, 204 and 304.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

MiB = 1 << 20


@dataclass
class Call:
    method: str
    path: str
    range: str
    start: float
    first_byte: float = 0.0
    end: float = 0.0
    status: int = 0
    body: int = 0  # response body bytes


def _headers(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    out = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip().lower()] = v.strip()
    return lines[0], out


async def _relay_body(r: asyncio.StreamReader, w: asyncio.StreamWriter, h: dict[str, str],
                      none: bool) -> int:
    """Copy one message body; returns its size."""
    if none:
        return 0
    if h.get("transfer-encoding", "").lower() == "chunked":
        total = 0
        while True:
            line = await r.readuntil(b"\r\n")
            w.write(line)
            size = int(line.split(b";")[0], 16)
            data = await r.readexactly(size + 2)
            w.write(data)
            total += size
            if size == 0:
                return total  # (no trailers from these servers)
            await w.drain()
    left = int(h.get("content-length", "0"))
    total = left
    while left:
        data = await r.read(min(left, 1 << 20))
        if not data:
            raise ConnectionError("body cut short")
        w.write(data)
        left -= len(data)
        await w.drain()
    return total


class _Proxy:
    """The relay itself, in its own process (see TraceProxy)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.calls: list[Call] = []

    async def serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            cw.close()
            return
        try:
            while True:
                try:
                    head = await cr.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                line, h = _headers(head)
                method, path = (line.split(" ") + ["", ""])[:2]
                call = Call(method, path, h.get("range", ""), time.perf_counter())
                if os.environ.get("REQTRACE_HEADERS"):
                    print(head.decode("latin-1"), flush=True)
                self.calls.append(call)
                uw.write(head)
                await _relay_body(cr, uw, h, False)
                await uw.drain()
                rhead = await ur.readuntil(b"\r\n\r\n")
                call.first_byte = time.perf_counter()
                rline, rh = _headers(rhead)
                call.status = int(rline.split(" ")[1])
                cw.write(rhead)
                call.body = await _relay_body(ur, cw, rh, method == "HEAD"
                                              or call.status in (204, 304))
                await cw.drain()
                call.end = time.perf_counter()
                if rh.get("connection", "").lower() == "close":
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            uw.close()
            cw.close()

    async def run(self, conn: Any) -> None:
        server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        conn.send(server.sockets[0].getsockname()[1])
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, conn.recv)  # the parent says stop
        server.close()
        conn.send([asdict(c) for c in self.calls])


def _proxy_main(upstream_port: int, conn: Any) -> None:
    asyncio.run(_Proxy(upstream_port).run(conn))


class TraceProxy:
    """`with TraceProxy(port) as p:` listens on p.endpoint, relays to 127.0.0.1:port and, on
    exit, holds every exchange in p.calls. It runs in a process of its own: in the client's
    process it would compete for the GIL with the client and slow down what it measures."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.calls: list[Call] = []
        self.port = 0

    def __enter__(self) -> TraceProxy:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_proxy_main, args=(self.upstream, child), daemon=True)
        self._proc.start()
        if not self._conn.poll(60):
            self._proc.kill()
            raise RuntimeError(f"the trace proxy did not start (exit code {self._proc.exitcode})")
        self.port = self._conn.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        self.calls = [Call(**c) for c in self._conn.recv()]
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def summarize(calls: list[Call]) -> dict[str, Any]:
    """Counts by method, GET body sizes and Range use, concurrency (most at once, and the
    time-weighted mean over the span of the GETs), first-byte latencies."""
    gets = [c for c in calls if c.method == "GET" and c.end]
    out: dict[str, Any] = {"requests": len(calls), "by_method": {}}
    for c in calls:
        out["by_method"][c.method] = out["by_method"].get(c.method, 0) + 1
    if not gets:
        return out
    sizes = sorted(c.body for c in gets)
    events = sorted([(c.start, 1) for c in gets] + [(c.end, -1) for c in gets])
    now = most = 0
    area = idle = 0.0
    last = events[0][0]
    for t, d in events:
        area += now * (t - last)
        if now == 0:
            idle += t - last  # no GET in flight: the client is busy with what it got
        last = t
        now += d
        most = max(most, now)
    span = events[-1][0] - events[0][0]
    ttfb = sorted(c.first_byte - c.start for c in gets)
    out.update({
        "gets": len(gets), "ranged_gets": sum(1 for c in gets if c.range),
        "get_bytes": sum(sizes), "get_size_min": sizes[0], "get_size_median":
        statistics.median(sizes), "get_size_max": sizes[-1],
        "gets_8mib_aligned": sum(1 for c in gets if _aligned(c.range, 8 * MiB)),
        "max_concurrent": most, "mean_concurrent": area / span if span else 0.0,
        "span_s": span, "no_get_in_flight_s": idle, "ttfb_median_s": statistics.median(ttfb), "ttfb_max_s": ttfb[-1],
        "mbps_over_span": sum(sizes) / span / 1e6 if span else 0.0,
    })
    return out


def _aligned(rng: str, unit: int) -> bool:
    try:
        start = int(rng.split("=")[1].split("-")[0])
    except (IndexError, ValueError):
        return False
    return start % unit == 0


def traced_load(target: Any, state: dict[str, Any], endpoint: str, s3: Any) -> dict[str, Any]:
    """Save through `target`, then load through a TraceProxy: the load's request pattern."""
    import torch.distributed.checkpoint as dcp

    from bench.checkpoint_bench import delete_prefix, make_state, same_bytes, state_bytes
    ckpt = f"trace-{target.name}-{int(time.time() * 1000)}"
    dcp.save(state, storage_writer=target.writer(ckpt))
    from bench.promhist import quantiles, scrape
    port = int(endpoint.rsplit(":", 1)[1])
    before = scrape(endpoint)
    with TraceProxy(port) as proxy:
        traced = type(target)(proxy.endpoint, target.threads, target.root, target.part_mib)
        fresh = make_state(state_bytes(state), "cpu", fill=False)
        t0 = time.perf_counter()
        dcp.load(fresh, storage_reader=traced.reader(ckpt))
        wall = time.perf_counter() - t0
    after = scrape(endpoint)
    out = summarize(proxy.calls)
    if os.environ.get("REQTRACE_HEADERS"):
        t0 = min(c.start for c in proxy.calls)
        for c in proxy.calls:
            print(f"{c.method} {c.range:24s} start {c.start - t0:6.3f} ttfb "
                  f"{c.first_byte - c.start:6.3f} end {c.end - t0:6.3f} {c.body}")
    out["load_s"] = wall
    for h in ("time_to_first_byte_seconds", "request_duration_seconds"):
        out[f"gateway_get_{h}"] = quantiles(before, after, f"zonegate_gateway_{h}", "GetObject")
    out["exact"] = same_bytes(state, fresh)
    delete_prefix(s3, ckpt)
    print(f"  trace {target.name}: {out}", flush=True)
    return out
