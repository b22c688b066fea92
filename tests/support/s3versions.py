"""Walking ListObjectVersions in S3's own order, for the versioning tests."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from urllib.parse import quote

from tests.support.gwcluster import Gateway, signed_request

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def raw_versions(cluster: Gateway, bucket: str, query: str) -> bytes:
    status, _, body = signed_request(cluster, "GET", f"/{bucket}", query=query)
    assert status == 200, body
    return body


def versions_of(cluster: Gateway, bucket: str, prefix: str = "",
                max_keys: int = 1000) -> list[tuple[str, str, bool, bool]]:
    """(key, version id, is latest, is delete marker) of every version, in S3's order (the
    XML's own: boto3 splits Versions and DeleteMarkers into two lists), walking the pages by
    NextKeyMarker / NextVersionIdMarker."""
    out: list[tuple[str, str, bool, bool]] = []
    km = vm = ""
    while True:
        q = f"versions&max-keys={max_keys}&prefix={quote(prefix, safe='')}"
        if km:
            q += f"&key-marker={quote(km, safe='')}"
        if vm:
            q += f"&version-id-marker={vm}"
        root = ET.fromstring(raw_versions(cluster, bucket, q))
        for el in root:
            tag = el.tag.replace(NS, "")
            if tag in ("Version", "DeleteMarker"):
                out.append((el.findtext(NS + "Key"), el.findtext(NS + "VersionId"),
                            el.findtext(NS + "IsLatest") == "true", tag == "DeleteMarker"))
        if root.findtext(NS + "IsTruncated") != "true":
            return out
        km = root.findtext(NS + "NextKeyMarker") or ""
        vm = root.findtext(NS + "NextVersionIdMarker") or ""


def boto_versions(s3, bucket: str, **kw) -> set[tuple[str, str, bool, bool]]:
    """The same through boto3's paginator (as a set: boto3 loses the interleaving)."""
    out = set()
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, **kw):
        out |= {(v["Key"], v["VersionId"], v["IsLatest"], False) for v in page.get("Versions", [])}
        out |= {(v["Key"], v["VersionId"], v["IsLatest"], True)
                for v in page.get("DeleteMarkers", [])}
    return out
