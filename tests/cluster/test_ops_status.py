"""`zonegate status` against real node processes: nodes up and down (a killed node is down),
drives, capacity, zones by condition, parts awaiting repair, exit status by quorum, and a
readable table for people."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from erasure.config import write_config
from tests.support.nodeproc import NodeCluster

pytestmark = pytest.mark.timeout(300)


def status(config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "gateway.cli", "status", "--config",
                           str(config), "--timeout", "3", *extra],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("status")
    nodes = NodeCluster(root / "nodes", 6, drives_per_node=2, secret="status-test-secret")
    nodes.start()
    config = root / "zonegate.toml"
    state = root / "erasure"
    write_config(config, {
        "secret": nodes.secret,
        "erasure": {"k": 4, "m": 2, "state_dir": str(state)},
        "nodes": [{"id": nid, "url": url, "drives": [str(d) for d in nodes.drive_paths(i)]}
                  for i, (nid, url) in enumerate(zip(nodes.ids, nodes.urls, strict=True))],
    })
    try:
        yield nodes, config, state
    finally:
        nodes.stop()


def test_status_json_with_every_node_up(cluster):
    nodes, config, state = cluster
    res = status(config, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["nodes_up"] == 6 and doc["nodes_down"] == []
    assert doc["write_quorum"] and doc["read_quorum"]
    assert [n["id"] for n in doc["nodes"]] == nodes.ids
    assert all(n["up"] and len(n["drives"]) == 2 for n in doc["nodes"])
    t = doc["totals"]
    assert t["drives"] == 12
    assert t["free_bytes"] > 0
    assert sum(t["zones_by_condition"].values()) > 0
    assert doc["parts_awaiting_repair"] is None  # no repair queue on this machine yet
    assert doc["erasure"] == {"k": 4, "m": 2, "write_quorum_needed": 5}


def test_status_reports_a_killed_node_as_down_and_the_quorum(cluster):
    nodes, config, state = cluster
    (state / "repair").mkdir(parents=True, exist_ok=True)
    nodes.kill(3)
    try:
        res = status(config, "--json")
        assert res.returncode == 2, res.stderr  # degraded, the write quorum holds
        doc = json.loads(res.stdout)
        assert doc["nodes_down"] == [nodes.ids[3]]
        down = next(n for n in doc["nodes"] if n["id"] == nodes.ids[3])
        assert not down["up"] and down["error"]
        assert doc["write_quorum"] and doc["read_quorum"]
        assert doc["totals"]["drives"] == 10
        assert doc["parts_awaiting_repair"] == 0

        text = status(config)
        assert text.returncode == 2
        assert "down" in text.stdout and nodes.ids[3] in text.stdout
        assert "repair backlog: 0 parts" in text.stdout

        nodes.kill(4)
        res = status(config, "--json")
        assert res.returncode == 3  # 4 nodes up, the write quorum is 5
        doc = json.loads(res.stdout)
        assert doc["nodes_down"] == [nodes.ids[3], nodes.ids[4]]
        assert not doc["write_quorum"] and doc["read_quorum"]
        assert "WRITE QUORUM LOST" in status(config).stdout
    finally:
        for i in (3, 4):
            if not nodes.nodes[i].running:
                nodes.restart(i)
    res = status(config, "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["nodes_down"] == []


def _rows(text: str, ids: list[str]) -> list[str]:
    return [ln for ln in text.splitlines() if ln.split()[:1] and ln.split()[0] in ids]


def test_status_fits_80_columns_one_line_per_node(cluster):
    nodes, config, _state = cluster
    res = subprocess.run([sys.executable, "-m", "gateway.cli", "status", "--config", str(config),
                          "--timeout", "3"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80, res.stdout
    rows = _rows(res.stdout, nodes.ids)
    assert [r.split()[0] for r in rows] == nodes.ids and all(" up " in r for r in rows)


def test_status_shows_zone_capacity_and_full_nodes_in_80_columns(cluster):
    """With the capacity figures newer nodes report (writable / stranded / garbage / live) and
    the gateway's nodes_full, and a node down, the table still fits 80 columns."""
    import asyncio
    import io

    from rich.console import Console

    from erasure.config import ClusterConfig
    from gateway.cli.status import gather_status, render

    nodes, config, _state = cluster
    doc = asyncio.run(gather_status(ClusterConfig.load(config), 3.0))
    for i, n in enumerate(doc["nodes"]):
        n["totals"].update(writable_bytes=(900 + i) * 2**30, stranded_bytes=3 * 2**20,
                           garbage_bytes=123 * 2**30, live_bytes=4 * 2**40,
                           zones_by_condition={"EMPTY": 1200, "IMPLICIT_OPEN": 12,
                                               "CLOSED": 3, "FULL": 29999, "NOT_WP": 4})
    doc["totals"].update(writable_bytes=5 * 2**40, stranded_bytes=18 * 2**20,
                         garbage_bytes=738 * 2**30)
    doc["nodes"][1].update(up=False, error="ClientConnectorError: Cannot connect to host "
                                          "127.0.0.1:1 ssl:default [Connection refused]")
    doc["nodes_down"] = [doc["nodes"][1]["id"]]
    doc["gateway_health"] = {"nodes_full": [nodes.ids[2]]}
    out = io.StringIO()
    render(doc, Console(file=out, width=80, force_terminal=False, highlight=False))
    text = out.getvalue()
    assert max(len(ln) for ln in text.splitlines()) <= 80, text
    assert [r.split()[0] for r in _rows(text, nodes.ids)] == nodes.ids, text
    header = next(ln for ln in text.splitlines() if ln.startswith("node "))
    assert header.split() == ["node", "state", "used", "writable", "live", "garbage",
                              "strand", "WA", "open", "full"]
    row = _rows(text, nodes.ids)[0].split()
    assert row[-2:] == ["12", "29999"] and row[3] == "900G"
    assert "5.0T writable" in text and "738G garbage" in text and "18.0M stranded" in text
    assert f"full: {nodes.ids[2]}" in text


