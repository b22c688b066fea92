"""Bucket markers (gateway/store/bucketmarkers.py): after losing the metadata store,
`zonegate recover-metadata` brings back every bucket, empty ones too, with its owner, creation
time and region; a deleted bucket stays deleted, even when a node was down at the delete; a
bucket whose marker cannot be written is not created."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest
from botocore.exceptions import ClientError

from gateway.metadata import BucketRecord, open_store
from gateway.store.bucketmarkers import (
    PREFIX,
    find_markers,
    marker_meta,
    marker_uid,
    record_from_meta,
)
from tests.support.gwcluster import OTHER_ACCESS, OTHER_SECRET, Gateway, archive_ids, wait_for
from zonestore.ids import validate_record_id

pytestmark = pytest.mark.timeout(180)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def zonegate(g: Gateway, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args, "--config",
                           str(g.config_path)], capture_output=True, text=True, timeout=120)


def lose_metadata_store(g: Gateway) -> None:
    for suffix in ("", "-wal", "-shm"):
        g.meta_path.with_name(g.meta_path.name + suffix).unlink(missing_ok=True)


def buckets(s3) -> dict[str, object]:
    return {b["Name"]: b["CreationDate"] for b in s3.list_buckets()["Buckets"]}


def markers_of(g: Gateway, name: str, ids: set[str] | None = None) -> set[str]:
    return {a for a in (archive_ids(g) if ids is None else ids)
            if a.startswith(f"{PREFIX}{name}:")}


def error_code(call, *args, **kw) -> str:
    with pytest.raises(ClientError) as e:
        call(*args, **kw)
    return e.value.response["Error"]["Code"]


def test_marker_uid_is_a_valid_record_id_and_meta_round_trips():
    rec = BucketRecord("a" * 63, "alice", time.time(), "eu-west-1")
    validate_record_id(marker_uid(rec.name, rec.created) + ".f09")
    assert record_from_meta(json.loads(json.dumps(marker_meta(rec)))) == rec
    assert marker_uid("b", 1.0) != marker_uid("b", 1.000001)  # a re-created bucket's is new
    with pytest.raises(ValueError):
        record_from_meta({"kind": "bucket", "bucket": {"name": "x"}})


def test_partial_markers_do_not_count():
    from erasure.cluster import ScannedPart
    from erasure.codec import Scheme
    scheme = Scheme(4, 2)
    old = BucketRecord("b", "alice", 100.0, "us-east-1")
    new = BucketRecord("b", "bob", 200.0, "us-east-1")
    gone = BucketRecord("c", "alice", 300.0, "us-east-1")

    def part(rec: BucketRecord, n: int) -> ScannedPart:
        return ScannedPart(marker_uid(rec.name, rec.created), 0, scheme, 0, marker_meta(rec),
                           {i: [f"node{i}"] for i in range(n)})

    found = find_markers([part(old, 6), part(new, 4), part(gone, 3)])
    assert found.buckets == {"b": new}  # the newest whole marker of a name wins
    assert [p.part_uid for p in found.leftovers] == [marker_uid("c", 300.0)]


def test_recovery_brings_back_empty_buckets_owners_and_creation_times(tmp_path):
    g = Gateway(tmp_path)
    g.start()
    try:
        alice, bob = g.client(), g.client(OTHER_ACCESS, OTHER_SECRET)
        alice.create_bucket(Bucket="empty-alice",
                            CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        bob.create_bucket(Bucket="bob-data")
        time.sleep(0.05)  # the objects are younger than the bucket
        bob.put_object(Bucket="bob-data", Key="a", Body=b"alpha")
        bob.put_object(Bucket="bob-data", Key="b/c", Body=b"gamma" * 1000)
        alice.create_bucket(Bucket="gone")
        alice.delete_bucket(Bucket="gone")
        alice.create_bucket(Bucket="reused")  # deleted, then re-created by someone else
        alice.delete_bucket(Bucket="reused")
        bob.create_bucket(Bucket="reused")
        ids = archive_ids(g)
        assert len(markers_of(g, "empty-alice", ids)) == g.k + g.m
        assert not markers_of(g, "gone", ids)
        assert len(markers_of(g, "reused", ids)) == g.k + g.m  # only the new one's
        # Creating an existing bucket answers as S3 does and writes nothing.
        assert error_code(alice.create_bucket, Bucket="empty-alice") == \
            "BucketAlreadyOwnedByYou"
        assert error_code(bob.create_bucket, Bucket="empty-alice") == "BucketAlreadyExists"
        assert archive_ids(g) == ids
        before = {"alice": buckets(alice), "bob": buckets(bob)}
        assert set(before["alice"]) == {"empty-alice"}
        assert set(before["bob"]) == {"bob-data", "reused"}
        g.stop_gateway()

        # A bucket made before markers existed: a row and no marker. `zonegate bucket-markers`
        # writes the missing marker.
        legacy = BucketRecord("legacy", "alice", time.time() - 3600, "us-east-1")

        async def add_legacy() -> None:
            store = open_store(str(g.meta_path))
            await store.create_bucket(legacy)
            await store.close()
        asyncio.run(add_legacy())
        r = zonegate(g, "bucket-markers")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "wrote 1 bucket markers; 3 buckets already had one" in r.stdout

        lose_metadata_store(g)
        r = zonegate(g, "recover-metadata")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "recovered 2 objects (0 multipart) in 4 new buckets (3 empty)" in r.stdout
        assert "missing bucket markers" not in r.stdout  # every bucket had one

        g.start_gateway()
        alice, bob = g.client(), g.client(OTHER_ACCESS, OTHER_SECRET)
        after = {"alice": buckets(alice), "bob": buckets(bob)}
        assert after["bob"] == before["bob"]
        assert set(after["alice"]) == {"empty-alice", "legacy"}
        assert after["alice"]["empty-alice"] == before["alice"]["empty-alice"]
        assert abs(after["alice"]["legacy"].timestamp() - legacy.created) < 0.001
        assert "Contents" not in alice.list_objects_v2(Bucket="empty-alice")
        assert "Contents" not in bob.list_objects_v2(Bucket="reused")
        assert alice.get_bucket_location(Bucket="empty-alice")["LocationConstraint"] == \
            "eu-west-1"
        assert bob.get_object(Bucket="bob-data", Key="b/c")["Body"].read() == b"gamma" * 1000
        assert error_code(alice.head_bucket, Bucket="gone") == "404"
        assert error_code(alice.list_objects_v2, Bucket="reused") == "AccessDenied"
        # The recovered rows name their markers: deleting a recovered bucket removes its marker.
        alice.delete_bucket(Bucket="legacy")
        assert not markers_of(g, "legacy")
    finally:
        g.stop()


def test_marker_quorum_and_a_delete_with_a_node_down(tmp_path):
    g = Gateway(tmp_path)
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="keep")
        s3.create_bucket(Bucket="doomed")

        # One node down (5 up = the write quorum): the delete goes through; the down node keeps
        # its archive of the marker, and the removal stays queued for the sweeper.
        g.nodes.kill(5)
        s3.delete_bucket(Bucket="doomed")
        assert "doomed" not in buckets(s3)
        with sqlite3.connect(g.meta_path) as db:
            queued = [json.loads(r[0]) for r in db.execute("SELECT layout FROM orphans")]
        assert any(q["part_uid"].startswith(f"{PREFIX}doomed:") for q in queued)

        # Two nodes down: below the write quorum, no bucket is created nor deleted.
        g.nodes.kill(4)
        assert wait_for(lambda: len(health(g)["nodes_down"]) == 2)
        assert error_code(s3.create_bucket, Bucket="refused") == "ServiceUnavailable"
        assert "refused" not in buckets(s3)
        assert error_code(s3.head_bucket, Bucket="refused") == "404"
        assert error_code(s3.delete_bucket, Bucket="keep") == "ServiceUnavailable"
        assert "keep" in buckets(s3)
        g.stop_gateway()

        g.nodes.restart(4)
        g.nodes.restart(5)
        assert len(markers_of(g, "doomed")) == 1  # the leftover, on the node that was down
        assert not markers_of(g, "refused")
        lose_metadata_store(g)
        r = zonegate(g, "recover-metadata")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "in 1 new buckets (1 empty)" in r.stdout
        assert "1 unreferenced parts queued for deletion" in r.stdout  # the leftover
        g.start_gateway()
        s3 = g.client()
        assert set(buckets(s3)) == {"keep"}
    finally:
        g.stop()


def health(g: Gateway) -> dict:
    try:
        with _NO_PROXY.open(g.endpoint + "/health/cluster", timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        return json.load(e)
