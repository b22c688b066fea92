"""One repair queue for every gateway: real `zonegate serve` processes on one real PostgreSQL.

A part written while a node is down is queued once (in the store, whichever gateway wrote or
read it) and healed once, by exactly one gateway, when the node returns; a gateway SIGKILLed
while it holds a repair lease leaves the part to the other once the lease runs out; the queue
files an older gateway kept under `erasure.state_dir` are moved into the store at start.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import time
import urllib.request
import uuid
from collections import Counter
from typing import Any

import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from erasure.codec import Scheme
from erasure.layout import PartLayout
from tests.support.gwcluster import wait_for
from tests.support.multigwcluster import MultiGateway
from tests.support.pgserver import PASSWORD, PgServer, pg_server  # noqa: F401 - the session fixture

MiB = 1024 * 1024
LEASE = 3.0  # seconds: short, so that a dead gateway's lease runs out within the test
DOWN = 5     # the node this module takes down and brings back
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Db:
    """The gateways' database, queried from the test (one connection, its own loop)."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(url, password=PASSWORD))

    def rows(self, sql: str, *args: Any) -> list[Any]:
        return self.loop.run_until_complete(self.conn.fetch(sql, *args))

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


@pytest.fixture(scope="module")
def env(pg_server: PgServer, tmp_path_factory):  # noqa: F811
    url = pg_server.new_database("repair")
    root = tmp_path_factory.mktemp("multigw-repair")
    cluster = MultiGateway(root, url, gateways=2, password_file=str(pg_server.password_file),
                           gateway_options={"repair_lease_seconds": LEASE})
    legacy = seed_legacy_queue(root / "erasure0")
    with cluster:
        db = Db(url)
        try:
            yield cluster, db, legacy
        finally:
            db.close()


def seed_legacy_queue(state_dir) -> dict[str, Any]:
    """Files as a gateway before the shared queue wrote them: a repair record and an
    unfinished deletion."""
    layout = PartLayout("legacy0.p1", 10, Scheme(4, 2, MiB), {i: f"node0{i}" for i in range(6)},
                        [1], 0)
    (state_dir / "repair").mkdir(parents=True)
    (state_dir / "repair" / "legacy0.p1.json").write_text(json.dumps(
        {"layout": layout.to_dict(), "indexes": [1], "reason": "write: f01: node down",
         "since": time.time() - 60}))
    (state_dir / "deleting").mkdir()
    (state_dir / "deleting" / "legacy1.p1").write_text(json.dumps(
        {"since": time.time() - 60, "done": False}))
    return {"dir": state_dir, "repair": "legacy0.p1", "deletion": "legacy1.p1"}


