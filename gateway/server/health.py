"""The gateway's operator endpoints: /health/live, /health/ready, /health/cluster and /metrics.

- `/health/live`: 200 while the process runs.
- `/health/ready`: 200 when the metadata store answers and at least a write quorum of storage
  nodes is reachable; else 503 with the reason (a load balancer stops sending writes here).
- `/health/cluster`: JSON saying whether the write quorum (nodes up >= write_quorum) and the
  read quorum (at most m nodes down, so every whole part keeps k readable fragments) hold and
  which nodes are down; `nodes_full` lists the nodes that are up but out of writable space (no
  new fragments go there until they have room; not a failure by itself); 200 when both hold,
  else 503.
- `/metrics`: Prometheus text (gateway/server/metrics.py).

These paths are also valid S3 paths (`GET /metrics` lists a bucket named "metrics"). The S3 API
here refuses anonymous requests, so the two never collide: an unsigned GET or HEAD of one of
these paths is answered here, anything signed goes to the S3 app.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.server.metrics import ASGIApp, Receive, Scope, Send, metrics_endpoint

NODE_CHECK_TIMEOUT = 3.0  # a readiness probe must answer even when nodes hang
FRESH_FOR = 1.0  # node states younger than this are reused instead of asking again
READY_PATHS = ("/health/live", "/health/ready", "/health/cluster", "/metrics")


def is_signed(scope: Scope) -> bool:
    """Whether the request carries an S3 signature (header or presigned query)."""
    for name, _value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            return True
    qs = scope.get("query_string", b"").lower()
    return b"x-amz-signature=" in qs or b"signature=" in qs


async def refresh_nodes(cluster: Any) -> None:
    """Ask every node for readiness unless that was done within FRESH_FOR seconds; a check
    that takes longer than NODE_CHECK_TIMEOUT leaves the last known states."""
    clients = getattr(cluster, "clients", {}) or {}
    now = time.monotonic()
    if clients and all(now - getattr(c, "last_checked", 0.0) < FRESH_FOR
                       for c in clients.values()):
        return
    try:
        await asyncio.wait_for(cluster.check_health(), NODE_CHECK_TIMEOUT)
    except TimeoutError:
        pass


def cluster_health(cluster: Any) -> dict[str, Any]:
    """Quorum state from the cluster's current view of its nodes."""
    clients = getattr(cluster, "clients", {}) or {}
    down = sorted(nid for nid, c in clients.items() if not c.up)
    full = sorted(nid for nid, c in clients.items() if c.up and getattr(c, "full", False))
    scheme = cluster.scheme
    up = len(clients) - len(down)
    return {
        "nodes": len(clients),
        "nodes_up": up,
        "nodes_down": down,
        "nodes_full": full,
        "errors": {nid: clients[nid].last_error for nid in down if clients[nid].last_error},
        "k": scheme.k,
        "m": scheme.m,
        "write_quorum_needed": cluster.write_quorum,
        "write_quorum": up >= cluster.write_quorum,
        "read_quorum": len(down) <= scheme.m and up >= scheme.k,
    }


async def metadata_problem(gateway: Any) -> str | None:
    """None if the metadata store answers a query, else why not."""
    try:
        await asyncio.wait_for(gateway.store.get_bucket("zonegate-readiness-probe"),
                               NODE_CHECK_TIMEOUT)
    except TimeoutError:
        return f"metadata store: no answer within {NODE_CHECK_TIMEOUT:g} s"
    except Exception as e:  # any failure means "not ready"; the reason goes to the operator
        return f"metadata store: {type(e).__name__}: {e}"
    return None


async def readiness(gateway: Any) -> tuple[int, dict[str, Any]]:
    """(status, body) of /health/ready."""
    reasons = []
    problem = await metadata_problem(gateway)
    if problem:
        reasons.append(problem)
    cluster = gateway.storage.cluster
    await refresh_nodes(cluster)
    health = cluster_health(cluster)
    if not health["write_quorum"]:
        reasons.append(f"only {health['nodes_up']} of {health['nodes']} storage nodes reachable, "
                       f"the write quorum is {health['write_quorum_needed']} "
                       f"(down: {', '.join(health['nodes_down'])})")
    body = {"status": "not ready" if reasons else "ready", "reasons": reasons,
            "nodes_up": health["nodes_up"], "nodes_down": health["nodes_down"]}
    return (503 if reasons else 200), body


async def cluster_status(gateway: Any) -> tuple[int, dict[str, Any]]:
    """(status, body) of /health/cluster."""
    cluster = gateway.storage.cluster
    await refresh_nodes(cluster)
    health = cluster_health(cluster)
    ok = health["write_quorum"] and health["read_quorum"]
    return (200 if ok else 503), {"status": "ok" if ok else "degraded", **health}


async def _send_json(send: Send, status: int, body: dict[str, Any], head: bool) -> None:
    data = json.dumps(body, sort_keys=True).encode() + b"\n"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()),
                            (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": b"" if head else data})


def _json_endpoint(make: Callable[[Any], Awaitable[tuple[int, dict[str, Any]]]]) -> ASGIApp:
    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        gw = getattr(getattr(scope.get("app"), "state", None), "gateway", None)
        if gw is None:
            status, body = 503, {"status": "starting", "reasons": ["the gateway is starting"]}
        else:
            status, body = await make(gw)
        await _send_json(send, status, body, scope.get("method") == "HEAD")
    return endpoint


async def _live(_gw: Any) -> tuple[int, dict[str, Any]]:
    return 200, {"status": "live"}


class OperatorEndpoints:
    """ASGI middleware: unsigned GET/HEAD of the operator paths are answered here (see the
    module docstring); every other request goes on to the S3 app."""

    def __init__(self, app: ASGIApp, routes: dict[str, ASGIApp] | None = None) -> None:
        self.app = app
        self.routes = routes or {
            "/health/live": _json_endpoint(_live),
            "/health/ready": _json_endpoint(readiness),
            "/health/cluster": _json_endpoint(cluster_status),
            "/metrics": metrics_endpoint(),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") in ("GET", "HEAD"):
            endpoint = self.routes.get(scope.get("path", ""))
            if endpoint is not None and not is_signed(scope):
                await endpoint(scope, receive, send)
                return
        await self.app(scope, receive, send)


def install(app: Any) -> None:
    """Add the operator endpoints and request metrics to the gateway's starlette app and
    instrument its erasure cluster (call in create_app, before the app starts)."""
    from gateway.server.metrics import MetricsMiddleware, instrument_cluster
    gw = getattr(app.state, "gateway", None)
    cluster = getattr(getattr(gw, "storage", None), "cluster", None)
    if cluster is not None:
        instrument_cluster(cluster)
    # added last = outermost: operator requests are not counted as S3 requests
    app.add_middleware(MetricsMiddleware)
    app.add_middleware(OperatorEndpoints)
