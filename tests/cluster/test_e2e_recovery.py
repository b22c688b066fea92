"""Metadata recovery end to end: fill a real cluster, stop it, delete the gateway's metadata
store, rebuild it from the nodes' self-describing fragment archives (`zonegate dev
--recover-metadata` runs `zonegate recover-metadata` once the nodes are up), restart, and every
object reads back with the same ETag, size, headers, metadata and bytes."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from tests.support.devcluster import DevCluster, MiB, make_file

pytestmark = pytest.mark.slow

HEAD_FIELDS = ("ETag", "ContentLength", "ContentType", "Metadata", "CacheControl",
               "ContentDisposition", "ContentEncoding", "LastModified")


def snapshot(s3) -> dict[tuple[str, str], dict]:
    """Everything a client can see of every object."""
    out = {}
    for b in s3.list_buckets()["Buckets"]:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=b["Name"]):
            for o in page.get("Contents", []):
                h = s3.head_object(Bucket=b["Name"], Key=o["Key"], ChecksumMode="ENABLED")
                md5 = hashlib.md5()
                body = s3.get_object(Bucket=b["Name"], Key=o["Key"])["Body"]
                for chunk in iter(lambda body=body: body.read(MiB), b""):
                    md5.update(chunk)
                seen = {f: h.get(f) for f in HEAD_FIELDS}
                seen.update({k: v for k, v in h.items() if k.startswith("Checksum")})
                seen["md5"] = md5.hexdigest()
                seen["listed"] = (o["Size"], o["ETag"])
                out[(b["Name"], o["Key"])] = seen
    return out


def test_metadata_store_rebuilt_from_the_nodes(tmp_path):
    cluster = DevCluster(tmp_path / "data", zones=32, zone_size="32M")
    try:
        cluster.start()
        s3 = cluster.client()
        s3.create_bucket(Bucket="models")
        s3.create_bucket(Bucket="datasets")
        s3.put_object(Bucket="models", Key="config.json", Body=b'{"layers": 48}',
                      ContentType="application/json", Metadata={"run": "r17", "step": "5000"},
                      CacheControl="no-cache", ContentDisposition="inline",
                      ContentEncoding="identity", ChecksumAlgorithm="SHA256")
        s3.put_object(Bucket="models", Key="empty", Body=b"")
        s3.put_object(Bucket="datasets", Key="dir with space/ünïcode+plus.txt", Body=b"u" * 999)
        s3.put_object(Bucket="datasets", Key="overwritten", Body=b"old version")
        s3.put_object(Bucket="datasets", Key="overwritten", Body=b"new version",
                      Metadata={"v": "2"})
        for i in range(20):
            s3.put_object(Bucket="datasets", Key=f"shards/{i:03d}", Body=bytes([i]) * (i * 1000))
        big = tmp_path / "ckpt.bin"
        make_file(big, 21 * MiB + 3, seed=8)
        s3.upload_file(str(big), "models", "ckpt/step-5000.bin",
                       ExtraArgs={"Metadata": {"kind": "checkpoint"},
                                  "ContentType": "application/x-ckpt"})
        s3.upload_file(str(big), "models", "ckpt/step-6000.bin",
                       Config=TransferConfig(multipart_chunksize=5 * MiB))
        uid = s3.create_multipart_upload(Bucket="models", Key="by-hand",
                                         Metadata={"h": "1"})["UploadId"]
        parts = []
        for n, size in ((1, 5 * MiB), (2, 12345)):
            r = s3.upload_part(Bucket="models", Key="by-hand", UploadId=uid, PartNumber=n,
                               Body=bytes([n]) * size)
            parts.append({"PartNumber": n, "ETag": r["ETag"]})
        s3.complete_multipart_upload(Bucket="models", Key="by-hand", UploadId=uid,
                                     MultipartUpload={"Parts": parts})
        s3.copy_object(Bucket="datasets", Key="copied", CopySource={"Bucket": "models",
                                                                     "Key": "config.json"})
        # An upload still in progress: its part must not come back as an object.
        pending = s3.create_multipart_upload(Bucket="models", Key="in-progress")["UploadId"]
        s3.upload_part(Bucket="models", Key="in-progress", UploadId=pending, PartNumber=1,
                       Body=b"p" * (5 * MiB))
        s3.put_object(Bucket="datasets", Key="deleted", Body=b"gone")
        s3.delete_object(Bucket="datasets", Key="deleted")
        before = snapshot(s3)
        assert len(before) == 28
        assert cluster.stop() == 0

        # Lose the metadata store: the database and its WAL.
        cfg = tomllib.loads(cluster.config_path.read_text())
        meta = Path(cfg["gateway"]["metadata"])
        assert meta.exists()
        for path in (meta, meta.with_name(meta.name + "-wal"), meta.with_name(meta.name + "-shm")):
            path.unlink(missing_ok=True)

        cluster.start(extra=("--recover-metadata",))
        assert f"recovered {len(before)} objects" in cluster.output()
        s3 = cluster.client()
        after = snapshot(s3)
        assert after.keys() == before.keys()
        for k in before:
            assert after[k] == before[k], k
        assert after[("datasets", "overwritten")]["Metadata"] == {"v": "2"}
        assert ("models", "in-progress") not in after
        # The rebuilt store is a working one.
        s3.put_object(Bucket="models", Key="after-recovery", Body=b"ok")
        assert s3.get_object(Bucket="models", Key="after-recovery")["Body"].read() == b"ok"
        with pytest.raises(ClientError):
            s3.head_object(Bucket="models", Key="never-written")
    finally:
        cluster.stop()
