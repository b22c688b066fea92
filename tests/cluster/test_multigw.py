"""Several gateways, one namespace: real `zonegate serve` processes (separate processes, each
its own port) on one real PostgreSQL and one set of nodes, talked to with boto3.

What one gateway commits, every other one sees at once (read-after-write, list-after-write);
conditional PUTs racing on two gateways have exactly one winner; a multipart upload can move
between gateways; overwrite and delete races leave no fragment behind once the sweepers ran
(counted on the nodes); DeleteBucket racing PutObject never leaves an object in a bucket that
is gone.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import archive_ids, wait_for
from tests.support.multigwcluster import MultiGateway
from tests.support.pgserver import PgServer, pg_server  # noqa: F401 - the session fixture

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def mg(pg_server: PgServer, tmp_path_factory) -> MultiGateway:  # noqa: F811
    url = pg_server.new_database("mg")
    cluster = MultiGateway(tmp_path_factory.mktemp("multigw"), url, gateways=3,
                           password_file=str(pg_server.password_file))
    with cluster:
        yield cluster


def code(e: ClientError) -> str:
    return e.response["Error"]["Code"]


def new_bucket(mg: MultiGateway) -> str:
    name = "b" + uuid.uuid4().hex[:12]
    mg.client(0).create_bucket(Bucket=name)
    return name


def body(n: int, tag: str) -> bytes:
    return hashlib.shake_256(tag.encode()).digest(n)


def race(*fns, delays: tuple[float, ...] = ()):
    """Run the callables at the same moment (one thread each; the i-th `delays[i]` seconds
    later); their results or exceptions."""
    barrier = threading.Barrier(len(fns))

    def run(fn, delay):
        barrier.wait()
        time.sleep(delay)
        try:
            return fn()
        except ClientError as e:
            return e
    with ThreadPoolExecutor(len(fns)) as ex:
        futs = [ex.submit(run, fn, delays[i] if i < len(delays) else 0.0)
                for i, fn in enumerate(fns)]
        return [f.result() for f in futs]


def test_read_and_list_after_write_through_another_gateway(mg: MultiGateway) -> None:
    a, b, c = mg.client(0), mg.client(1), mg.client(2)
    bucket = "rw" + uuid.uuid4().hex[:10]
    a.create_bucket(Bucket=bucket)
    b.head_bucket(Bucket=bucket)                     # the bucket is known everywhere at once
    assert bucket in [x["Name"] for x in c.list_buckets()["Buckets"]]
    for i in range(20):
        key = f"dir/k{i:03d}"
        data = body(1000 + i, key)
        writer, reader = (a, b) if i % 2 else (b, c)
        etag = writer.put_object(Bucket=bucket, Key=key, Body=data)["ETag"]
        got = reader.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == data and got["ETag"] == etag
        listed = reader.list_objects_v2(Bucket=bucket, Prefix="dir/")["Contents"]
        assert [o["Key"] for o in listed] == [f"dir/k{j:03d}" for j in range(i + 1)]
    # overwrite on one, read the new data on the others; delete on one, gone on the others
    a.put_object(Bucket=bucket, Key="dir/k000", Body=b"new")
    assert b.get_object(Bucket=bucket, Key="dir/k000")["Body"].read() == b"new"
    c.delete_object(Bucket=bucket, Key="dir/k001")
    with pytest.raises(ClientError) as ei:
        a.head_object(Bucket=bucket, Key="dir/k001")
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    keys = [o["Key"] for o in b.list_objects_v2(Bucket=bucket, Delimiter="/",
                                                Prefix="dir/")["Contents"]]
    assert "dir/k001" not in keys and len(keys) == 19


def test_conditional_puts_racing_on_two_gateways_have_one_winner(mg: MultiGateway) -> None:
    bucket = new_bucket(mg)
    a, b = mg.client(0), mg.client(1)
    for rnd in range(12):
        key = f"once-{rnd}"
        da, db = body(20_000, f"a{rnd}"), body(20_000, f"b{rnd}")
        ra, rb = race(partial(a.put_object, Bucket=bucket, Key=key, Body=da, IfNoneMatch="*"),
                      partial(b.put_object, Bucket=bucket, Key=key, Body=db, IfNoneMatch="*"))
        won = [r for r in (ra, rb) if not isinstance(r, ClientError)]
        lost = [r for r in (ra, rb) if isinstance(r, ClientError)]
        assert len(won) == 1 and len(lost) == 1, (ra, rb)
        assert code(lost[0]) == "PreconditionFailed"
        winner = da if won[0] is ra else db
        for cl in (a, b):
            got = cl.get_object(Bucket=bucket, Key=key)
            assert got["Body"].read() == winner and got["ETag"] == won[0]["ETag"]
    # If-Match on the same current ETag: one replaces it, the other finds it changed.
    key = "cas"
    etag = a.put_object(Bucket=bucket, Key=key, Body=b"v0")["ETag"]
    for rnd in range(8):
        da, db = f"a{rnd}".encode(), f"b{rnd}".encode()
        ra, rb = race(partial(a.put_object, Bucket=bucket, Key=key, Body=da, IfMatch=etag),
                      partial(b.put_object, Bucket=bucket, Key=key, Body=db, IfMatch=etag))
        won = [r for r in (ra, rb) if not isinstance(r, ClientError)]
        assert len(won) == 1, (ra, rb)
        assert all(code(r) == "PreconditionFailed" for r in (ra, rb) if r not in won)
        winner = da if won[0] is ra else db
        assert b.get_object(Bucket=bucket, Key=key)["Body"].read() == winner
        etag = won[0]["ETag"]


def test_multipart_upload_moves_between_gateways(mg: MultiGateway) -> None:
    bucket = new_bucket(mg)
    a, b, c = mg.client(0), mg.client(1), mg.client(2)
    key = "big/object.bin"
    uid = a.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    # the upload is listed everywhere
    assert [u["UploadId"] for u in c.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [uid]
    parts = {1: body(5 * MiB, "p1"), 2: body(5 * MiB, "p2"), 3: body(123_456, "p3")}
    senders = {1: a, 2: b, 3: a}
    etags = {}
    with ThreadPoolExecutor(3) as ex:
        futs = {n: ex.submit(senders[n].upload_part, Bucket=bucket, Key=key, UploadId=uid,
                             PartNumber=n, Body=data) for n, data in parts.items()}
        etags = {n: f.result()["ETag"] for n, f in futs.items()}
    # part 2 sent again, through the third gateway: the newer one counts
    parts[2] = body(5 * MiB, "p2-again")
    etags[2] = c.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=2,
                             Body=parts[2])["ETag"]
    listed = b.list_parts(Bucket=bucket, Key=key, UploadId=uid)["Parts"]
    assert [(p["PartNumber"], p["ETag"]) for p in listed] == sorted(etags.items())
    done = b.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=uid,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in
                                   sorted(etags.items())]})
    assert done["ETag"].endswith('-3"')
    whole = b"".join(parts[n] for n in sorted(parts))
    for cl in (a, b, c):
        got = cl.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == whole and got["ETag"] == done["ETag"]
    assert "Uploads" not in a.list_multipart_uploads(Bucket=bucket)
    with pytest.raises(ClientError) as ei:
        a.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=4, Body=b"late")
    assert code(ei.value) == "NoSuchUpload"


def test_overwrite_and_delete_races_leave_no_fragments(mg: MultiGateway) -> None:
    bucket = new_bucket(mg)
    clients = [mg.client(i) for i in range(len(mg.gws))]
    keys = [f"hot/{i}" for i in range(4)]
    base = archive_ids(mg)   # everything before: other tests' objects, bucket markers

    def worker(w: int) -> None:
        cl = clients[w % len(clients)]
        for i in range(12):
            key = keys[(w + i) % len(keys)]
            if (w + i) % 5 == 4:
                cl.delete_object(Bucket=bucket, Key=key)
            else:
                cl.put_object(Bucket=bucket, Key=key, Body=body(3000 + i, f"{w}-{i}"))
    with ThreadPoolExecutor(6) as ex:
        for f in [ex.submit(worker, w) for w in range(6)]:
            f.result()
    live = [o["Key"] for o in clients[0].list_objects_v2(Bucket=bucket).get("Contents", [])]
    for key in live:   # every live object still reads whole
        clients[1].get_object(Bucket=bucket, Key=key)["Body"].read()
    per_object = mg.k + mg.m
    assert wait_for(lambda: len(archive_ids(mg) - base) == per_object * len(live), 60), \
        (len(archive_ids(mg) - base), len(live))
    # deleting what is left through any gateway leaves nothing of this test on the nodes
    for i, key in enumerate(live):
        clients[i % len(clients)].delete_object(Bucket=bucket, Key=key)
    assert wait_for(lambda: not (archive_ids(mg) - base), 60), len(archive_ids(mg) - base)


def test_delete_bucket_racing_put_object(mg: MultiGateway) -> None:
    a, b = mg.client(0), mg.client(1)
    outcomes: Counter[str] = Counter()
    base = archive_ids(mg)
    for rnd in range(12):
        bucket = f"race{rnd}-" + uuid.uuid4().hex[:8]
        a.create_bucket(Bucket=bucket)
        data = body(2 * MiB, bucket)
        # The delete sent 0..110 ms after the PUT: before it, while its data is written, as
        # it commits, after it.
        rd, rp = race(partial(a.delete_bucket, Bucket=bucket),
                      partial(b.put_object, Bucket=bucket, Key="k", Body=data),
                      delays=(0.01 * rnd, 0.0))
        deleted, put = not isinstance(rd, ClientError), not isinstance(rp, ClientError)
        outcomes[f"deleted={deleted} put={put}"] += 1
        assert not (deleted and put), "an object was acknowledged into a deleted bucket"
        if deleted:
            assert code(rp) == "NoSuchBucket", rp
            with pytest.raises(ClientError):
                b.head_bucket(Bucket=bucket)
            # created again, the bucket is empty: no object came back from the race
            a.create_bucket(Bucket=bucket)
            assert "Contents" not in b.list_objects_v2(Bucket=bucket)
        else:
            assert code(rd) == "BucketNotEmpty", rd
            assert put and b.get_object(Bucket=bucket, Key="k")["Body"].read() == data
            a.delete_object(Bucket=bucket, Key="k")
        a.delete_bucket(Bucket=bucket)
    # every fragment written by the races (objects and bucket markers) is swept
    assert wait_for(lambda: not (archive_ids(mg) - base), 60), \
        (len(archive_ids(mg) - base), outcomes)
    print(dict(outcomes))

