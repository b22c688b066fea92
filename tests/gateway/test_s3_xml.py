"""S3 XML: request bodies that botocore sends parse; hostile or malformed XML is MalformedXML;
response bodies we build are read back correctly by a real botocore client (its own parsers
and handlers, e.g. encoding-type=url decoding), and error bodies become the right ClientError.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from gateway.s3 import xmlio
from gateway.s3.errors import ERRORS, S3Error, error_xml
from tests.gateway.test_s3_auth import capture, make_client

KEYS = ["plain", "dir/sub/file.bin", "a b+c%d&e<f>'\"", "ünïcødé/ключ", "tab\there"]
T = dt.datetime(2026, 11, 29, 9, 30, 15, 123456, tzinfo=dt.UTC)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, *args, **kwargs):
        return iter([self._body])


def client_reads(op: str, body: bytes, status: int = 200, headers=None, **params):
    """Call `op` on a real botocore client whose HTTP response is `body`."""
    client = make_client()

    def before_send(request, **kwargs):
        return AWSResponse(request.url, status, headers or {}, _Raw(body))

    client.meta.events.register("before-send.s3", before_send)
    return getattr(client, op)(**params)


# ---- parsing requests --------------------------------------------------------------------


def test_complete_multipart_upload_body_from_botocore():
    parts = [{"PartNumber": 1, "ETag": '"abc"', "ChecksumCRC32": "AAAAAA=="},
             {"PartNumber": 2, "ETag": '"def"'}]
    c = capture("complete_multipart_upload", Bucket="b", Key="k", UploadId="u",
                MultipartUpload={"Parts": parts})
    got = xmlio.parse_complete_multipart_upload(c.body)
    assert got == [xmlio.CompletedPart(1, '"abc"', {"CRC32": "AAAAAA=="}),
                   xmlio.CompletedPart(2, '"def"', {})]


def test_delete_body_from_botocore():
    c = capture("delete_objects", Bucket="b", Delete={
        "Objects": [{"Key": k} for k in KEYS] + [{"Key": "v", "VersionId": "null"}],
        "Quiet": True})
    req = xmlio.parse_delete(c.body)
    assert req.quiet is True
    assert req.objects == [(k, None) for k in KEYS] + [("v", "null")]


def test_create_bucket_configuration():
    c = capture("create_bucket", Bucket="b",
                CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    assert xmlio.parse_create_bucket_configuration(c.body) == "eu-west-1"
    assert xmlio.parse_create_bucket_configuration(b"") is None
    assert xmlio.parse_create_bucket_configuration(
        b"<CreateBucketConfiguration></CreateBucketConfiguration>") is None


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
<Delete><Object><Key>&lol2;</Key></Object></Delete>"""
XXE = b"""<?xml version="1.0"?>
<!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<Delete><Object><Key>&x;</Key></Object></Delete>"""


@pytest.mark.parametrize("body", [
    b"", b"   ", b"not xml", b"<Delete>", b"<Other><Object><Key>a</Key></Object></Other>",
    b"<Delete></Delete>", b"<Delete><Object></Object></Delete>",
    b"<Delete><Quiet>maybe</Quiet><Object><Key>a</Key></Object></Delete>",
    b"<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>",
    BILLION_LAUGHS, XXE,
    b"<Delete>" + b"<Object><Key>k</Key></Object>" * 1001 + b"</Delete>",
])
def test_bad_delete_bodies_are_malformed_xml(body):
    with pytest.raises(S3Error) as e:
        xmlio.parse_delete(body)
    assert (e.value.code, e.value.status) == ("MalformedXML", 400)


