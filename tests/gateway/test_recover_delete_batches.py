"""DeleteObjects on a versioned bucket writes its delete markers as a few batch parts
(gateway/store/deletemarkers.py, `dmb:` uids), not one part per marker: `recover-metadata` brings
back every marker of a batch; when some markers of a batch are deleted the sweeper moves the
others to a new part and frees the old (so the deleted ones stay deleted on recovery), and
the last one's deletion frees its part; a gateway killed (SIGKILL) in the middle of a batch
leaves every stored marker recoverable and no archive that nothing owns."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tests.gateway.test_recover_versions import (  # noqa: F401
    backend,
    lose_the_store,
    pg_server,
    zonegate,
)
from tests.support.gwcluster import Gateway, archive_ids, put_many, wait_for
from tests.support.s3versions import versions_of

pytestmark = pytest.mark.timeout(400)


def batch_parts(g: Gateway) -> set[str]:
    return {a.rsplit(".", 1)[0] for a in archive_ids(g) if a.startswith("dmb:")}


def single_markers(g: Gateway) -> set[str]:
    return {a.rsplit(".", 1)[0] for a in archive_ids(g) if a.startswith("dm:")}


def delete_all(s3, bucket: str, keys: list[str], versions: list[str | None] | None = None
               ) -> dict:
    objs = [{"Key": k} if v is None else {"Key": k, "VersionId": v}
            for k, v in zip(keys, versions or [None] * len(keys), strict=True)]
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": objs})
    assert not out.get("Errors"), out.get("Errors")
    return out


def test_delete_objects_markers_come_back_from_batch_parts(tmp_path, backend):  # noqa: F811
    opts = {} if backend is None else {"metadata": backend.new_database("lost"),
                                       "metadata_password_file": str(backend.password_file)}
    g = Gateway(tmp_path, gateway_options=opts)
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="ckv")
        s3.put_bucket_versioning(Bucket="ckv", VersioningConfiguration={"Status": "Enabled"})
        s3.create_bucket(Bucket="susp")
        s3.put_bucket_versioning(Bucket="susp", VersioningConfiguration={"Status": "Suspended"})
        short = [f"run/{i:04d}" for i in range(300)]
        # Keys long enough that their list passes one batch part's 48 KiB: several parts.
        long = [f"long/{i:03d}/" + "x" * 900 for i in range(120)]
        put_many(s3, "ckv", [(k, b"v1") for k in short + long])
        put_many(s3, "susp", [(k, b"null") for k in short[:50]])
        dm_before = single_markers(g)
        res = delete_all(s3, "ckv", short)
        assert all(d["DeleteMarker"] for d in res["Deleted"])
        one = batch_parts(g)
        assert len(one) == 1
        delete_all(s3, "ckv", long)
        many = batch_parts(g) - one
        assert 2 <= len(many) <= 4
        delete_all(s3, "susp", short[:50])     # null markers replace the null versions
        susp_parts = batch_parts(g) - one - many
        assert len(susp_parts) == 1
        assert single_markers(g) == dm_before  # no per-marker parts
        for k in short[:3]:
            assert s3.list_object_versions(Bucket="ckv", Prefix=k)["DeleteMarkers"]

        # Deleting some markers of a batch by version id: those keys are back, and the
        # sweeper moves the batch's other markers to a new part, freeing the old one.
        marker_ids = {k: vid for k, vid, _, m in versions_of(g, "ckv") if m}
        undeleted = short[:10]
        delete_all(s3, "ckv", undeleted, [marker_ids[k] for k in undeleted])
        for k in undeleted:
            assert s3.get_object(Bucket="ckv", Key=k)["Body"].read() == b"v1"
        assert wait_for(lambda: not (one & batch_parts(g)))
        moved = batch_parts(g) - many - susp_parts
        assert len(moved) == 1
        single = s3.delete_object(Bucket="ckv", Key="run/0000")["VersionId"]
        assert wait_for(lambda: len(single_markers(g) - dm_before) == 1)
        r = zonegate(g, "repair", "--audit")
        assert r.returncode == 0, r.stdout + r.stderr

        before = {b: versions_of(g, b) for b in ("ckv", "susp")}
        assert sum(m for *_, m in before["ckv"]) == 300 + 120 - 10 + 1
        assert [m for *_, m in before["susp"]] == [True] * 50
        g.stop_gateway()
        lose_the_store(g, backend)
        r = zonegate(g, "recover-metadata")
        assert r.returncode == 0, r.stdout + r.stderr
        g.start_gateway()
        s3 = g.client()
        assert {b: versions_of(g, b) for b in ("ckv", "susp")} == before
        r = zonegate(g, "repair", "--audit")
        assert r.returncode == 0, r.stdout + r.stderr

        # Deleting every marker of batches frees their parts; all but one: the one left is
        # moved to a part of its own, freed with it.
        markers = [(k, v) for k, v, _, m in versions_of(g, "ckv") if m]
        longs = [(k, v) for k, v in markers if k.startswith("long/")]
        shorts = [(k, v) for k, v in markers if k.startswith("run/") and v != single]
        assert len(longs) == 120 and len(shorts) == 290
        delete_all(s3, "ckv", [k for k, _ in longs], [v for _, v in longs])
        assert wait_for(lambda: not (many & batch_parts(g)), timeout=60)
        keep, rest = shorts[-1], shorts[:-1]
        delete_all(s3, "ckv", [k for k, _ in rest], [v for _, v in rest])
        assert wait_for(lambda: not (moved & batch_parts(g)), timeout=60)
        last = batch_parts(g) - susp_parts
        assert len(last) == 1
        s3.delete_object(Bucket="ckv", Key=keep[0], VersionId=keep[1])
        assert wait_for(lambda: not (last & batch_parts(g)), timeout=60)
        assert batch_parts(g) == susp_parts
        r = zonegate(g, "repair", "--audit")
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        g.stop()


def test_gateway_killed_during_a_batch_leaves_markers_recoverable_and_nothing_unowned(
        tmp_path):
    # A short pending grace: the sweeper resolves the killed request's marks during the test.
    g = Gateway(tmp_path, gateway_options={"pending_grace_seconds": 2})
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="ckv")
        s3.put_bucket_versioning(Bucket="ckv", VersioningConfiguration={"Status": "Enabled"})
        keys = [f"k/{i:04d}" for i in range(1000)]
        for i in range(0, 1000, 100):   # a first marker per key (no object needed)
            s3.delete_objects(Bucket="ckv", Delete={"Objects": [{"Key": k} for k in
                                                                keys[i:i + 100]]})
        acked = {k for k, _, _, m in versions_of(g, "ckv") if m}
        assert len(acked) == 1000
        held = batch_parts(g)
        # Kill -9 the gateway while a second DeleteObjects of 1000 keys is in flight, as
        # soon as its batch part shows on a node (before or after its commit).
        done: dict = {}

        def run() -> None:
            try:
                done["res"] = g.client().delete_objects(
                    Bucket="ckv", Delete={"Objects": [{"Key": k} for k in keys]})
            except Exception as e:  # the connection dies with the gateway
                done["err"] = e

        t = threading.Thread(target=run)
        t.start()
        wait_for(lambda: bool(batch_parts(g) - held), timeout=30)
        os.killpg(g.proc.pid, signal.SIGKILL)
        g.proc.wait()
        g.proc = None
        t.join(30)
        g.start_gateway()
        s3 = g.client()
        stored = versions_of(g, "ckv")
        # Either the whole second batch committed or none of it did (one transaction).
        n = sum(m for *_, m in stored)
        assert n in (1000, 2000)
        if "res" in done:
            assert n == 2000
        # After the grace the sweeper resolves the killed request's pending marks: the
        # archives of an uncommitted batch go, a committed one's stay.
        assert wait_for(lambda: zonegate(g, "repair", "--audit").returncode == 0, timeout=60)
        if n == 1000:
            assert wait_for(lambda: batch_parts(g) == held, timeout=60)
        else:
            assert batch_parts(g) - held
        g.stop_gateway()
        lose_the_store(g, None)
        r = zonegate(g, "recover-metadata")
        assert r.returncode == 0, r.stdout + r.stderr
        g.start_gateway()
        assert versions_of(g, "ckv") == stored
    finally:
        g.stop()