def test_status_watch_repeats_until_interrupted(cluster):
    import signal

    _nodes, config, _state = cluster
    # -X faulthandler: should it ignore the SIGINT, a SIGABRT shows where each thread is.
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "gateway.cli", "status",
                             "--config", str(config), "--json", "--watch", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        docs = [json.loads(proc.stdout.readline()) for _ in range(3)]
        assert all(d["nodes_up"] == 6 for d in docs)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=30)  # drained: a full pipe blocks an exit
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            _out, err = proc.communicate(timeout=10)
            pytest.fail(f"status --watch still ran 30 s after SIGINT:\n{err[-6000:]}")
    assert proc.returncode == 0, err[-2000:]


def test_status_refuses_a_bad_config_in_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('secret = "x"\n')
    res = status(bad)
    assert res.returncode == 1
    assert res.stderr.startswith("zonegate: error:") and "secret" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_status_reads_the_repair_backlog_from_the_gateways_store(cluster, tmp_path):
    import asyncio
    import tomllib

    from gateway.metadata import SqliteStore
    nodes, config, state = cluster
    meta = tmp_path / "meta.sqlite"
    doc = tomllib.loads(config.read_text())
    doc["gateway"] = {"metadata": str(meta)}
    shared = tmp_path / "shared.toml"
    write_config(shared, doc)

    async def queue(n: int) -> None:
        s = SqliteStore(meta)
        for i in range(n):
            await s.repair_add({"part_uid": f"p{i}.p1"}, [1], "write: f01")
        await s.close()
    asyncio.run(queue(2))
    res = status(shared, "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["parts_awaiting_repair"] == 2  # what every gateway on that store shares
    assert out["repair_queue"] == f"metadata store {meta}"
    assert "repair backlog: 2 parts" in status(shared).stdout
