"""The gateway's node-call metrics, now timed by the node client itself (not aiohttp tracing):
every call to a real node process is counted under its node, operation and outcome
(ok / not_found / unavailable) with a latency sample, and aiohttp TraceConfigs given to the
same session still work beside the observer."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from erasure.config import NodeSpec
from erasure.nodeclient import NodeClient, NodeUnavailable, RecordMissing, make_session
from gateway.server.metrics import GatewayMetrics, NodeCallMetrics
from tests.support.nodeproc import NodeCluster

pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
pytestmark = pytest.mark.timeout(120)
SECRET = "node-call-metrics-secret"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    with NodeCluster(tmp_path_factory.mktemp("nodes"), 1, secret=SECRET) as c:
        yield c


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def value(m: GatewayMetrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


async def body(data: bytes):
    yield data


def test_every_node_call_is_counted_and_timed(node: NodeCluster) -> None:
    m = GatewayMetrics(CollectorRegistry())
    nid, url = node.ids[0], node.urls[0]
    dead = f"http://127.0.0.1:{closed_port()}"
    trace_starts: list[str] = []

    async def on_start(_s, _ctx, params) -> None:
        trace_starts.append(params.method)

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)

    async def run() -> None:
        async with make_session(trace_configs=[NodeCallMetrics(m), trace]) as session:
            c = NodeClient(NodeSpec(nid, url, "d", ()), SECRET, session, timeout=10)
            gone = NodeClient(NodeSpec("gone", dead, "d", ()), SECRET, session, timeout=2)
            await c.put("metrics-test.r0", body(b"x" * 1000), length=1000, stream="s",
                        meta=b"{}")
            assert await c.get_bytes("metrics-test.r0", 0, 10) == b"x" * 10
            assert (await c.head("metrics-test.r0")).length == 1000
            with pytest.raises(RecordMissing):
                await c.get_bytes("metrics-test.nope")
            assert await c.delete("metrics-test.r0")
            assert await c.check()
            with pytest.raises(NodeUnavailable):
                await gone.put("metrics-test.r1", body(b"y"), length=1, stream="s", meta=b"")
            assert not await gone.check()

    asyncio.run(run())
    calls = "zonegate_gateway_node_requests_total"
    for op, outcome in [("put", "ok"), ("get", "ok"), ("head", "ok"), ("get", "not_found"),
                        ("delete", "ok"), ("health", "ok")]:
        assert value(m, calls, node=nid, operation=op, outcome=outcome) == 1, (op, outcome)
    assert value(m, calls, node="gone", operation="put", outcome="unavailable") == 1
    assert value(m, calls, node="gone", operation="health", outcome="unavailable") == 1
    latency = "zonegate_gateway_node_request_duration_seconds"
    assert value(m, latency + "_count", node=nid, operation="get") == 2
    assert value(m, latency + "_count", node=nid, operation="put") == 1
    assert 0 < value(m, latency + "_sum", node=nid, operation="put") < 60
    # a TraceConfig beside the observer still sees the requests aiohttp's client makes (record
    # GETs and PUTs go over the lean connections of erasure/nodeget.py and nodeput.py)
    assert trace_starts.count("DELETE") == 1 and "PUT" not in trace_starts


def test_a_session_without_observers_times_nothing(node: NodeCluster) -> None:
    async def run() -> tuple[int, tuple]:
        async with make_session() as session:
            c = NodeClient(NodeSpec(node.ids[0], node.urls[0], "d", ()), SECRET, session)
            return await c.check(), c.observers

    up, observers = asyncio.run(run())
    assert up and observers == ()
