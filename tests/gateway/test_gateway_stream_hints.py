"""Stream hints are lifetime classes: bucket + key prefix up to the last `/`, for single PUTs,
multipart parts and manifests alike, always a hint the node accepts (gateway/store/streamhints.py)."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.store.streamhints import stream_hint
from tests.support.gwcluster import Gateway

MiB = 1 << 20
NODE_STREAM = re.compile(r"[\x21-\x7e]{1,256}")  # zonestore/node/handlers.py
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
buckets = st.from_regex(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", fullmatch=True)
keys = st.text(min_size=1, max_size=300)


@given(buckets, keys)
def test_hint_is_valid_for_the_node_and_names_the_directory(bucket: str, key: str) -> None:
    hint = stream_hint(bucket, key)
    assert NODE_STREAM.fullmatch(hint) and len(hint) <= 96
    assert hint.startswith(bucket + "/")
    prefix = key[:key.rfind("/") + 1]
    # files of one directory share the hint, whatever their names
    assert stream_hint(bucket, prefix + "other-name") == hint
    if hint != f"{bucket}/{prefix}":  # hashed: still one per directory
        assert stream_hint(bucket, prefix + "x") == hint and "~" in hint


@given(buckets, keys, keys)
def test_different_directories_get_different_hints(bucket: str, a: str, b: str) -> None:
    pa, pb = a[:a.rfind("/") + 1], b[:b.rfind("/") + 1]
    if pa != pb:
        assert stream_hint(bucket, a) != stream_hint(bucket, b)


def test_examples() -> None:
    assert stream_hint("ml", "ckpt/run1/step-100/model.pt") == "ml/ckpt/run1/step-100/"
    assert stream_hint("ml", "README") == "ml/"
    assert stream_hint("ml", "données/x").startswith("ml/~")
    assert stream_hint("ml", "a b/x") != stream_hint("ml", "a_b/x")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("gwhints"), workers=1)
    try:
        g.start()
        yield g
    finally:
        g.stop()


def streams_on_nodes(g: Gateway) -> dict[str, set[str]]:
    """part uid -> the stream hints its archives were written with, over all nodes."""
    out: dict[str, set[str]] = {}
    for i, url in enumerate(g.nodes.urls):
        after = ""
        while True:
            q = {"prefix": "", "after": after, "limit": "1000"}
            req = urllib.request.Request(f"{url}/v1/records?{urlencode(q)}",
                                         headers=g.nodes.headers(i, "GET", "/v1/records", q))
            with _NO_PROXY.open(req, timeout=10) as resp:
                doc = json.load(resp)
            for r in doc["records"]:
                out.setdefault(r["id"].rsplit(".f", 1)[0], set()).add(r["stream"])
            if not doc.get("next"):
                break
            after = doc["next"]
    return out


@pytest.mark.timeout(300)
def test_checkpoint_directory_shares_one_hint(gw: Gateway) -> None:
    s3 = gw.client()
    s3.create_bucket(Bucket="ml-data")
    s3.put_object(Bucket="ml-data", Key="ckpt/run1/step-100/.metadata", Body=b"{}")
    key = "ckpt/run1/step-100/model.pt"
    up = s3.create_multipart_upload(Bucket="ml-data", Key=key)["UploadId"]
    data = os.urandom(5 * MiB)
    etags = [s3.upload_part(Bucket="ml-data", Key=key, UploadId=up, PartNumber=n, Body=data)["ETag"]
             for n in (1, 2)]
    s3.complete_multipart_upload(Bucket="ml-data", Key=key, UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in zip((1, 2), etags, strict=True)]})
    s3.put_object(Bucket="ml-data", Key="weird dir/é/x", Body=b"x")
    streams = streams_on_nodes(gw)
    ours = {uid: s for uid, s in streams.items() if not uid.startswith("bucket:")}
    # 1 single PUT + 2 parts + 1 manifest in the checkpoint directory, 1 elsewhere
    step = [s for s in ours.values() if s == {"ml-data/ckpt/run1/step-100/"}]
    assert len(step) == 4, ours
    assert {"ml-data/~" in h for s in ours.values() for h in s} == {True, False}
    assert s3.get_object(Bucket="ml-data", Key="weird dir/é/x")["Body"].read() == b"x"
