"""CORS against a real gateway (node processes plus `zonegate serve`): Put/Get/DeleteBucketCors
with boto3, bad configurations refused with S3's codes and nothing changed, unsigned OPTIONS
preflights answered per rule (raw HTTP, as a browser sends them), and the Access-Control-*
headers on answers to requests with an Origin, errors included, as S3 adds them."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from tests.support.gwcluster import ACCESS_KEY, OTHER_ACCESS, OTHER_SECRET, SECRET_KEY, Gateway
from tests.support.s3raw import Creds, code_of, error, presign_v4, send, sign_v4

pytestmark = pytest.mark.timeout(300)

SITE = "https://app.example.com"
VARY = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"
RULES = [
    {"ID": "site", "AllowedOrigins": [SITE, "https://*.example.org"],
     "AllowedMethods": ["GET", "PUT", "HEAD"], "AllowedHeaders": ["Content-Type", "x-amz-*"],
     "ExposeHeaders": ["ETag", "x-amz-request-id"], "MaxAgeSeconds": 600},
    {"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]},
]
NOT_ALLOWED = ("CORSResponse: This CORS request is not allowed. This is usually because the "
               "evalution of Origin, request method / Access-Control-Request-Method or "
               "Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("gw-cors"))
    try:
        g.start()
        s3 = g.client()
        for b in ("web", "plain"):
            s3.create_bucket(Bucket=b)
            s3.put_object(Bucket=b, Key="page.txt", Body=b"hello from " + b.encode())
        s3.put_bucket_cors(Bucket="web", CORSConfiguration={"CORSRules": RULES})
        yield g
    finally:
        g.stop()
    assert "internal error" not in g.log_path.read_text(errors="replace"), g.log_tail()


@pytest.fixture(scope="module")
def s3(gw):
    return gw.client()


@pytest.fixture(scope="module")
def c(gw) -> Creds:
    return Creds(gw.port, ACCESS_KEY, SECRET_KEY)


def options(c: Creds, target: str, origin: str | None = SITE, method: str | None = "GET",
            req_headers: str | None = None) -> tuple[int, dict[str, str], bytes]:
    h = {"Host": f"127.0.0.1:{c.port}"}
    if origin is not None:
        h["Origin"] = origin
    if method is not None:
        h["Access-Control-Request-Method"] = method
    if req_headers is not None:
        h["Access-Control-Request-Headers"] = req_headers
    return send(c, "OPTIONS", target, h)


def acl_headers(h: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in h.items() if k.startswith("access-control-") or k == "vary"}


def signed(c: Creds, method: str, target: str, extra: dict[str, str] | None = None,
           body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    h = sign_v4(c, method, target, body=body, headers={
        "x-amz-content-sha256": hashlib.sha256(body).hexdigest(), **(extra or {})})
    return send(c, method, target, h, body)


def put_raw(c: Creds, bucket: str, body: bytes) -> tuple[int, str]:
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    status, _, resp = signed(c, "PUT", f"/{bucket}?cors", {"Content-MD5": md5}, body)
    return code_of(status, resp)


# ---- the configuration -----------------------------------------------------------------------


def test_put_get_delete_bucket_cors_with_boto3(s3) -> None:
    s3.create_bucket(Bucket="cycle")
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket="cycle")
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    s3.put_bucket_cors(Bucket="cycle", CORSConfiguration={"CORSRules": RULES})
    assert s3.get_bucket_cors(Bucket="cycle")["CORSRules"] == RULES
    # a second Put replaces the whole configuration
    s3.put_bucket_cors(Bucket="cycle", CORSConfiguration={"CORSRules": RULES[1:]})
    assert s3.get_bucket_cors(Bucket="cycle")["CORSRules"] == RULES[1:]
    assert s3.delete_bucket_cors(Bucket="cycle")["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket="cycle")
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    s3.delete_bucket_cors(Bucket="cycle")  # nothing to delete: still 204
    s3.delete_bucket(Bucket="cycle")


def test_cors_of_a_missing_bucket_or_of_another_users_bucket(gw, s3) -> None:
    for call in (lambda c: c.get_bucket_cors(Bucket="nosuch"),
                 lambda c: c.delete_bucket_cors(Bucket="nosuch"),
                 lambda c: c.put_bucket_cors(Bucket="nosuch",
                                             CORSConfiguration={"CORSRules": RULES})):
        with pytest.raises(ClientError) as e:
            call(s3)
        assert e.value.response["Error"]["Code"] == "NoSuchBucket"
    bob = gw.client(OTHER_ACCESS, OTHER_SECRET)
    for call in (lambda c: c.get_bucket_cors(Bucket="web"),
                 lambda c: c.delete_bucket_cors(Bucket="web"),
                 lambda c: c.put_bucket_cors(Bucket="web",
                                             CORSConfiguration={"CORSRules": RULES[1:]})):
        with pytest.raises(ClientError) as e:
            call(bob)
        assert e.value.response["Error"]["Code"] == "AccessDenied"
    assert s3.get_bucket_cors(Bucket="web")["CORSRules"] == RULES


MIN = "<AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"


def cfg(*rules: str) -> bytes:
    return ("<CORSConfiguration>" + "".join(f"<CORSRule>{r}</CORSRule>" for r in rules) +
            "</CORSConfiguration>").encode()


@pytest.mark.parametrize(("body", "code"), [
    (b"not xml", "MalformedXML"),
    (cfg(), "MalformedXML"),
    (cfg("<AllowedMethod>GET</AllowedMethod>"), "MalformedXML"),
    (cfg(MIN + "<Bogus/>"), "MalformedXML"),
    (cfg(*[MIN] * 101), "MalformedXML"),
    (cfg(MIN + "<MaxAgeSeconds>soon</MaxAgeSeconds>"), "MalformedXML"),
    (b'<!DOCTYPE d [<!ENTITY e "x">]><CORSConfiguration>&e;</CORSConfiguration>',
     "MalformedXML"),
    (cfg("<AllowedOrigin>*</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod>"),
     "InvalidRequest"),
    (cfg("<AllowedOrigin>http://*.*.com</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"),
     "InvalidRequest"),
    (cfg(MIN + "<ExposeHeader>*</ExposeHeader>"), "InvalidRequest"),
    (cfg(MIN + "<ID>" + "x" * 70_000 + "</ID>"), "MaxMessageLengthExceeded"),
])
def test_bad_configuration_is_refused_and_changes_nothing(gw, s3, c, body, code) -> None:
    assert put_raw(c, "web", body) == (400, code)
    assert s3.get_bucket_cors(Bucket="web")["CORSRules"] == RULES
    # the preflight still answers from the configuration in place
    status, h, _ = options(c, "/web/page.txt", method="PUT")
    assert status == 200 and h["access-control-allow-origin"] == SITE


def test_unsupported_method_message_as_s3(c) -> None:
    status, _, body = signed(c, "PUT", "/plain?cors", {"Content-MD5": base64.b64encode(
        hashlib.md5(b := cfg("<AllowedOrigin>*</AllowedOrigin>"
                             "<AllowedMethod>OPTIONS</AllowedMethod>")).digest()).decode()}, b)
    assert status == 400
    assert error(body)["Message"] == ("Found unsupported HTTP method in CORS config. "
                                      "Unsupported method is OPTIONS")


def test_a_wrong_content_md5_is_bad_digest_and_changes_nothing(s3, c) -> None:
    body = cfg(MIN)
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    status, _, resp = signed(c, "PUT", "/web?cors", {"Content-MD5": wrong}, body)
    assert code_of(status, resp) == (400, "BadDigest")
    assert s3.get_bucket_cors(Bucket="web")["CORSRules"] == RULES


# ---- preflight -------------------------------------------------------------------------------


def test_preflight_allowed_answers_the_rules_headers_unsigned(c) -> None:
    status, h, body = options(c, "/web/page.txt", method="PUT",
                              req_headers="Content-Type, X-Amz-Date")
    assert status == 200 and body == b""
    assert acl_headers(h) == {
        "access-control-allow-origin": SITE,
        "access-control-allow-methods": "GET, PUT, HEAD",
        "access-control-allow-headers": "content-type, x-amz-date",
        "access-control-expose-headers": "ETag, x-amz-request-id",
        "access-control-max-age": "600",
        "access-control-allow-credentials": "true",
        "vary": VARY,
    }
    assert h.get("x-amz-request-id")
    # a wildcard origin pattern; the bucket itself
    status, h, _ = options(c, "/web", origin="https://a.b.example.org", method="HEAD")
    assert status == 200 and h["access-control-allow-origin"] == "https://a.b.example.org"
    # only the "*" rule allows this origin: "*", no credentials
    status, h, _ = options(c, "/web/page.txt", origin="http://elsewhere.test")
    assert status == 200
    assert acl_headers(h) == {"access-control-allow-origin": "*",
                              "access-control-allow-methods": "GET", "vary": VARY}


@pytest.mark.parametrize(("target", "origin", "method", "req_headers", "status", "code", "msg"), [
    ("/web/page.txt", None, "GET", None, 400, "BadRequest",
     "Insufficient information. Origin request header needed."),
    ("/web/page.txt", SITE, None, None, 400, "BadRequest",
     "Invalid Access-Control-Request-Method: null"),
    ("/web/page.txt", SITE, "PATCH", None, 400, "BadRequest",
     "Invalid Access-Control-Request-Method: PATCH"),
    ("/web/page.txt", SITE, "DELETE", None, 403, "AccessForbidden", NOT_ALLOWED),
    ("/web/page.txt", "http://elsewhere.test", "PUT", None, 403, "AccessForbidden",
     NOT_ALLOWED),
    ("/web/page.txt", SITE, "PUT", "content-type, authorization", 403, "AccessForbidden",
     NOT_ALLOWED),
    ("/web/page.txt", "HTTPS://APP.EXAMPLE.COM", "PUT", None, 403, "AccessForbidden",
     NOT_ALLOWED),
    ("/plain/page.txt", SITE, "GET", None, 403, "AccessForbidden",
     "CORSResponse: CORS is not enabled for this bucket."),
    ("/nosuch/page.txt", SITE, "GET", None, 403, "AccessForbidden",
     "CORSResponse: Bucket not found"),
])
def test_preflight_refused_with_s3s_error(c, target, origin, method, req_headers, status, code,
                                          msg) -> None:
    got, h, body = options(c, target, origin, method, req_headers)
    assert got == status
    e = error(body)
    assert (e["Code"], e["Message"]) == (code, msg)
    if status == 403:
        assert (e["Method"], e["ResourceType"]) == (method, "OBJECT")
    assert "access-control-allow-origin" not in h


def test_operator_endpoints_and_console_still_answer(gw, s3, c) -> None:
    status, _, _ = send(c, "GET", "/health/live", {"Host": f"127.0.0.1:{c.port}"})
    assert status == 200
    status, _, body = send(c, "GET", "/console/", {"Host": f"127.0.0.1:{c.port}"})
    assert status == 200 and b"<html" in body.lower()
    # an OPTIONS there is a preflight on a bucket of that name (none exists)
    status, _, body = options(c, "/metrics")
    assert (status, error(body)["Message"]) == (403, "CORSResponse: Bucket not found")
    assert options(c, "/web/page.txt")[0] == 200
    s3.get_bucket_cors(Bucket="web")  # PutBucketCors ran in the fixture
    status, _, body = send(c, "GET", "/metrics", {"Host": f"127.0.0.1:{c.port}"})
    text = body.decode()
    for op, code in (("PreflightRequest", "200"), ("PreflightRequest", "403"),
                     ("PutBucketCors", "200"), ("GetBucketCors", "200")):
        assert f'operation="{op}",status="{code}"' in text, op


# ---- headers on actual requests --------------------------------------------------------------


def test_get_with_a_matching_origin_carries_the_rules_headers(c) -> None:
    status, h, body = signed(c, "GET", "/web/page.txt", {"Origin": SITE})
    assert status == 200 and body == b"hello from web"
    assert acl_headers(h) == {
        "access-control-allow-origin": SITE,
        "access-control-allow-methods": "GET, PUT, HEAD",
        "access-control-expose-headers": "ETag, x-amz-request-id",
        "access-control-max-age": "600",
        "access-control-allow-credentials": "true",
        "vary": VARY,
    }
    # no Origin: no CORS headers at all; a bucket without configuration: none either
    assert acl_headers(signed(c, "GET", "/web/page.txt")[1]) == {}
    assert acl_headers(signed(c, "GET", "/plain/page.txt", {"Origin": SITE})[1]) == {}
    # an origin no rule allows for DELETE: none
    h = signed(c, "DELETE", "/web/nothing-here", {"Origin": "http://elsewhere.test"})[1]
    assert acl_headers(h) == {}


def test_errors_carry_the_headers_of_a_matching_origin_as_s3(c) -> None:
    status, h, body = signed(c, "GET", "/web/page.txt?uploadId=nosuch", {"Origin": SITE})
    assert (status, error(body)["Code"]) == (404, "NoSuchUpload")
    assert h["access-control-allow-origin"] == SITE
    # unsigned (anonymous) GET: refused, and the browser may still read why
    status, h, body = send(c, "GET", "/web/page.txt",
                           {"Host": f"127.0.0.1:{c.port}", "Origin": "http://elsewhere.test"})
    assert status == 403 and error(body)["Code"] == "AccessDenied"
    assert h["access-control-allow-origin"] == "*"


def test_presigned_get_with_origin(c) -> None:
    target = presign_v4(c, "GET", "/web/page.txt")
    status, h, body = send(c, "GET", target, {"Host": f"127.0.0.1:{c.port}",
                                              "Origin": "https://x.example.org"})
    assert status == 200 and body == b"hello from web"
    assert h["access-control-allow-origin"] == "https://x.example.org"


def test_a_change_is_seen_at_once_by_the_gateway_that_made_it(s3, c) -> None:
    s3.put_object(Bucket="plain", Key="k", Body=b"x")
    assert acl_headers(signed(c, "GET", "/plain/k", {"Origin": SITE})[1]) == {}
    s3.put_bucket_cors(Bucket="plain", CORSConfiguration={"CORSRules": RULES[1:]})
    assert signed(c, "GET", "/plain/k", {"Origin": SITE})[1][
        "access-control-allow-origin"] == "*"
    assert options(c, "/plain/k")[0] == 200
    s3.delete_bucket_cors(Bucket="plain")
    assert acl_headers(signed(c, "GET", "/plain/k", {"Origin": SITE})[1]) == {}
    assert options(c, "/plain/k")[0] == 403


def test_a_deleted_bucket_takes_its_cors_with_it(s3, c) -> None:
    s3.create_bucket(Bucket="gone")
    s3.put_bucket_cors(Bucket="gone", CORSConfiguration={"CORSRules": RULES})
    s3.delete_bucket(Bucket="gone")
    s3.create_bucket(Bucket="gone")
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket="gone")
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    s3.delete_bucket(Bucket="gone")


def test_a_configured_value_never_breaks_an_answer(s3, c) -> None:
    s3.create_bucket(Bucket="odd")
    s3.put_object(Bucket="odd", Key="k", Body=b"odd")
    odd = {"AllowedOrigins": ["*"], "AllowedMethods": ["GET"],
           "ExposeHeaders": ["ETag", "x\nSet-Cookie: stolen=1", "\u65e5\u672c"]}
    s3.put_bucket_cors(Bucket="odd", CORSConfiguration={"CORSRules": [odd]})
    assert s3.get_bucket_cors(Bucket="odd")["CORSRules"][0]["ExposeHeaders"] == \
        odd["ExposeHeaders"]  # kept as sent
    status, h, body = signed(c, "GET", "/odd/k", {"Origin": SITE})
    assert (status, body) == (200, b"odd")
    assert h["access-control-expose-headers"] == "ETag" and "set-cookie" not in h
    status, h, _ = options(c, "/odd/k")
    assert status == 200 and h["access-control-expose-headers"] == "ETag"


def test_virtual_host_preflight_and_curl(gw, c) -> None:
    status, h, _ = send(c, "OPTIONS", "/page.txt", {
        "Host": f"web.localhost:{c.port}", "Origin": SITE,
        "Access-Control-Request-Method": "GET"})
    assert status == 200 and h["access-control-allow-origin"] == SITE
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("no curl")
    out = subprocess.run(
        [curl, "-sS", "-i", "-X", "OPTIONS", "--noproxy", "*", "-H", f"Origin: {SITE}",
         "-H", "Access-Control-Request-Method: PUT", "-H",
         "Access-Control-Request-Headers: content-type,x-amz-meta-title",
         f"{gw.endpoint}/web/upload.bin"], capture_output=True, text=True, timeout=30)
    head = out.stdout.split("\r\n\r\n", 1)[0].lower()
    assert head.startswith("http/1.1 200"), out.stdout + out.stderr
    assert "access-control-allow-headers: content-type, x-amz-meta-title" in head
    assert f"access-control-allow-origin: {SITE}" in head


def test_aws_cli_put_get_delete_bucket_cors(gw, s3, tmp_path) -> None:
    aws = Path(sys.executable).with_name("aws")
    if not aws.exists():
        pytest.skip("no aws cli in the venv")
    cfg_file = tmp_path / "config"
    cfg_file.write_text("[default]\nregion = us-east-1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_CONFIG_FILE=str(cfg_file), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "c"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(aws), "--endpoint-url", gw.endpoint, "s3api", *args,
                               "--output", "json"], env=env, capture_output=True, text=True,
                              timeout=120)

    s3.create_bucket(Bucket="cli-cors")
    doc = tmp_path / "cors.json"
    doc.write_text(json.dumps({"CORSRules": RULES}))
    r = run("put-bucket-cors", "--bucket", "cli-cors", "--cors-configuration", f"file://{doc}")
    assert r.returncode == 0, r.stderr
    r = run("get-bucket-cors", "--bucket", "cli-cors")
    assert r.returncode == 0 and json.loads(r.stdout)["CORSRules"] == RULES, r.stderr
    doc.write_text(json.dumps({"CORSRules": [{"AllowedOrigins": ["*"],
                                              "AllowedMethods": ["TRACE"]}]}))
    r = run("put-bucket-cors", "--bucket", "cli-cors", "--cors-configuration", f"file://{doc}")
    assert r.returncode != 0 and "InvalidRequest" in r.stderr
    assert s3.get_bucket_cors(Bucket="cli-cors")["CORSRules"] == RULES
    assert run("delete-bucket-cors", "--bucket", "cli-cors").returncode == 0
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket="cli-cors")
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
