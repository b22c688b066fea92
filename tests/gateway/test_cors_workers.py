"""CORS with several gateway workers: each keeps the buckets' rules for a moment (ops/cors.py
CACHE_SECONDS), so a change made through one worker reaches the others soon after, for
preflights and for the headers on answers alike; none keeps answering the old rules."""

from __future__ import annotations

import pytest

from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY, Gateway, wait_for
from tests.support.s3raw import Creds, send

pytestmark = pytest.mark.timeout(180)
SITE = "https://app.example.com"


def test_every_worker_follows_a_change(tmp_path) -> None:
    g = Gateway(tmp_path, workers=3).start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="shared")
        c = Creds(g.port, ACCESS_KEY, SECRET_KEY)
        host = {"Host": f"127.0.0.1:{g.port}"}

        def preflights_allowed(n: int = 30) -> set[bool]:
            # fresh connections, so the kernel spreads them over the workers
            return {send(c, "OPTIONS", "/shared/k", {
                **host, "Origin": SITE, "Access-Control-Request-Method": "GET"})[0] == 200
                for _ in range(n)}

        assert preflights_allowed() == {False}  # every worker has read "no configuration"
        s3.put_bucket_cors(Bucket="shared", CORSConfiguration={"CORSRules": [
            {"AllowedOrigins": [SITE], "AllowedMethods": ["GET"]}]})
        assert wait_for(lambda: preflights_allowed() == {True}, timeout=30)
        s3.delete_bucket_cors(Bucket="shared")
        assert wait_for(lambda: preflights_allowed() == {False}, timeout=30)
    finally:
        g.stop()
