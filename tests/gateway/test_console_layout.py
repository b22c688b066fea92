"""The console's layout view (`GET /console/api/layout`) against a real gateway, its data
mover and real nodes (two drives each): it needs the session cookie; it shows the layout
version, note and scheme, every node with its domain, weight, state, reach, fill against its
share and its drives; a drive drain staged with the real `zonegate layout` CLI shows as a
staged change, and once applied the new version, the drive draining, the mover's run to done
(the same figures `zonegate status --json` prints) and the drained drive with no records and
every zone empty."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.support.consolehttp import Http
from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY, Gateway

pytestmark = pytest.mark.timeout(300)
NODES = 6


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("console-layout"), nodes=NODES, drives_per_node=2,
                gateway_options={"mover_interval_seconds": 1, "layout_poll_seconds": 1})
    g.start()
    s3 = g.client()
    s3.create_bucket(Bucket="shape")
    for i in range(12):
        s3.put_object(Bucket="shape", Key=f"o{i}", Body=bytes([i]) * (64 << 10))
    try:
        yield g
    finally:
        g.stop()


def zg(g: Gateway, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "gateway.cli", *args, "--config",
                        str(g.config_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 2), (r.returncode, r.stdout, r.stderr)
    return r


def layout(h: Http) -> dict[str, Any]:
    status, doc = h.get_json("layout")
    assert status == 200, doc
    return doc


def wait_layout(h: Http, pred: Any, seconds: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        doc = layout(h)
        if pred(doc):
            return doc
        assert time.monotonic() < deadline, json.dumps(
            {**doc, "nodes": [{k: n[k] for k in ("id", "up", "state", "fill")} | {
                "drives": [{k: d[k] for k in ("state", "records", "empty_zones", "seq_zones")}
                           for d in n["drives"]]} for n in doc["nodes"]]})
        time.sleep(0.3)


def test_the_layout_view_needs_a_session(gw):
    status, doc = Http(gw.port).get_json("layout")
    assert status == 401 and doc["error"] == "Unauthorized"


def test_the_layout_view_follows_a_drive_drain_to_every_zone_empty(gw):
    h = Http(gw.port)
    assert h.login(ACCESS_KEY, SECRET_KEY)[0] == 200
    # the mover tallies at start-up: the fill of each node against its share comes with it
    doc = wait_layout(h, lambda d: d["moves"] and d["moves"]["phase"] == "done"
                      and d["fill"] is not None)
    assert doc["layout"]["version"] == 1 and (doc["layout"]["k"], doc["layout"]["m"]) == (4, 2)
    assert doc["staged"] == [] and doc["problems"] == []
    assert [n["id"] for n in doc["nodes"]] == gw.nodes.ids
    for n in doc["nodes"]:
        assert n["up"] is True and n["state"] == "active" and n["weight"] == 1
        assert n["domain"] and n["url"].startswith("http://127.0.0.1:")
        assert n["fill"]["held"] > 0 and n["fill"]["share"] > 0
        assert len(n["drives"]) == 2 and all(d["state"] == "active" and d["present"]
                                             for d in n["drives"])
    assert sum(d["records"] for n in doc["nodes"] for d in n["drives"]) >= 12 * 6

    # stage a drain of node01's fuller drive: shown as staged, the layout still v1
    node = doc["nodes"][1]
    drive = max(node["drives"], key=lambda d: d["records"])
    assert drive["records"] > 0 and drive["empty_zones"] < drive["seq_zones"]
    zg(gw, "layout", "drive", "drain", node["id"], drive["path"])
    doc = layout(h)
    assert [c["op"] for c in doc["staged"]] == ["drive drain"]
    assert node["id"] in doc["staged"][0]["text"] and doc["layout"]["version"] == 1

    zg(gw, "layout", "apply", "--note", "retire a drive")
    doc = wait_layout(h, lambda d: d["layout"]["version"] == 2 and d["moves"]["version"] == 2
                      and d["moves"]["phase"] == "done")
    assert doc["layout"]["note"] == "retire a drive" and doc["staged"] == []
    assert doc["moves"]["failed"] == 0 and doc["moves"]["stuck"] == 0
    assert doc["moves"]["active"] is False and doc["moves"]["eta_seconds"] == 0
    assert doc["moves"]["drive_records"] >= drive["records"] - 1

    # the drained drive: no records, and the node resets every zone of it
    def drained(d: dict[str, Any]) -> bool:
        x = next(x for x in d["nodes"][1]["drives"] if x["path"] == drive["path"])
        return x["records"] == 0 and x["empty_zones"] == x["seq_zones"]
    doc = wait_layout(h, drained, 30)
    x = next(x for x in doc["nodes"][1]["drives"] if x["path"] == drive["path"])
    assert x["state"] == "draining" and x["layout_state"] == "draining"

    # the same figures as `zonegate status --json` (one stored run, one computation)
    status = json.loads(zg(gw, "status", "--json").stdout)
    assert status["moves"] == layout(h)["moves"]
    there = next(d for n in status["nodes"] if n["id"] == node["id"] for d in n["drives"]
                 if d["path"] == drive["path"])
    assert there["records"] == 0 and there["empty_zones"] == there["seq_zones"] > 0
