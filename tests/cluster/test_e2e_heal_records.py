"""The gateway's healer records what it rebuilds (erasure/records.py through the gateway's
metadata store): objects written while a node was down lack that node's fragment (a
degraded write, queued for repair); once the node returns the healer rebuilds it, and the
object's record names it again, so GETs decode from the data fragments instead of going
degraded for good (before, the record kept the fragment as missing: every read of an object
whose missing fragment was a data one needed parity)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import urllib.request

import pytest

from tests.support.gwcluster import Gateway, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
VICTIM = 2
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def metric(g: Gateway, name: str) -> float:
    with _NO_PROXY.open(g.endpoint + "/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def repairs_left(g: Gateway) -> int:
    with sqlite3.connect(g.meta_path) as db:
        return db.execute("SELECT COUNT(*) FROM repairs").fetchone()[0]


def recorded_missing(g: Gateway) -> list[tuple[str, list[int]]]:
    """(key, missing fragment indexes) of every object part recorded with some missing."""
    with sqlite3.connect(g.meta_path) as db:
        rows = db.execute("SELECT key, parts FROM objects").fetchall()
    return [(bytes(k).decode(), p["layout"]["missing"]) for k, parts in rows
            for p in json.loads(parts) if p["layout"].get("missing")]


def test_objects_written_with_a_node_down_read_whole_once_healed(tmp_path):
    # 4+2 on 6 nodes: no spare, a write with one down lacks its fragment; the node's return
    # is seen by a health check a second later
    g = Gateway(tmp_path, erasure_options={"health_interval": 1})
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="heal")
        g.nodes.kill(VICTIM)
        bodies = {f"k{n:02d}": os.urandom(100_000) for n in range(10)}
        for key, body in bodies.items():
            s3.put_object(Bucket="heal", Key=key, Body=body)
        assert metric(g, "zonegate_gateway_degraded_writes_total") == len(bodies)
        assert len(recorded_missing(g)) == len(bodies)
        g.nodes.restart(VICTIM)
        assert wait_for(lambda: repairs_left(g) == 0, timeout=120), g.log_tail(60)
        assert recorded_missing(g) == []
        before = metric(g, "zonegate_gateway_degraded_reads_total")
        for key, body in bodies.items():
            assert s3.get_object(Bucket="heal", Key=key)["Body"].read() == body
        assert metric(g, "zonegate_gateway_degraded_reads_total") == before
    finally:
        g.stop()
