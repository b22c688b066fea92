"""Every metric the Grafana dashboard queries is exported: by a real node process's /metrics and
by the gateway's metrics (its registry here; tests/cluster/test_ops_cluster.py scrapes a running
gateway too)."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from erasure.repairqueue import RepairQueue
from gateway.server.metrics import GatewayMetrics
from tests.support.nodeproc import NodeCluster

pytestmark = pytest.mark.timeout(300)

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards" / \
    "zonegate.json"
PROMETHEUS_OWN = {"up"}  # made by Prometheus for every target, not by an exporter
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count",
                                                             "_created"),
            "gauge": ("",), "summary": ("_sum", "_count", "_created"), "info": ("_info",)}
_NAME = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b")
_PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "rate", "irate", "increase", "by",
                 "without", "histogram_quantile", "bool", "le", "on", "ignoring", "offset",
                 "and", "or", "unless", "topk", "bottomk", "delta", "deriv", "scalar",
                 "vector"}


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    assert exprs
    return exprs


def queried_metrics(expr: str) -> set[str]:
    # drop label matchers, label lists and range selectors: what is left names metrics
    bare = re.sub(r"\{[^}]*\}", "", expr)
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    return {w for w in _NAME.findall(bare)
            if w not in _PROMQL_WORDS and not re.fullmatch(r"\d+(\.\d+)?", w)}


def exported_names(text: str) -> set[str]:
    """Every sample name the exposition text can carry (families without samples yet count:
    a labelled counter shows its samples once a label combination has been used)."""
    out = set()
    for fam in text_string_to_metric_families(text):
        out.update(fam.name + s for s in SUFFIXES.get(fam.type, ("",)))
        out.update(s.name for s in fam.samples)
    return out


def test_the_parser_sees_through_promql():
    expr = ('histogram_quantile(0.99, sum by (le, operation) '
            '(rate(zonegate_gateway_request_duration_seconds_bucket{status=~"5.."}[5m])))')
    assert queried_metrics(expr) == {"zonegate_gateway_request_duration_seconds_bucket"}
    assert queried_metrics('sum(up{job="nodes"}) >= bool 9') == {"up"}


def test_every_dashboard_metric_is_exported(tmp_path):
    wanted = set().union(*(queried_metrics(e) for e in dashboard_exprs())) - PROMETHEUS_OWN
    assert any(w.startswith("zonegate_node_") for w in wanted)
    assert any(w.startswith("zonegate_gateway_") for w in wanted)
    gm = GatewayMetrics()
    # the backlog gauge is shown once a repair queue has been read
    gm.watch_repair_queue(RepairQueue(tmp_path / "state"))
    asyncio.run(gm.refresh_repair_backlog())
    exported = exported_names(gm.render().decode())
    with NodeCluster(tmp_path, 1, drives_per_node=1) as nodes:
        # loopback may scrape a node unsigned (its default --open-metrics loopback)
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                nodes.urls[0] + "/metrics", timeout=10) as resp:
            exported |= exported_names(resp.read().decode())
    missing = sorted(wanted - exported)
    assert not missing, f"the dashboard queries metrics nobody exports: {missing}"
