"""`zonegate recover-metadata` on versioned buckets: delete the metadata store, rebuild it from
the nodes alone, and every version and delete marker of every key comes back in its order,
with its bytes and its own tags (set at write time: PutObject, multipart, CopyObject), and
each bucket's versioning state with it; the fragment audit then finds every
archive owned, and deleting a recovered version frees its fragments."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import tomllib

import pytest
from boto3.s3.transfer import TransferConfig

from erasure.config import write_config
from tests.support.gwcluster import Gateway, archive_ids, wait_for
from tests.support.pgserver import PgServer, pg_server, skip_reason  # noqa: F401
from tests.support.s3versions import versions_of

pytestmark = pytest.mark.timeout(300)
MiB = 1024 * 1024


def zonegate(g: Gateway, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args, "--config",
                           str(g.config_path)], capture_output=True, text=True, timeout=120)


def snapshot(g: Gateway, s3, buckets: list[str]) -> dict:
    out = {}
    for b in buckets:
        chain = versions_of(g, b)
        etags = {}
        for key, vid, _, marker in chain:
            if not marker:
                h = s3.head_object(Bucket=b, Key=key, VersionId=vid)
                tags = s3.get_object_tagging(Bucket=b, Key=key, VersionId=vid)["TagSet"]
                etags[(key, vid)] = (h["ETag"], h["ContentLength"], h.get("Metadata"),
                                     h.get("TagCount"), sorted((t["Key"], t["Value"])
                                                               for t in tags))
        out[b] = {"versions": chain, "etags": etags,
                  "state": s3.get_bucket_versioning(Bucket=b).get("Status")}
    return out


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    """None for the embedded store, else the session's PostgreSQL server (each test makes
    its own databases in it: `new_database`), not an initdb per test."""
    if request.param == "sqlite":
        return None
    if skip_reason() is not None:
        pytest.skip(skip_reason() or "")
    return request.getfixturevalue("pg_server")


def lose_the_store(g: Gateway, pg: PgServer | None) -> None:
    """The metadata is gone: the SQLite files deleted, or a new, empty database configured."""
    if pg is None:
        for suffix in ("", "-wal", "-shm"):
            p = g.meta_path.with_name(g.meta_path.name + suffix)
            if p.exists():
                p.unlink()
        return
    cfg = tomllib.loads(g.config_path.read_text())
    cfg["gateway"]["metadata"] = pg.new_database("recovered")
    write_config(g.config_path, cfg)


def test_recover_metadata_brings_back_every_version_and_delete_marker(tmp_path, backend):
    opts = {} if backend is None else {"metadata": backend.new_database("lost"),
                                       "metadata_password_file": str(backend.password_file)}
    g = Gateway(tmp_path, gateway_options=opts)
    g.start()
    try:
        s3 = g.client()
        for b in ("ckv", "plain", "susp"):
            s3.create_bucket(Bucket=b)
        s3.put_bucket_versioning(Bucket="ckv", VersioningConfiguration={"Status": "Enabled"})
        blobs = {}

        def put(b: str, k: str, data: bytes, **kw) -> str:
            vid = s3.put_object(Bucket=b, Key=k, Body=data, **kw).get("VersionId", "null")
            blobs[(b, k, vid)] = data
            return vid

        for i in range(3):   # each version its own tags
            put("ckv", "run1/model.pt", os.urandom(50_000 + i), Metadata={"step": str(i)},
                Tagging=f"step={i}&run=run1" if i != 1 else "")
        put("ckv", "run1/gone.pt", b"deleted later")
        s3.delete_object(Bucket="ckv", Key="run1/gone.pt")
        put("ckv", "run1/back.pt", b"first")
        s3.delete_object(Bucket="ckv", Key="run1/back.pt")
        put("ckv", "run1/back.pt", b"second")            # a marker in the middle of a chain
        big = os.urandom(11 * MiB)
        s3.upload_fileobj(io.BytesIO(big), "ckv", "run1/shard.bin",
                              ExtraArgs={"Tagging": "kind=shard&keep=yes please"},
                              Config=TransferConfig(multipart_threshold=5 * MiB,
                                                    multipart_chunksize=5 * MiB))
        vid = s3.head_object(Bucket="ckv", Key="run1/shard.bin")["VersionId"]
        blobs[("ckv", "run1/shard.bin", vid)] = big
        # A copy with new tags, and one keeping its source's.
        first = versions_of(g, "ckv", "run1/model.pt")[-1][1]
        for dst, kw in (("run1/copy-new.pt", {"TaggingDirective": "REPLACE",
                                              "Tagging": "copied=new"}),
                        ("run1/copy-kept.pt", {})):
            vid = s3.copy_object(Bucket="ckv", Key=dst, CopySource={
                "Bucket": "ckv", "Key": "run1/model.pt", "VersionId": first}, **kw)["VersionId"]
            blobs[("ckv", dst, vid)] = blobs[("ckv", "run1/model.pt", first)]
        # Suspended in between: the null version keeps its place in the chain.
        put("ckv", "mixed", b"enabled-1")
        s3.put_bucket_versioning(Bucket="ckv", VersioningConfiguration={"Status": "Suspended"})
        put("ckv", "mixed", b"null-1")
        put("ckv", "mixed", b"null-2")                    # replaces null-1
        s3.put_bucket_versioning(Bucket="ckv", VersioningConfiguration={"Status": "Enabled"})
        put("ckv", "mixed", b"enabled-2")
        # A version deleted by id stays deleted (its fragments freed before recovery).
        held = archive_ids(g)
        doomed = put("ckv", "run1/model.pt", b"doomed")
        doomed_archives = archive_ids(g) - held
        s3.delete_object(Bucket="ckv", Key="run1/model.pt", VersionId=doomed)
        del blobs[("ckv", "run1/model.pt", doomed)]
        # Unversioned: the newest only; suspended: a null delete marker.
        put("plain", "k", b"old")
        put("plain", "k", b"new", Tagging="plain=1")
        s3.put_bucket_versioning(Bucket="susp", VersioningConfiguration={"Status": "Suspended"})
        put("susp", "k", b"null", Tagging="gone=soon")
        s3.delete_object(Bucket="susp", Key="k")
        buckets = ["ckv", "plain", "susp"]
        before = snapshot(g, s3, buckets)
        assert [v[3] for v in before["susp"]["versions"]] == [True]
        assert len(before["ckv"]["versions"]) == 14
        tags = {k: v[4] for k, v in before["ckv"]["etags"].items()}
        assert tags[("run1/model.pt", first)] == [("run", "run1"), ("step", "0")]
        assert sorted(t for (k, _), t in tags.items() if k == "run1/model.pt") == [
            [], [("run", "run1"), ("step", "0")], [("run", "run1"), ("step", "2")]]
        assert [t for (k, _), t in tags.items() if k == "run1/shard.bin"] == [
            [("keep", "yes please"), ("kind", "shard")]]
        assert [t for (k, _), t in tags.items() if k == "run1/copy-new.pt"] == [
            [("copied", "new")]]
        assert [t for (k, _), t in tags.items() if k == "run1/copy-kept.pt"] == [
            [("run", "run1"), ("step", "0")]]
        assert list(before["plain"]["etags"].values())[0][4] == [("plain", "1")]
        # Let the sweeper free what was replaced or deleted, so nothing stale is on the nodes.
        assert doomed_archives and wait_for(lambda: not (doomed_archives & archive_ids(g)))

        g.stop_gateway()
        lose_the_store(g, backend)
        r = zonegate(g, "recover-metadata")
        assert r.returncode == 0, r.stdout + r.stderr
        g.start_gateway()
        s3 = g.client()
        after = snapshot(g, s3, buckets)
        assert after == before
        for (b, k, vid), data in blobs.items():
            if (k, vid) in before[b]["etags"]:
                got = s3.get_object(Bucket=b, Key=k, VersionId=vid)["Body"].read()
                assert got == data, (b, k, vid)
        # Every archive on the nodes is owned by something in the recovered store.
        r = zonegate(g, "repair", "--audit")
        assert r.returncode == 0, r.stdout + r.stderr
        # The recovered chain works as before: removing the marker of gone.pt brings it back,
        # and deleting a version frees its fragments.
        marker = next(v for k, v, _, m in after["ckv"]["versions"] if k == "run1/gone.pt" and m)
        s3.delete_object(Bucket="ckv", Key="run1/gone.pt", VersionId=marker)
        assert s3.get_object(Bucket="ckv", Key="run1/gone.pt")["Body"].read() == b"deleted later"
        assert wait_for(lambda: not any(a.startswith(f"dm:{marker}.") for a in archive_ids(g)))
    finally:
        g.stop()


def tag_archives(g: Gateway) -> set[str]:
    """The part uids of the tag/ACL-change archives on the nodes."""
    return {a.rsplit(".", 1)[0] for a in archive_ids(g) if a.startswith("tg:")}


def tags_and_acls(g: Gateway, s3, bucket: str) -> dict:
    out = {}
    for key, vid, _, marker in versions_of(g, bucket):
        if not marker:
            tags = s3.get_object_tagging(Bucket=bucket, Key=key, VersionId=vid)["TagSet"]
            grants = s3.get_object_acl(Bucket=bucket, Key=key, VersionId=vid)["Grants"]
            out[(key, vid)] = (sorted((t["Key"], t["Value"]) for t in tags),
                               sorted(repr(sorted(gr.items())) for gr in grants))
    return out


def test_recover_metadata_brings_back_tags_and_acls_changed_after_the_write(tmp_path, backend):
    opts = {} if backend is None else {"metadata": backend.new_database("lost"),
                                       "metadata_password_file": str(backend.password_file)}
    g = Gateway(tmp_path, gateway_options=opts)
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="later", ObjectOwnership="ObjectWriter")
        s3.put_bucket_versioning(Bucket="later", VersioningConfiguration={"Status": "Enabled"})
        s3.create_bucket(Bucket="flat", ObjectOwnership="ObjectWriter")
        for b in ("later", "flat"):
            s3.delete_public_access_block(Bucket=b)   # public ACLs allowed
        v1 = s3.put_object(Bucket="later", Key="k", Body=b"one", Tagging="a=1")["VersionId"]
        s3.put_object(Bucket="later", Key="k", Body=b"two", Tagging="w=2")
        s3.put_object(Bucket="later", Key="untouched", Body=b"u", Tagging="keep=me")
        s3.put_object(Bucket="flat", Key="f", Body=b"f", Tagging="x=1")
        # Tags replaced twice on an older version (the first change's archive is freed),
        # set on the current one, removed from an unversioned object; ACLs changed after.
        for tags in ({"b": "2"}, {"c": "3", "d": "4"}):
            s3.put_object_tagging(Bucket="later", Key="k", VersionId=v1, Tagging={
                "TagSet": [{"Key": k, "Value": v} for k, v in tags.items()]})
        s3.put_object_tagging(Bucket="later", Key="k",
                              Tagging={"TagSet": [{"Key": "cur", "Value": "1"}]})
        s3.delete_object_tagging(Bucket="flat", Key="f")
        s3.put_object_acl(Bucket="later", Key="k", VersionId=v1, ACL="public-read")
        s3.put_object_acl(Bucket="flat", Key="f", ACL="authenticated-read")
        before = {b: tags_and_acls(g, s3, b) for b in ("later", "flat")}
        assert before["later"][("k", v1)][0] == [("c", "3"), ("d", "4")]
        assert before["flat"][("f", "null")][0] == []
        assert len(before["later"][("k", v1)][1]) == 2   # the owner's and AllUsers' READ
        # One archive per changed version once the replaced ones are freed; all owned.
        assert wait_for(lambda: len(tag_archives(g)) == 3), (tag_archives(g), archive_ids(g))
        r = zonegate(g, "repair", "--audit")
        assert r.returncode == 0, r.stdout + r.stderr

        g.stop_gateway()
        lose_the_store(g, backend)
        r = zonegate(g, "recover-metadata")
        assert r.returncode == 0, r.stdout + r.stderr
        g.start_gateway()
        s3 = g.client()
        assert {b: tags_and_acls(g, s3, b) for b in ("later", "flat")} == before
        r = zonegate(g, "repair", "--audit")
        assert r.returncode == 0, r.stdout + r.stderr
        # Deleting a version frees its change archive with its data; nothing left unowned.
        held = tag_archives(g)
        s3.delete_object(Bucket="later", Key="k", VersionId=v1)
        s3.delete_object(Bucket="flat", Key="f")
        assert wait_for(lambda: len(tag_archives(g)) == 1 and tag_archives(g) < held)
        r = zonegate(g, "repair", "--audit")
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        g.stop()


def test_recover_metadata_brings_back_write_time_acls_and_raced_tag_and_acl_changes(
        tmp_path, backend):
    opts = {} if backend is None else {"metadata": backend.new_database("lost"),
                                       "metadata_password_file": str(backend.password_file)}
    g = Gateway(tmp_path, gateway_options=opts)
    g.start()
    try:
        s3 = g.client()
        for b in ("ver", "flat"):
            s3.create_bucket(Bucket=b, ObjectOwnership="ObjectWriter")
            s3.delete_public_access_block(Bucket=b)
        s3.put_bucket_versioning(Bucket="ver", VersioningConfiguration={"Status": "Enabled"})
        auth = 'uri="http://acs.amazonaws.com/groups/global/AuthenticatedUsers"'
        # Write-time ACLs (x-amz-acl, x-amz-grant-*) on single PUTs, multipart and copies:
        # in the object archive's meta, so they come back without any later change archive.
        for b in ("ver", "flat"):
            s3.put_object(Bucket=b, Key="canned", Body=b"c", ACL="public-read")
            s3.put_object(Bucket=b, Key="granted", Body=b"g", GrantRead=auth)
            s3.put_object(Bucket=b, Key="default", Body=b"d")
            up = s3.create_multipart_upload(Bucket=b, Key="mp", ACL="authenticated-read")
            e = s3.upload_part(Bucket=b, Key="mp", UploadId=up["UploadId"], PartNumber=1,
                               Body=b"m")["ETag"]
            s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up["UploadId"],
                                         MultipartUpload={"Parts": [{"PartNumber": 1,
                                                                     "ETag": e}]})
            s3.copy_object(Bucket=b, Key="copied", CopySource={"Bucket": b, "Key": "default"},
                           ACL="public-read-write")
        v1 = s3.put_object(Bucket="ver", Key="canned", Body=b"c2")["VersionId"]
        # A PutObjectTagging and a PutObjectAcl at once on each of these versions: each
        # change archive carries both fields, so the newest must not hold a stale one.
        raced = [f"race/{i}" for i in range(8)]
        for k in raced:
            s3.put_object(Bucket="ver", Key=k, Body=b"r", Tagging="start=1")
        barrier = threading.Barrier(2 * len(raced))

        def tag(k: str) -> None:
            c = g.client()
            barrier.wait()
            c.put_object_tagging(Bucket="ver", Key=k, Tagging={
                "TagSet": [{"Key": "raced", "Value": k}]})

        def grant(k: str) -> None:
            c = g.client()
            barrier.wait()
            c.put_object_acl(Bucket="ver", Key=k, ACL="public-read")

        threads = [threading.Thread(target=f, args=(k,)) for k in raced for f in (tag, grant)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        before = {b: tags_and_acls(g, s3, b) for b in ("ver", "flat")}
        assert len(before["ver"][("canned", [v for k, v, _, m in versions_of(g, "ver")
                                             if k == "canned" and v != v1][0])][1]) == 2
        for k in raced:
            (vid,) = [v for kk, v, _, _ in versions_of(g, "ver", k)]
            tags, grants = before["ver"][(k, vid)]
            assert tags == [("raced", k)] and len(grants) == 2, (k, tags, grants)
        # one change archive per raced version once the replaced ones are freed
        assert wait_for(lambda: len(tag_archives(g)) == len(raced)), tag_archives(g)

        g.stop_gateway()
        lose_the_store(g, backend)
        r = zonegate(g, "recover-metadata")
        assert r.returncode == 0, r.stdout + r.stderr
        g.start_gateway()
        s3 = g.client()
        after = {b: tags_and_acls(g, s3, b) for b in ("ver", "flat")}
        assert {b: set(v) for b, v in after.items()} == {b: set(v) for b, v in before.items()}
        wrong = {(b, k): (after[b][k], want) for b in before for k, want in before[b].items()
                 if after[b][k] != want}
        assert not wrong
        r = zonegate(g, "repair", "--audit")
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        g.stop()
