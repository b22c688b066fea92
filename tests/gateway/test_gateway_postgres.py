"""A gateway whose metadata lives in PostgreSQL (a real server started here), with real node
processes and boto3: the S3 round trip, an unreachable database at start, the database lost
and back while serving (503 SlowDown, /health/ready 503, reconnects by itself), a SIGKILL in
the middle of commits, and moving metadata: `zonegate metadata copy` and `recover-metadata`
into PostgreSQL, `zonegate metadata migrate`."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError

from erasure.config import write_config
from gateway.metadata import (
    BucketRecord,
    ObjectRecord,
    PartRecord,
    UploadRecord,
    open_store,
    postgres,
)
from gateway.metadata.store import UserRecord, VersionRecord
from tests.support import s3raw
from tests.support.gwcluster import Gateway, archive_ids, wait_for
from tests.support.pgserver import PASSWORD, PgServer, free_port, skip_reason

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]
MiB = 1024 * 1024
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def pg() -> PgServer:
    server = PgServer()
    server.start()
    yield server
    server.destroy()


@pytest.fixture(scope="module")
def cluster(pg: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Gateway:
    g = Gateway(tmp_path_factory.mktemp("gwpg"), workers=2, gateway_options={
        "metadata": pg.new_database("gw"), "metadata_password_file": str(pg.password_file),
        "pending_grace_seconds": 2})
    g.start()
    yield g
    g.stop()


def zonegate(*args: str, env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def ready(g: Gateway) -> tuple[int, dict]:
    try:
        with _NO_PROXY.open(g.endpoint + "/health/ready", timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def config_with(g: Gateway, path: Path, **gateway: str) -> Path:
    cfg = tomllib.loads(g.config_path.read_text())
    cfg["gateway"].update(gateway)
    write_config(path, cfg)
    return path


def db_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


def test_boto3_round_trip_on_postgres(cluster: Gateway, pg: PgServer) -> None:
    s3 = cluster.client()
    s3.create_bucket(Bucket="pg-data")
    keys = ["a/1", "a/2", "b", "é/x", "z\u20ac", "\U0001f600", "tab\tkey"]
    for k in keys:
        s3.put_object(Bucket="pg-data", Key=k, Body=k.encode() * 100)
    for k in keys:
        assert s3.get_object(Bucket="pg-data", Key=k)["Body"].read() == k.encode() * 100
    listed = s3.list_objects_v2(Bucket="pg-data")
    assert [o["Key"] for o in listed["Contents"]] == sorted(keys, key=lambda k: k.encode())
    rolled = s3.list_objects_v2(Bucket="pg-data", Delimiter="/", MaxKeys=3)
    assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["a/"]
    assert [o["Key"] for o in rolled["Contents"]] == ["b", "tab\tkey"] and rolled["IsTruncated"]
    rest = s3.list_objects_v2(Bucket="pg-data", Delimiter="/",
                              ContinuationToken=rolled["NextContinuationToken"])
    assert [p["Prefix"] for p in rest["CommonPrefixes"]] == ["é/"]

    # multipart: parts on two worker processes, completed, read back whole
    body = os.urandom(11 * MiB)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB,
                         max_concurrency=3)
    import io
    s3.upload_fileobj(io.BytesIO(body), "pg-data", "big.bin", Config=cfg)
    got = s3.get_object(Bucket="pg-data", Key="big.bin")
    assert got["ETag"].endswith('-3"')
    assert hashlib.sha256(got["Body"].read()).digest() == hashlib.sha256(body).digest()

    s3.delete_object(Bucket="pg-data", Key="b")
    s3.delete_objects(Bucket="pg-data", Delete={"Objects": [{"Key": "a/1"}, {"Key": "a/2"}]})
    left = [o["Key"] for o in s3.list_objects_v2(Bucket="pg-data")["Contents"]]
    assert left == sorted([k for k in keys if k not in ("b", "a/1", "a/2")] + ["big.bin"],
                          key=lambda k: k.encode())
    # It all lives in PostgreSQL: no SQLite file was made.
    db = db_of(cluster.gateway_options["metadata"])
    assert pg.psql("SELECT count(*) FROM objects WHERE bucket='pg-data'", db=db).strip() == \
        str(len(left))
    assert not cluster.meta_path.exists()
    # Replaced and deleted data is swept from the nodes.
    assert wait_for(lambda: pg.psql("SELECT count(*) FROM orphans", db=db).strip() == "0", 30)


@pytest.mark.parametrize("form", s3raw.AUTH_FORMS)
def test_non_utf8_access_key_is_invalid_access_key_id_on_postgres(cluster: Gateway,
                                                                   form: str) -> None:
    """Issue 24 D3 on this backend: bytes that are not UTF-8 (or a NUL, which PostgreSQL's
    text cannot hold) as the access key are an unknown key, never a database error."""
    c = s3raw.Creds(cluster.port, "x", "y")
    keys = [b"AK\xff", b"\xc3(", b"AKID\xed\xa0\x80"] + ([b"AK\x00"] if "query" in form else [])
    for key in keys:
        tgt, headers = s3raw.signed_as(c, form, key, "GET", "/pg-data/b")
        status, _, body = s3raw.send(c, "GET", tgt, headers, timeout=30)
        assert s3raw.code_of(status, body) == (403, "InvalidAccessKeyId"), (key, body[:300])
    assert "Traceback" not in cluster.log_path.read_text(errors="replace")


def test_unreachable_database_at_start_is_one_line(cluster: Gateway) -> None:
    dead = f"postgresql://zonegate@127.0.0.1:{free_port()}/nowhere"
    cfg = config_with(cluster, cluster.root / "dead.toml", metadata=dead,
                      listen=f"127.0.0.1:{free_port()}")
    r = zonegate("serve", "--config", str(cfg), "--workers", "1", timeout=60)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "[gateway] metadata" in lines[0] and "nowhere" in lines[0]
    # a wrong password is one line too, and the password is never printed
    bad = cluster.root / "bad-password"
    bad.write_text("not-the-password\n")
    cfg = config_with(cluster, cluster.root / "badpw.toml",
                      metadata_password_file=str(bad), listen=f"127.0.0.1:{free_port()}")
    r = zonegate("serve", "--config", str(cfg), "--workers", "1", timeout=60)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "[gateway] metadata" in r.stderr and "not-the-password" not in r.stderr


def test_database_lost_while_serving(cluster: Gateway, pg: PgServer) -> None:
    s3 = cluster.client()
    s3.create_bucket(Bucket="outage")
    s3.put_object(Bucket="outage", Key="before", Body=b"b" * 1000)
    assert ready(cluster)[0] == 200
    pg.stop()
    try:
        for call in (lambda: s3.put_object(Bucket="outage", Key="during", Body=b"d" * 1000),
                     lambda: s3.get_object(Bucket="outage", Key="before"),
                     lambda: s3.list_objects_v2(Bucket="outage"),
                     lambda: s3.delete_object(Bucket="outage", Key="before"),
                     lambda: s3.create_multipart_upload(Bucket="outage", Key="mp")):
            with pytest.raises(ClientError) as e:
                call()
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
            assert e.value.response["Error"]["Code"] == "SlowDown"
        status, body = ready(cluster)
        assert status == 503 and any("metadata" in r for r in body["reasons"]), body
    finally:
        pg.start()

    def back() -> bool:
        try:
            s3.put_object(Bucket="outage", Key="after", Body=b"a" * 1000)
            return True
        except ClientError as e:
            assert e.response["Error"]["Code"] == "SlowDown"
            return False
    assert wait_for(back, timeout=60)
    assert s3.get_object(Bucket="outage", Key="before")["Body"].read() == b"b" * 1000
    # nothing of the refused requests was applied
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="outage")["Contents"]] == \
        ["after", "before"]
    assert "Uploads" not in s3.list_multipart_uploads(Bucket="outage")
    assert wait_for(lambda: ready(cluster)[0] == 200, timeout=30)
    log = cluster.log_path.read_text(errors="replace")
    assert "internal error" not in log and "503 SlowDown" in log
    # background work came back too: the sweeper frees what a delete queues
    db = db_of(cluster.gateway_options["metadata"])
    s3.delete_object(Bucket="outage", Key="after")
    assert wait_for(lambda: pg.psql("SELECT count(*) FROM orphans", db=db).strip() == "0", 30)


def test_sigkill_mid_commit_loses_nothing_acknowledged(cluster: Gateway, pg: PgServer) -> None:
    s3 = cluster.client()
    s3.create_bucket(Bucket="kill")
    base = archive_ids(cluster)
    acked: dict[str, bytes] = {}
    stop = threading.Event()

    def writer(n: int) -> None:
        c = cluster.client()
        i = 0
        while not stop.is_set():
            key, body = f"w{n}-{i:05d}", os.urandom(20_000)
            try:
                c.put_object(Bucket="kill", Key=key, Body=body)
                acked[key] = body
            except (BotoCoreError, ClientError):
                pass
            i += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    assert wait_for(lambda: len(acked) >= 20, timeout=60)
    os.killpg(cluster.proc.pid, signal.SIGKILL)
    cluster.proc.wait()
    stop.set()
    for t in threads:
        t.join(60)
    cluster.start_gateway()
    s3 = cluster.client()
    for key, body in acked.items():
        assert s3.get_object(Bucket="kill", Key=key)["Body"].read() == body, key
    committed = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="kill")
                 for o in page.get("Contents", [])]
    assert set(acked) <= set(committed)
    # Fragments of writes cut before their commit are found and swept (pending grace 2 s):
    # what stays on the nodes is exactly the committed objects' fragments.
    per_object = cluster.k + cluster.m
    # no fixed wait past the grace: the sweeper takes each mark once it is due (it sleeps
    # no longer than the grace), polled for below
    s3.put_object(Bucket="kill", Key="poke", Body=b"p")  # wakes the sweeper
    assert wait_for(lambda: len(archive_ids(cluster) - base) == per_object * (len(committed) + 1),
                    timeout=60), (len(archive_ids(cluster) - base), len(committed))


def test_database_crash_under_writes_leaves_no_half_commit(cluster: Gateway,
                                                           pg: PgServer) -> None:
    """PostgreSQL killed (immediate shutdown: a crash) while PUTs stream in, then back: every
    acknowledged PUT is there, every listed object reads back whole, the clients saw only
    503 SlowDown, and the fragments of the refused PUTs are swept."""
    s3 = cluster.client()
    s3.create_bucket(Bucket="dbcrash")
    base = archive_ids(cluster)
    acked: dict[str, bytes] = {}
    codes: set[str] = set()
    stop = threading.Event()

    def writer(n: int) -> None:
        c = cluster.client()
        i = 0
        while not stop.is_set():
            key, body = f"w{n}-{i:05d}", os.urandom(30_000)
            try:
                c.put_object(Bucket="dbcrash", Key=key, Body=body)
                acked[key] = body
            except ClientError as e:
                codes.add(e.response["Error"]["Code"])
            i += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    try:
        assert wait_for(lambda: len(acked) >= 10, timeout=60)
        pg.stop("immediate")
        time.sleep(1.0)
    finally:
        pg.start()
    before = len(acked)
    assert wait_for(lambda: len(acked) >= before + 10, timeout=60)  # writes resume by themselves
    stop.set()
    for t in threads:
        t.join(60)
    assert codes == {"SlowDown"}, codes  # the outage was seen, and only as 503 SlowDown
    for key, body in acked.items():
        assert s3.get_object(Bucket="dbcrash", Key=key)["Body"].read() == body, key
    committed = [o for page in s3.get_paginator("list_objects_v2").paginate(Bucket="dbcrash")
                 for o in page.get("Contents", [])]
    assert set(acked) <= {o["Key"] for o in committed}
    for o in committed:
        assert len(s3.get_object(Bucket="dbcrash", Key=o["Key"])["Body"].read()) == o["Size"]
    # the refused PUTs' marks are swept once past the pending grace: polled for below
    s3.put_object(Bucket="dbcrash", Key="poke", Body=b"p")
    per_object = cluster.k + cluster.m
    assert wait_for(lambda: len(archive_ids(cluster) - base) == per_object * (len(committed) + 1),
                    timeout=60), (len(archive_ids(cluster) - base), len(committed))


async def _fill_sqlite(path: Path) -> None:
    s = open_store(str(path))
    await s.start()
    await s.create_bucket(BucketRecord("moved", "alice", 1.5))
    for i, k in enumerate(["a", "é", "\U0001f600", "a/b"]):
        await s.put_object(ObjectRecord("moved", k, i, f"e{i}", 2.0 + i, "alice", f"v{i}",
                                        headers={"Content-Type": "x/y"}, user_meta={"k": k},
                                        parts=[{"number": 1, "size": i, "etag": f"e{i}",
                                                "layout": {"part_uid": f"v{i}.p1"}}]))
    await s.put_object(ObjectRecord("moved", "a", 9, "e9", 9.0, "alice", "v9",
                                    parts=[{"number": 1, "size": 9, "etag": "e9",
                                            "layout": {"part_uid": "v9.p1"}}]))  # queues v0
    await s.create_upload(UploadRecord("up1", "moved", "mp", "alice", 3.0))
    await s.put_part(PartRecord("up1", 1, 5, "pe", 3.0, {"part_uid": "x.p1"}))
    await s.put_bucket_config("moved", "lifecycle", '{"rules": []}')
    await s.put_bucket_acl("moved", [{"grantee": {"id": "bob"}, "permission": "READ"}])
    await s.put_object_tags("moved", "a", None, {"t": "1"})
    await s.put_object(ObjectRecord("moved", "a", 3, "e3", 9.5, "alice", "v10", version_id="V10"),
                       versioning="enabled")
    await s.put_delete_marker(VersionRecord("moved", "é", 0, "", 9.6, "alice", "v11",
                                            version_id="M11"), "enabled")
    await s.add_user(UserRecord("AKX", "sk", "cid", "X", 1.0))
    await s.repair_add({"part_uid": "v1.p1"}, [2], "write: f02")  # pending repairs move too
    await s.deletion_begin("gone.p1")
    await s.deletion_end("done.p1")
    await s.close()


async def _dump(target: str, password_file: str | None) -> dict:
    s = open_store(target, password_file=password_file)
    await s.start()
    try:
        page = await s.list_objects("moved", "", "", "", 100)
        return {
            "buckets": await s.list_buckets(),
            "objects": [await s.get_object("moved", o.key) for o in page.items],
            "uploads": (await s.list_uploads("moved", "", "", "", "", 10)).items,
            "parts": await s.list_parts("up1"),
            "orphans": sorted(e.layout["part_uid"] for e in await s.claim_orphans(100)),
            "configs": await s.bucket_configs("moved"),
            "versions": (await s.list_versions("moved", "", "", "", "", 100)).items,
            "users": await s.list_users(),
            "lifecycle": await s.lifecycle_claim("w", 1, 60.0),
            "repairs": [(e.part_uid, e.indexes, e.reason) for e in await s.repair_list()],
            "deletions": await s.deletions(),
        }
    finally:
        await s.close()


def test_metadata_copy_sqlite_to_postgres(pg: PgServer, tmp_path: Path) -> None:
    src = tmp_path / "meta.sqlite"
    asyncio.run(_fill_sqlite(src))
    url = pg.new_database("copy")
    r = zonegate("metadata", "copy", "--from", str(src), "--to", url,
                 env={"PGPASSWORD": PASSWORD})
    assert r.returncode == 0, r.stderr
    assert "3 objects" in r.stdout and "1 uploads" in r.stdout
    want = asyncio.run(_dump(str(src), None))
    assert want["orphans"] == ["v0.p1"]
    assert want["configs"] and want["users"] and want["lifecycle"] and len(want["versions"]) == 6
    assert want["orphans"] == ["v0.p1"] and want["repairs"] == [("v1.p1", [2], "write: f02")]
    assert want["deletions"] == {"gone.p1": False, "done.p1": True}
    assert asyncio.run(_dump(url, str(pg.password_file))) == want
    # a second copy into the same database is refused, nothing changes
    r = zonegate("metadata", "copy", "--from", str(src), "--to", url, "--password-file",
                 str(pg.password_file))
    assert r.returncode == 1 and "not empty" in r.stderr and len(r.stderr.splitlines()) == 1


def test_recover_metadata_into_postgres_and_migrate(cluster: Gateway, pg: PgServer) -> None:
    s3 = cluster.client()
    s3.create_bucket(Bucket="rec")
    s3.put_object(Bucket="rec", Key="one", Body=b"1" * 5000, Metadata={"m": "v"})
    url = pg.new_database("rec")
    cfg = config_with(cluster, cluster.root / "recover.toml", metadata=url)
    r = zonegate("metadata", "migrate", "--config", str(cfg))
    want = f"schema version {len(postgres.MIGRATIONS)}"
    assert r.returncode == 0 and want in r.stdout, r.stderr
    r = zonegate("recover-metadata", "--config", str(cfg), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr

    async def check() -> ObjectRecord | None:
        s = open_store(url, password_file=str(pg.password_file))
        await s.start()
        try:
            return await s.get_object("rec", "one")
        finally:
            await s.close()
    got = asyncio.run(check())
    assert got is not None and got.size == 5000 and got.user_meta == {"m": "v"}
    # a second run refuses to merge into the now non-empty database
    r = zonegate("recover-metadata", "--config", str(cfg), timeout=300)
    assert r.returncode == 1 and "not empty" in r.stderr
