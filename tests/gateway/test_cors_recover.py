"""A bucket's CORS configuration lives in its marker on the nodes too: after the metadata store
is lost, `zonegate recover-metadata` brings it back, and preflights are answered as before; a
configuration deleted before the loss stays deleted."""

from __future__ import annotations

import subprocess
import sys

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY, Gateway
from tests.support.s3raw import Creds, send

pytestmark = pytest.mark.timeout(180)
RULES = [{"ID": "viewer", "AllowedOrigins": ["https://*.example.com"],
          "AllowedMethods": ["GET", "HEAD"], "AllowedHeaders": ["range"],
          "ExposeHeaders": ["ETag", "Content-Range"], "MaxAgeSeconds": 300}]


def test_recover_metadata_brings_cors_back(tmp_path) -> None:
    g = Gateway(tmp_path).start()
    try:
        s3 = g.client()
        for b in ("shown", "cleared"):
            s3.create_bucket(Bucket=b)
            s3.put_bucket_cors(Bucket=b, CORSConfiguration={"CORSRules": RULES})
        s3.put_object(Bucket="shown", Key="shard-0", Body=b"tokens")
        s3.delete_bucket_cors(Bucket="cleared")

        g.stop_gateway()
        for suffix in ("", "-wal", "-shm"):
            g.meta_path.with_name(g.meta_path.name + suffix).unlink(missing_ok=True)
        r = subprocess.run([sys.executable, "-m", "gateway.cli", "recover-metadata", "--config",
                            str(g.config_path)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        g.start_gateway()

        s3 = g.client()
        assert s3.get_bucket_cors(Bucket="shown")["CORSRules"] == RULES
        with pytest.raises(ClientError) as e:
            s3.get_bucket_cors(Bucket="cleared")
        assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
        c = Creds(g.port, ACCESS_KEY, SECRET_KEY)
        status, h, _ = send(c, "OPTIONS", "/shown/shard-0", {
            "Host": f"127.0.0.1:{g.port}", "Origin": "https://viewer.example.com",
            "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "Range"})
        assert status == 200
        assert h["access-control-allow-origin"] == "https://viewer.example.com"
        assert h["access-control-allow-headers"] == "range"
    finally:
        g.stop()
