"""`zonegate recover-metadata`: delete the metadata store, rebuild it from the nodes, and every
object reads back with the same ETag, size, headers, user metadata and checksum."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from boto3.s3.transfer import TransferConfig

from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY, Gateway

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")]
MiB = 1024 * 1024


def snapshot(s3, bucket):
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            h = s3.head_object(Bucket=bucket, Key=o["Key"], ChecksumMode="ENABLED")
            keep = {k: v for k, v in h.items() if k not in ("ResponseMetadata",)}
            out[o["Key"]] = keep
    return out


def test_recover_metadata_after_losing_the_store(tmp_path):
    g = Gateway(tmp_path, workers=1)
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="ckpts")
        s3.create_bucket(Bucket="data-set")
        blobs = {}
        for i in range(3):
            blobs[("data-set", f"shard-{i:03d}.bin")] = os.urandom(100_000 + i)
            s3.put_object(Bucket="data-set", Key=f"shard-{i:03d}.bin",
                          Body=blobs[("data-set", f"shard-{i:03d}.bin")],
                          ContentType="application/octet-stream", Metadata={"n": str(i)},
                          ChecksumAlgorithm="SHA256")
        # Overwritten: only the newest version must come back.
        s3.put_object(Bucket="data-set", Key="shard-000.bin", Body=b"old")
        blobs[("data-set", "shard-000.bin")] = b"newest" * 1000
        s3.put_object(Bucket="data-set", Key="shard-000.bin", Body=blobs[("data-set",
                                                                         "shard-000.bin")],
                      CacheControl="no-store", Metadata={"v": "2"})
        big = os.urandom(13 * MiB)
        blobs[("ckpts", "step-100/model.pt")] = big
        s3.upload_fileobj(__import__("io").BytesIO(big), "ckpts", "step-100/model.pt",
                          ExtraArgs={"Metadata": {"step": "100"}, "ContentType": "x/pt"},
                          Config=TransferConfig(multipart_threshold=5 * MiB,
                                                multipart_chunksize=5 * MiB))
        s3.copy_object(Bucket="ckpts", Key="latest.pt", CopySource="ckpts/step-100/model.pt")
        blobs[("ckpts", "latest.pt")] = big
        # An upload that never completes is not an object after recovery.
        uid = s3.create_multipart_upload(Bucket="ckpts", Key="partial")["UploadId"]
        s3.upload_part(Bucket="ckpts", Key="partial", UploadId=uid, PartNumber=1, Body=b"p" * 10)
        # Streamed without a length (curl -T - from a pipe): stored in several internal
        # parts plus a manifest, it must come back as the one-part object it is.
        piped = os.urandom(19 * MiB)
        blobs[("ckpts", "piped.bin")] = piped
        r = subprocess.run(
            ["curl", "-sS", "--fail", "--noproxy", "*", "--user", f"{ACCESS_KEY}:{SECRET_KEY}",
             "--aws-sigv4", "aws:amz:us-east-1:s3", "-H", "x-amz-content-sha256: "
             "UNSIGNED-PAYLOAD", "-H", "x-amz-meta-title: Été", "-T", "-",
             f"{g.endpoint}/ckpts/piped.bin"], input=piped, capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr
        before = {b: snapshot(s3, b) for b in ("ckpts", "data-set")}

        g.stop_gateway()
        for suffix in ("", "-wal", "-shm"):
            p = g.meta_path.with_name(g.meta_path.name + suffix)
            if p.exists():
                p.unlink()
        r = subprocess.run([sys.executable, "-m", "gateway.cli", "recover-metadata",
                            "--config", str(g.config_path)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        # (the streamed object has a manifest, so it counts as multipart here)
        assert "recovered 6 objects (2 multipart)" in r.stdout
        # A second run refuses to touch a non-empty store.
        r2 = subprocess.run([sys.executable, "-m", "gateway.cli", "recover-metadata",
                             "--config", str(g.config_path)], capture_output=True, text=True,
                            timeout=120)
        assert r2.returncode == 1 and "not empty" in r2.stderr

        g.start_gateway()
        s3 = g.client()
        assert sorted(b["Name"] for b in s3.list_buckets()["Buckets"]) == ["ckpts", "data-set"]
        after = {b: snapshot(s3, b) for b in ("ckpts", "data-set")}
        for b in before:
            assert set(after[b]) == set(before[b])
            for k in before[b]:
                for field in ("ETag", "ContentLength", "ContentType", "Metadata", "CacheControl",
                              "ChecksumSHA256", "ChecksumCRC32", "PartsCount", "LastModified"):
                    assert after[b][k].get(field) == before[b][k].get(field), (b, k, field)
        for (b, k), data in blobs.items():
            assert s3.get_object(Bucket=b, Key=k)["Body"].read() == data, (b, k)
        assert "Uploads" not in s3.list_multipart_uploads(Bucket="ckpts")
    finally:
        g.stop()
