"""The cluster layout owned by the cluster (issue 25), end to end: two real `zonegate serve`
processes (two uvicorn workers each) on one PostgreSQL and seven real nodes, the layout
changed with the real `zonegate layout` CLI, data through boto3.

A change applied through one gateway's config is adopted by every worker of both gateways
without a restart; a node added by the layout (a node process the cluster files never named)
gets new fragments; a draining node gets none; a removed node is reported gone and the census
counts exactly its parts as below full redundancy; a new drive in a used slot is reported by
/health/cluster until `zonegate layout drive replace` registers it; `zonegate status` says the
same and exits 2; `zonegate repair` then brings every part back to k+m fragments on the
layout's nodes."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.gwcluster import wait_for
from tests.support.multigwcluster import GatewayProc, MultiGateway
from tests.support.nodeproc import NodeCluster, create_emulated_drive
from tests.support.pgserver import PgServer, pg_server  # noqa: F401 - the session fixture

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
NEWCOMER = 6  # node06: in no cluster file, added by the layout


class SixOfSeven(MultiGateway):
    """The cluster files name node00..node05 only."""

    def config(self, gw: GatewayProc) -> dict[str, Any]:
        doc = super().config(gw)
        doc["nodes"] = doc["nodes"][:NEWCOMER]
        return doc


@pytest.fixture(scope="module")
def mg(pg_server: PgServer, tmp_path_factory) -> SixOfSeven:  # noqa: F811
    root = tmp_path_factory.mktemp("layoutgw")
    nodes = NodeCluster(root / "nodes", 7, drives_per_node=2, secret="gw-test-secret")
    cluster = SixOfSeven(root, pg_server.new_database("layout"), gateways=2, workers=2,
                         node_cluster=nodes, password_file=str(pg_server.password_file),
                         gateway_options={"layout_poll_seconds": 0.5, "census_seconds": 0.5,
                                          # what the layout alone does: no data mover here
                                          "mover_interval_seconds": 0})
    with cluster:
        yield cluster


def health(mg: MultiGateway, i: int) -> dict:
    try:
        with _NO_PROXY.open(mg.gws[i].endpoint + "/health/cluster", timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def everywhere(mg: MultiGateway, pred, timeout: float = 60.0) -> dict:
    """Wait until `pred(health)` holds on both gateways for 6 answers in a row each (so both
    workers of each answered so); returns the last answer."""
    last: dict = {}

    def ok() -> bool:
        nonlocal last
        for i in range(len(mg.gws)):
            for _ in range(6):
                last = health(mg, i)
                if not pred(last):
                    return False
        return True
    assert wait_for(ok, timeout), last
    return last


def zg(mg: MultiGateway, *args: str, ok: int = 0) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "gateway.cli", *args, "--config",
                        str(mg.gws[0].config_path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == ok, (r.returncode, r.stdout, r.stderr)
    return r


def archives(mg: MultiGateway, i: int) -> set[str]:
    nc = mg.nodes
    out: set[str] = set()
    after = ""
    while True:
        q = {"prefix": "", "after": after, "limit": "1000"}
        from urllib.parse import urlencode
        req = urllib.request.Request(f"{nc.urls[i]}/v1/records?{urlencode(q)}",
                                     headers=nc.headers(i, "GET", "/v1/records", q))
        with _NO_PROXY.open(req, timeout=10) as resp:
            doc = json.load(resp)
        out.update(r["id"] for r in doc["records"])
        if not doc.get("next"):
            return out
        after = doc["next"]


def data(key: str, n: int = 150_000) -> bytes:
    return hashlib.shake_256(key.encode()).digest(n)


_CLIENTS: dict[int, list[Any]] = {}


def clients(mg: MultiGateway) -> list[Any]:
    """One boto3 client per gateway, made once (a client per request costs its creation
    and a new connection each time)."""
    if id(mg) not in _CLIENTS:
        _CLIENTS[id(mg)] = [mg.client(i) for i in range(len(mg.gws))]
    return _CLIENTS[id(mg)]


def put_many(mg: MultiGateway, prefix: str, n: int) -> list[str]:
    """PUT n keys, alternately through each gateway, concurrently."""
    keys = [f"{prefix}/{i:03d}" for i in range(n)]
    cs = clients(mg)
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda jk: cs[jk[0] % 2].put_object(Bucket="shape", Key=jk[1],
                                                        Body=data(jk[1])), enumerate(keys)))
    return keys


def read_back(mg: MultiGateway, keys: list[str]) -> None:
    """Every key reads back exact, alternately through each gateway, concurrently."""
    cs = clients(mg)
    with ThreadPoolExecutor(8) as ex:
        got = list(ex.map(lambda jk: cs[jk[0] % 2].get_object(Bucket="shape", Key=jk[1])
                          ["Body"].read(), enumerate(keys)))
    for key, body in zip(keys, got, strict=True):
        assert body == data(key), key


def test_layout_changes_reach_every_gateway_and_node(mg: SixOfSeven) -> None:
    ids = mg.nodes.ids
    mg.client(0).create_bucket(Bucket="shape")
    keys = put_many(mg, "v1", 20)
    doc = everywhere(mg, lambda h: h["layout"]["layout_version"] == 1)
    assert doc["layout"]["nodes_expected"] == ids[:NEWCOMER] and doc["status"] == "ok"
    assert not archives(mg, NEWCOMER)

    # add node06 through the CLI on gateway 0's config: both gateways adopt it
    zg(mg, "layout", "node", "add", ids[NEWCOMER], mg.nodes.urls[NEWCOMER],
       *(x for d in mg.nodes.drive_paths(NEWCOMER) for x in ("--drive", str(d))))
    zg(mg, "layout", "apply", "--note", "grow")
    everywhere(mg, lambda h: h["layout"]["layout_version"] == 2
               and ids[NEWCOMER] in h["layout"]["nodes_expected"] and h["nodes"] == 7)
    keys += put_many(mg, "v2", 30)
    assert len(archives(mg, NEWCOMER)) > 0  # new writes reach the new node

    # drain node01: no new fragment goes there, through either gateway
    zg(mg, "layout", "node", "drain", ids[1])
    zg(mg, "layout", "apply")
    everywhere(mg, lambda h: h["layout"]["nodes_draining"] == [ids[1]])
    before = archives(mg, 1)
    keys += put_many(mg, "v3", 30)
    assert archives(mg, 1) <= before
    read_back(mg, keys)

    # remove the drained node01 (gone): reported, never asked, and the census counts
    # exactly its parts as below full redundancy (the mover has not rebuilt them here)
    on1 = archives(mg, 1)
    parts_on1 = {a.rsplit(".f", 1)[0] for a in on1}
    assert len(parts_on1) == len(on1) > 0
    zg(mg, "layout", "node", "remove", ids[1], "--force")  # it holds data: not moved here
    zg(mg, "layout", "apply")
    doc = everywhere(mg, lambda h: h["layout"]["nodes_gone"] == [ids[1]]
                     and (h.get("census") or {}).get("layout_version") == 4)
    assert doc["parts_below_full_redundancy"] == len(parts_on1), doc["census"]
    assert doc["status"] == "degraded" and ids[1] not in doc["layout"]["nodes_expected"]

    # a new empty drive in node04's second slot: reported until the layout registers it
    drive = mg.nodes.drive_paths(4)[1]
    mg.nodes.terminate(4)
    shutil.rmtree(drive)
    create_emulated_drive(drive, mg.nodes.geometry)
    mg.nodes.restart(4, degraded=True)
    doc = everywhere(mg, lambda h: f"{ids[4]}:{drive}" in h["layout"]["drives_new"])
    assert any("zonegate layout drive replace" in p for p in doc["layout"]["problems"])
    r = zg(mg, "status", "--json", ok=2)
    st = json.loads(r.stdout)
    assert st["layout"]["nodes_gone"] == [ids[1]]
    assert f"{ids[4]}:{drive}" in st["layout"]["drives_new"]
    zg(mg, "layout", "drive", "replace", ids[4], str(drive))
    zg(mg, "layout", "apply")
    everywhere(mg, lambda h: h["layout"]["drives_new"] == []
               and h["layout"]["drives_replaced"] == [f"{ids[4]}:{drive}"])
    # every object still reads back exact (node04's fragments are gone, node02 is gone)
    read_back(mg, keys)
    assert Counter(h["layout"]["layout_version"] for h in (health(mg, 0), health(mg, 1))) \
        == Counter({5: 2})
    # Prometheus: every worker of both gateways is on v5
    for gw in mg.gws:
        with _NO_PROXY.open(gw.endpoint + "/metrics", timeout=10) as r:
            text = r.read().decode()
        assert "zonegate_gateway_layout_version 5.0" in text, [
            x for x in text.splitlines() if "layout_version" in x]
    # `zonegate repair` works on the layout's nodes (node06 included, node01 not): it
    # rebuilds what node01 and node04's old drive held, and nothing twice
    zg(mg, "repair")
    doc = everywhere(mg, lambda h: (h.get("census") or {}).get("below_full") == 0)
    held = [a for i in range(7) if i != 1 for a in archives(mg, i)]
    assert len(held) == len(set(held)) == 6 * doc["census"]["parts"]
