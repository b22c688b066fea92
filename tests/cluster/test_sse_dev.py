"""`zonegate dev` and server-side encryption: the launcher makes an SSE-S3 master key file for
its cluster (mode 0600, kept across restarts) and allows SSE-C over plain HTTP only when it
does not serve TLS; over `--tls` boto3 uses SSE-C with certificate verification on."""

from __future__ import annotations

import hashlib
import os
import tomllib

import pytest
from botocore.exceptions import ClientError

from gateway.store.ssekeys import MasterKeys
from tests.support.devcluster import DevCluster

pytestmark = pytest.mark.timeout(600)
KEY = hashlib.sha256(b"dev sse test").digest()


def test_dev_tls_cluster_has_a_master_key_and_sse_c_over_https(tmp_path):
    c = DevCluster(tmp_path / "data", nodes=10, zones=16, tls=True, workers=1)
    c.start()
    try:
        gw = tomllib.loads(c.config_path.read_text())["gateway"]
        assert gw["sse_c_allow_http"] is False
        keyfile = gw["sse_master_key_file"]
        assert os.stat(keyfile).st_mode & 0o777 == 0o600
        first = MasterKeys.load(keyfile)
        s3 = c.client()
        s3.create_bucket(Bucket="sse-dev")
        data = os.urandom(300_000)
        r = s3.put_object(Bucket="sse-dev", Key="c", Body=data, SSECustomerAlgorithm="AES256",
                          SSECustomerKey=KEY)
        assert r["SSECustomerAlgorithm"] == "AES256"
        got = s3.get_object(Bucket="sse-dev", Key="c", SSECustomerAlgorithm="AES256",
                            SSECustomerKey=KEY)
        assert got["Body"].read() == data
        r = s3.put_object(Bucket="sse-dev", Key="s", Body=data, ServerSideEncryption="AES256")
        assert r["ServerSideEncryption"] == "AES256"
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket="sse-dev", Key="c")
        assert e.value.response["Error"]["Code"] == "InvalidRequest"
    finally:
        c.stop()
    # a restart keeps the key (the objects it sealed stay readable)
    c.start()
    try:
        assert MasterKeys.load(keyfile).keys == first.keys
        s3 = c.client()
        assert s3.get_object(Bucket="sse-dev", Key="s")["Body"].read() == data
    finally:
        c.stop()
