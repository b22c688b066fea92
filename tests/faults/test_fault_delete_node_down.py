"""Objects deleted while a node is down (issue 24, D6), on real processes: the sweeper frees
the fragments on the nodes that are up and keeps an orphan entry naming the node that is
down; the deletion records stay pending. When the node returns, the gateway finishes both at
once (its node-return wake-up makes the entries due and wakes the sweeper), not a minute or
more later (the entries' retry delay, or a lease)."""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request

import pytest

from tests.support.gwcluster import Gateway, archive_ids, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
DOWN = 3
# Well inside the minute the entries used to wait, well beyond the gateway's 5 s health
# interval plus a sweep on a loaded machine.
BOUND = 40.0
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def nodes_down(g: Gateway) -> list[str]:
    try:
        with _NO_PROXY.open(g.endpoint + "/health/cluster", timeout=10) as r:
            return json.load(r)["nodes_down"]
    except urllib.error.HTTPError as e:
        return json.loads(e.read())["nodes_down"]


def unfinished(g: Gateway) -> tuple[int, int]:
    """(orphan entries, deletion records not done)."""
    with sqlite3.connect(g.meta_path) as db:
        return (db.execute("SELECT COUNT(*) FROM orphans").fetchone()[0],
                db.execute("SELECT COUNT(*) FROM deletions WHERE done=0").fetchone()[0])


def test_deletes_while_a_node_is_down_finish_when_it_returns(tmp_path):
    g = Gateway(tmp_path, nodes=6, erasure_options={"health_interval": 1})  # returns seen soon
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="gone")
        base = archive_ids(g)
        for n in range(8):
            s3.put_object(Bucket="gone", Key=f"k{n}", Body=bytes([n]) * 200_000)
        g.nodes.kill(DOWN)
        assert wait_for(lambda: nodes_down(g) == [g.nodes.ids[DOWN]], timeout=60)
        for n in range(8):
            s3.delete_object(Bucket="gone", Key=f"k{n}")
        # freed on the nodes that are up; the rest waits for the node
        assert wait_for(lambda: unfinished(g)[0] == 8 and unfinished(g)[1] == 8, timeout=60), \
            unfinished(g)
        g.nodes.restart(DOWN)
        assert wait_for(lambda: unfinished(g) == (0, 0), timeout=BOUND), \
            (unfinished(g), g.log_tail(40))
        assert archive_ids(g) == base  # every fragment of the deleted objects is gone
    finally:
        g.stop()
