"""Server-side encryption with the metadata in PostgreSQL (a real server started here) and two
gateway workers: the same answers as on SQLite (envelopes in the stored headers, the bucket's
`encryption` document), and an object sealed through one worker opens through the other."""

from __future__ import annotations

import hashlib
import io
import os

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from gateway.store.ssekeys import new_key_line
from tests.gateway.test_sse import KEY1, KEY2, ssec
from tests.support.gwcluster import Gateway, serving
from tests.support.pgserver import PgServer, skip_reason

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]
MiB = 1024 * 1024


def test_sse_on_postgres(tmp_path):
    pg = PgServer()
    pg.start()
    try:
        keys = tmp_path / "master.keys"
        keys.write_text(new_key_line("k1"))
        with serving(Gateway(tmp_path / "gw", workers=2, gateway_options={
                "metadata": pg.new_database("sse"), "metadata_password_file":
                str(pg.password_file), "sse_master_key_file": str(keys),
                "sse_c_allow_http": True})) as g:
            s3 = g.client()
            s3.create_bucket(Bucket="pg-enc")
            data = os.urandom(3 * MiB + 1)
            r = s3.put_object(Bucket="pg-enc", Key="s3", Body=data, ServerSideEncryption="AES256")
            assert r["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
            s3.put_object(Bucket="pg-enc", Key="c", Body=data, **ssec(KEY1))
            s3.upload_fileobj(io.BytesIO(data * 3), "pg-enc", "mp", ExtraArgs=ssec(KEY2),
                              Config=TransferConfig(multipart_threshold=5 * MiB,
                                                    multipart_chunksize=5 * MiB))
            for _ in range(4):  # a fresh connection each time: either worker answers
                c = g.client()
                assert c.get_object(Bucket="pg-enc", Key="s3")["Body"].read() == data
                got = c.get_object(Bucket="pg-enc", Key="c", Range="bytes=100-70000",
                                   **ssec(KEY1))
                assert got["Body"].read() == data[100:70001]
                got = c.get_object(Bucket="pg-enc", Key="mp", PartNumber=2, **ssec(KEY2))
                assert got["Body"].read() == (data * 3)[5 * MiB:10 * MiB]
            with pytest.raises(ClientError) as e:
                s3.head_object(Bucket="pg-enc", Key="c", **ssec(KEY2))
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
            with pytest.raises(ClientError) as e:
                s3.get_bucket_encryption(Bucket="pg-enc")
            assert e.value.response["Error"]["Code"] == \
                "ServerSideEncryptionConfigurationNotFoundError"
            s3.put_bucket_encryption(Bucket="pg-enc", ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
            assert s3.put_object(Bucket="pg-enc", Key="d", Body=b"x")[
                "ServerSideEncryption"] == "AES256"
            r = s3.copy_object(Bucket="pg-enc", Key="c2", CopySource="pg-enc/c",
                               **ssec(KEY1, copy=True))
            assert r["ServerSideEncryption"] == "AES256"  # the bucket default, not the source's
            assert s3.get_object(Bucket="pg-enc", Key="c2")["Body"].read() == data
    finally:
        pg.destroy()
