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
from tests.nodeproc import NodeCluster

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
        assert "parts awaiting repair: 0" in text.stdout

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


def test_status_refuses_a_bad_config_in_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('secret = "x"\n')
    res = status(bad)
    assert res.returncode == 1
    assert res.stderr.startswith("zonegate: error:") and "secret" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