def test_delete_accepts_exactly_1000_keys_and_the_s3_namespace():
    body = (b'<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            + b"<Object><Key>k</Key></Object>" * 1000 + b"</Delete>")
    assert len(xmlio.parse_delete(body).objects) == 1000


@pytest.mark.parametrize("body,code", [
    (b"<CompleteMultipartUpload></CompleteMultipartUpload>", "MalformedXML"),
    (b"<CompleteMultipartUpload><Part><ETag>x</ETag></Part></CompleteMultipartUpload>",
     "MalformedXML"),
    (b"<CompleteMultipartUpload><Part><PartNumber>one</PartNumber><ETag>x</ETag></Part>"
     b"</CompleteMultipartUpload>", "MalformedXML"),
    (b"<CompleteMultipartUpload><Part><PartNumber>10001</PartNumber><ETag>x</ETag></Part>"
     b"</CompleteMultipartUpload>", "InvalidArgument"),
    (BILLION_LAUGHS.replace(b"Delete", b"CompleteMultipartUpload"), "MalformedXML"),
])
def test_bad_complete_bodies(body, code):
    with pytest.raises(S3Error) as e:
        xmlio.parse_complete_multipart_upload(body)
    assert e.value.code == code


def test_read_body_is_bounded():
    async def chunks():
        for _ in range(100):
            yield b"x" * 1000

    with pytest.raises(S3Error) as e:
        asyncio.run(xmlio.read_body(chunks(), limit=10_000))
    assert e.value.code == "MaxMessageLengthExceeded"
    assert len(asyncio.run(xmlio.read_body(chunks(), limit=100_000))) == 100_000


# ---- building responses, read back by botocore -------------------------------------------


OWNER = xmlio.Owner("owner-id", "alice")


def _entries(keys=KEYS):
    return [xmlio.ObjectEntry(k, T, '"d41d8cd98f00b204e9800998ecf8427e"', i, owner=OWNER)
            for i, k in enumerate(keys)]


def test_list_buckets():
    r = client_reads("list_buckets", xmlio.list_buckets(OWNER, [("b1", T), ("b2", 0)]))
    assert [b["Name"] for b in r["Buckets"]] == ["b1", "b2"]
    assert r["Buckets"][0]["CreationDate"] == T.replace(microsecond=123000)
    assert r["Owner"] == {"ID": "owner-id", "DisplayName": "alice"}


@pytest.mark.parametrize("encoding", [None, "url"])
def test_list_objects_v2_round_trips_odd_keys(encoding):
    body = xmlio.list_objects_v2(
        bucket="b", prefix="a b/", delimiter="/", max_keys=10, is_truncated=True,
        contents=_entries(), common_prefixes=["a b/x y/", "a b/é+/"],
        continuation_token="tok1", next_continuation_token="tok2", start_after="a b/0",
        encoding_type=encoding)
    r = client_reads("list_objects_v2", body, Bucket="b")
    # botocore asks for EncodingType=url and decodes only when the response says "url"
    assert [c["Key"] for c in r["Contents"]] == KEYS
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["a b/x y/", "a b/é+/"]
    assert r["Prefix"] == "a b/" and r["StartAfter"] == "a b/0" and r["Delimiter"] == "/"
    assert r["KeyCount"] == len(KEYS) + 2 and r["IsTruncated"] is True
    assert r["NextContinuationToken"] == "tok2" and r["MaxKeys"] == 10
    assert r["Contents"][2]["Size"] == 2 and r["Contents"][0]["ETag"].startswith('"')
    assert "Owner" not in r["Contents"][0]


def test_list_objects_v2_with_owner_and_v1_markers():
    body = xmlio.list_objects_v2(bucket="b", contents=_entries(["k"]), fetch_owner=True)
    r = client_reads("list_objects_v2", body, Bucket="b")
    assert r["Contents"][0]["Owner"]["ID"] == "owner-id"
    body = xmlio.list_objects_v1(bucket="b", marker="", delimiter="/", is_truncated=True,
                                 contents=_entries(), next_marker=KEYS[-1],
                                 encoding_type="url")
    r = client_reads("list_objects", body, Bucket="b")
    assert [c["Key"] for c in r["Contents"]] == KEYS
    assert r["Marker"] == "" and r["NextMarker"] == KEYS[-1] and r["IsTruncated"] is True


def test_list_object_versions_for_an_unversioned_store():
    body = xmlio.list_object_versions(bucket="b", versions=_entries(), encoding_type="url")
    r = client_reads("list_object_versions", body, Bucket="b")
    assert [v["Key"] for v in r["Versions"]] == KEYS
    assert {v["VersionId"] for v in r["Versions"]} == {"null"}
    assert all(v["IsLatest"] for v in r["Versions"])


def test_multipart_results():
    r = client_reads("create_multipart_upload",
                     xmlio.initiate_multipart_upload("b", KEYS[2], "up-1"), Bucket="b", Key="k")
    assert (r["Bucket"], r["Key"], r["UploadId"]) == ("b", KEYS[2], "up-1")
    r = client_reads("complete_multipart_upload", xmlio.complete_multipart_upload(
        location="http://x/b/k", bucket="b", key="k", etag='"abc-2"',
        checksums={"CRC32": "AAAAAA=="}, checksum_type="COMPOSITE"),
        Bucket="b", Key="k", UploadId="u", MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": "x"}]})
    assert r["ETag"] == '"abc-2"' and r["ChecksumCRC32"] == "AAAAAA=="
    assert r["ChecksumType"] == "COMPOSITE"
    parts = [xmlio.PartEntry(i, T, f'"e{i}"', 5 << 20, {"CRC32": "AAAAAA=="}) for i in (1, 2)]
    r = client_reads("list_parts", xmlio.list_parts(
        bucket="b", key="k", upload_id="u", parts=parts, max_parts=2, is_truncated=True,
        owner=OWNER, checksum_algorithm="CRC32"), Bucket="b", Key="k", UploadId="u")
    assert [p["PartNumber"] for p in r["Parts"]] == [1, 2]
    assert r["NextPartNumberMarker"] == 2 and r["IsTruncated"] is True
    assert r["Parts"][0]["ChecksumCRC32"] == "AAAAAA==" and r["Parts"][1]["Size"] == 5 << 20
    uploads = [xmlio.UploadEntry(KEYS[2], "u1", T, OWNER), xmlio.UploadEntry("z", "u2", T)]
    r = client_reads("list_multipart_uploads", xmlio.list_multipart_uploads(
        bucket="b", uploads=uploads, next_key_marker="z", next_upload_id_marker="u2",
        is_truncated=True, max_uploads=2), Bucket="b")
    assert [(u["Key"], u["UploadId"]) for u in r["Uploads"]] == [(KEYS[2], "u1"), ("z", "u2")]
    assert r["NextKeyMarker"] == "z" and r["IsTruncated"] is True


def test_copy_results():
    r = client_reads("copy_object", xmlio.copy_object_result('"e"', T, {"CRC32C": "AAAAAA=="}),
                     Bucket="b", Key="k", CopySource="s/k")
    assert r["CopyObjectResult"]["ETag"] == '"e"'
    assert r["CopyObjectResult"]["ChecksumCRC32C"] == "AAAAAA=="
    r = client_reads("upload_part_copy", xmlio.copy_part_result('"p"', T), Bucket="b", Key="k",
                     CopySource="s/k", UploadId="u", PartNumber=1)
    assert r["CopyPartResult"]["ETag"] == '"p"'


def test_delete_result():
    body = xmlio.delete_result([(k, None) for k in KEYS] + [("v", "null")],
                               [xmlio.DeleteError("bad", "AccessDenied", "Access Denied")])
    r = client_reads("delete_objects", body, Bucket="b",
                     Delete={"Objects": [{"Key": "a"}]})
    assert [d["Key"] for d in r["Deleted"]] == KEYS + ["v"]
    assert r["Deleted"][-1]["VersionId"] == "null"
    assert r["Errors"] == [{"Key": "bad", "Code": "AccessDenied", "Message": "Access Denied"}]
    quiet = xmlio.delete_result([("a", None)], quiet=True)
    assert "Deleted" not in client_reads("delete_objects", quiet, Bucket="b",
                                         Delete={"Objects": [{"Key": "a"}]})


def test_location_constraint():
    r = client_reads("get_bucket_location", xmlio.location_constraint("us-east-1"), Bucket="b")
    assert r.get("LocationConstraint") in (None, "")
    r = client_reads("get_bucket_location", xmlio.location_constraint("eu-west-1"), Bucket="b")
    assert r["LocationConstraint"] == "eu-west-1"


def test_iso8601():
    assert xmlio.iso8601(T) == "2026-11-29T09:30:15.123Z"
    assert xmlio.iso8601(0) == "1970-01-01T00:00:00.000Z"
    assert xmlio.iso8601(dt.datetime(2020, 1, 2, 3, 4, 5)) == "2020-01-02T03:04:05.000Z"


# ---- error bodies ------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["NoSuchKey", "NoSuchBucket", "InvalidRange", "BadDigest",
                                  "SignatureDoesNotMatch", "BucketNotEmpty", "NotImplemented",
                                  "SlowDown", "MissingContentLength", "PreconditionFailed"])
