"""Handoff fragments moved home and lost fragments rebuilt once, by one of the gateway's two
workers (issue 24, D5): with two of seven nodes down, writes hand some fragments to the spare
node and leave others missing (queued for repair); when the nodes return, both workers see
it. Each fragment is moved home once (a lease per part in the shared metadata store) and each
missing one rebuilt once, from where the part's fragments are now (not the layout stored
when it was queued), so that every part ends with all k+m fragments, one copy each."""

from __future__ import annotations

import json
import re
import sqlite3
import urllib.request
from collections import Counter

import pytest

from erasure.layout import parse_archive_id
from tests.support.gwcluster import Gateway, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
DOWN = (1, 4)
PARTS, SIZE = 40, 3 * 1024 * 1024  # enough moving for both workers' wake-ups to overlap
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def nodes_down(g: Gateway) -> list[str]:
    try:
        with _NO_PROXY.open(g.endpoint + "/health/cluster", timeout=10) as r:
            return json.load(r)["nodes_down"]
    except urllib.error.HTTPError as e:  # 503 while degraded, with the same body
        return json.loads(e.read())["nodes_down"]


def copies(g: Gateway) -> Counter:
    """Archive id -> how many nodes hold it."""
    out: Counter = Counter()
    for i, url in enumerate(g.nodes.urls):
        q = {"prefix": "", "after": "", "limit": "1000"}
        req = urllib.request.Request(f"{url}/v1/records?{urllib.parse.urlencode(q)}",
                                     headers=g.nodes.headers(i, "GET", "/v1/records", q))
        with _NO_PROXY.open(req, timeout=10) as resp:
            out.update(r["id"] for r in json.load(resp)["records"])
    return out


def settled(g: Gateway, parts: int) -> bool:
    """Every part whole (k+m fragments, one copy each), nothing queued or handed off."""
    with sqlite3.connect(g.meta_path) as db:
        if db.execute("SELECT COUNT(*) FROM repairs").fetchone()[0]:
            return False
    handoff = g.root / "erasure" / "handoff"
    if handoff.is_dir() and any(not p.name.startswith(".") for p in handoff.iterdir()):
        return False
    have = copies(g)
    widths = Counter(parse_archive_id(a)[0] for a in have if parse_archive_id(a))
    return (len(widths) >= parts and set(widths.values()) == {g.k + g.m}
            and set(have.values()) == {1})


def test_two_workers_move_and_heal_each_fragment_once(tmp_path):
    g = Gateway(tmp_path, nodes=7, workers=2, erasure_options={"health_interval": 1})
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="once")
        for i in DOWN:
            g.nodes.kill(i)
        assert wait_for(lambda: len(nodes_down(g)) == len(DOWN), timeout=60)
        for n in range(PARTS):
            s3.put_object(Bucket="once", Key=f"k{n:02d}", Body=bytes([n]) * SIZE)
        for i in DOWN:
            g.nodes.restart(i)
        assert wait_for(lambda: settled(g, PARTS), timeout=300), g.log_tail(60)

        log = g.log_path.read_text(errors="replace")
        moved = Counter(re.findall(r"moved (\S+) home:", log))
        healed = Counter(re.findall(r"healed (\S+):", log))
        assert moved and healed, log[-4000:]  # both kinds of work were done
        assert set(moved.values()) == {1}, [a for a, c in moved.items() if c > 1]
        assert set(healed.values()) == {1}, [p for p, c in healed.items() if c > 1]
        for n in range(PARTS):
            got = s3.get_object(Bucket="once", Key=f"k{n:02d}")["Body"].read()
            assert got == bytes([n]) * SIZE
    finally:
        g.stop()