def metric(mg: MultiGateway, i: int, name: str) -> float | None:
    with _NO_PROXY.open(mg.gws[i].endpoint + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                return s.value
    return None


def healed(mg: MultiGateway) -> list[float]:
    return [metric(mg, i, "zonegate_gateway_healed_parts_total") or 0.0
            for i in range(len(mg.gws))]


def part_uid(db: Db, bucket: str, key: str) -> str:
    [row] = db.rows("SELECT parts FROM objects WHERE bucket=$1 AND key=$2", bucket,
                    key.encode())
    return json.loads(row[0])[0]["layout"]["part_uid"]


def fragment_copies(mg: MultiGateway, uid: str) -> Counter[int]:
    """Fragment index -> how many nodes hold it."""
    from urllib.parse import urlencode
    out: Counter[int] = Counter()
    for i, url in enumerate(mg.nodes.urls):
        if not mg.nodes.nodes[i].running:
            continue
        q = {"prefix": uid + ".", "after": "", "limit": "1000"}
        req = urllib.request.Request(f"{url}/v1/records?{urlencode(q)}",
                                     headers=mg.nodes.headers(i, "GET", "/v1/records", q))
        with _NO_PROXY.open(req, timeout=10) as resp:
            for r in json.load(resp)["records"]:
                out[int(r["id"].rsplit(".f", 1)[1])] += 1
    return out


def queued(db: Db) -> dict[str, list[int]]:
    return {r[0]: json.loads(r[1]) for r in db.rows("SELECT part_uid, indexes FROM repairs "
                                                    "WHERE part_uid NOT LIKE 'legacy%'")}


def settled(db: Db) -> None:
    """Nothing queued: a gateway that has not yet seen the node of the last test come back
    may have written the new bucket's marker without its fragment (healed once it does)."""
    assert wait_for(lambda: not queued(db), 60), queued(db)


def body(n: int, tag: str) -> bytes:
    return hashlib.shake_256(tag.encode()).digest(n)


def test_queue_files_of_an_older_gateway_move_into_the_store(env) -> None:
    mg, db, legacy = env
    rows = db.rows("SELECT indexes, reason FROM repairs WHERE part_uid=$1", legacy["repair"])
    assert [(json.loads(r[0]), r[1]) for r in rows] == [([1], "write: f01: node down")]
    # pending when moved; the gateways' start may have finished it since (nothing to delete)
    assert db.rows("SELECT done FROM deletions WHERE part_uid=$1", legacy["deletion"])
    assert not (legacy["dir"] / "repair").exists() and not (legacy["dir"] / "deleting").exists()
    db.rows("DELETE FROM repairs WHERE part_uid=$1", legacy["repair"])  # a part that never was


def test_part_written_while_a_node_is_down_is_queued_once_and_healed_once(env) -> None:
    mg, db, _ = env
    a, b = mg.client(0), mg.client(1)
    bucket = "heal-" + uuid.uuid4().hex[:8]
    a.create_bucket(Bucket=bucket)
    settled(db)
    before = sum(healed(mg))
    mg.nodes.kill(DOWN)
    try:
        keys = [f"k{i}" for i in range(4)]
        for i, key in enumerate(keys):  # two written through each gateway
            (a if i % 2 else b).put_object(Bucket=bucket, Key=key, Body=body(200_000, key))
        uids = {part_uid(db, bucket, k): k for k in keys}
        assert set(queued(db)) == set(uids)
        assert all(len(ix) == 1 for ix in queued(db).values())
        for key in keys:  # degraded reads through the other gateway note the same damage
            (b if keys.index(key) % 2 else a).get_object(Bucket=bucket, Key=key)["Body"].read()
        assert set(queued(db)) == set(uids)  # still one record per part
        # both gateways report the shared queue, not their own share of it
        assert [metric(mg, i, "zonegate_gateway_parts_awaiting_repair")
                for i in range(2)] == [4.0, 4.0]
    finally:
        mg.nodes.restart(DOWN)
    assert wait_for(lambda: not queued(db), 90), (queued(db), mg.logs())
    assert sum(healed(mg)) - before == 4  # each part healed once, by one gateway
    for uid in uids:
        assert fragment_copies(mg, uid) == Counter({i: 1 for i in range(6)}), uid
    for key in keys:
        assert b.get_object(Bucket=bucket, Key=key)["Body"].read() == body(200_000, key)


def test_a_gateway_killed_holding_a_repair_lease_leaves_the_part_to_the_other(env) -> None:
    mg, db, _ = env
    a = mg.client(0)
    bucket = "lease-" + uuid.uuid4().hex[:8]
    a.create_bucket(Bucket=bucket)
    settled(db)
    data = body(48 * MiB, bucket)  # big enough that its heal holds the lease a while
    gw1 = mg.gws[1].proc
    before = metric(mg, 1, "zonegate_gateway_healed_parts_total") or 0.0
    mg.nodes.kill(DOWN)
    os.killpg(gw1.pid, signal.SIGSTOP)  # gateway 1 takes no part until gateway 0 is dead
    try:
        a.put_object(Bucket=bucket, Key="big", Body=data)
        uid = part_uid(db, bucket, "big")
        assert list(queued(db)) == [uid], (uid, db.rows("SELECT * FROM repairs"))
        os.killpg(mg.gws[0].proc.pid, signal.SIGSTOP)
        mg.nodes.restart(DOWN)
        os.killpg(mg.gws[0].proc.pid, signal.SIGCONT)
        # gateway 0 sees the node back and claims the part: kill it mid-heal, lease held.
        # It is frozen first and the lease read while it cannot move: an attempt that failed
        # (lease released) between the read and the kill would leave nothing to prove.
        gw0 = mg.gws[0].proc.pid
        held = None
        deadline = time.monotonic() + 120
        while held is None and time.monotonic() < deadline:
            rows = db.rows("SELECT leased FROM repairs WHERE part_uid=$1", uid)
            assert rows, "gateway 0 healed it before it could be killed"
            if rows[0][0] <= time.time():
                time.sleep(0.01)
                continue
            os.killpg(gw0, signal.SIGSTOP)
            time.sleep(0.05)  # every worker stopped
            rows = db.rows("SELECT leased FROM repairs WHERE part_uid=$1", uid)
            assert rows, "gateway 0 healed it before it could be killed"
            if rows[0][0] > time.time() + 0.5:
                held = rows[0][0]
            else:
                os.killpg(gw0, signal.SIGCONT)
        assert held is not None
        mg.kill_gateway(0)
        [(leased,)] = db.rows("SELECT leased FROM repairs WHERE part_uid=$1", uid)
        assert leased == held  # a dead gateway's lease on a part not healed
    finally:
        os.killpg(gw1.pid, signal.SIGCONT)
        if not mg.nodes.nodes[DOWN].running:
            mg.nodes.restart(DOWN)
    assert wait_for(lambda: not queued(db), 90), (queued(db), mg.logs())
    # healed by gateway 1, once the lease ran out
    assert metric(mg, 1, "zonegate_gateway_healed_parts_total") - before == 1
    assert fragment_copies(mg, uid) == Counter({i: 1 for i in range(6)})
    mg.start_gateway(0)
    assert mg.client(0).get_object(Bucket=bucket, Key="big")["Body"].read() == data