def test_error_bodies_become_client_errors(code):
    err = S3Error(code, resource="/b/k<&>", ArgumentName="x")
    body = error_xml(err, "req-123")
    with pytest.raises(ClientError) as e:
        client_reads("get_object", body, status=err.status, Bucket="b", Key="k")
    resp = e.value.response
    assert resp["Error"]["Code"] == code
    assert resp["Error"]["Message"] == ERRORS[code][1]
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == ERRORS[code][0]


def test_error_fields():
    err = S3Error("InvalidArgument", "max-keys must be an integer", ArgumentName="max-keys",
                  ArgumentValue="<x>")
    xml = error_xml(err, "rid", resource="/b")
    assert b"<Code>InvalidArgument</Code>" in xml and b"<Resource>/b</Resource>" in xml
    assert b"<ArgumentValue>&lt;x&gt;</ArgumentValue>" in xml and b"<RequestId>rid" in xml
    assert S3Error("SomethingNew").status == 400
    assert S3Error("NoSuchUpload").status == 404 and S3Error("InvalidRange").status == 416
    assert S3Error("InternalError").status == 500 and S3Error("ServiceUnavailable").status == 503
    assert S3Error("MethodNotAllowed").status == 405
    assert S3Error("BucketAlreadyOwnedByYou").status == 409


@pytest.mark.parametrize("encoding", ["x-bogus", "rot13", "zlib", "base64", "utf-16", "cp500"])
@pytest.mark.parametrize("parse,doc", [
    (xmlio.parse_delete, "<Delete><Object><Key>k</Key></Object></Delete>"),
    (xmlio.parse_complete_multipart_upload,
     "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>e</ETag></Part>"
     "</CompleteMultipartUpload>"),
    (xmlio.parse_create_bucket_configuration,
     "<CreateBucketConfiguration><LocationConstraint>x</LocationConstraint>"
     "</CreateBucketConfiguration>"),
])
def test_a_declared_encoding_the_parser_cannot_use_is_malformed_xml(parse, doc, encoding):
    """Issue 12 defect 5: LookupError (and friends) from expat used to be a 500."""
    with pytest.raises(S3Error) as e:
        parse(f'<?xml version="1.0" encoding="{encoding}"?>{doc}'.encode())
    assert e.value.code == "MalformedXML"


@pytest.mark.parametrize("number", ["\u0661", "\u00b2", "+1", "1_0", "9" * 5000])
def test_part_numbers_in_xml_are_ascii_digits(number):
    body = (f"<CompleteMultipartUpload><Part><PartNumber>{number}</PartNumber><ETag>e</ETag>"
            "</Part></CompleteMultipartUpload>").encode()
    with pytest.raises(S3Error) as e:
        xmlio.parse_complete_multipart_upload(body)
    assert e.value.code == "MalformedXML"
