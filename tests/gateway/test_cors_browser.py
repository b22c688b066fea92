"""CORS in a real browser: a page served from another port (another origin) uses fetch() to
PUT and GET an object through presigned URLs of the gateway. Headless Chromium sends the
preflight itself and enforces the answer: the allowed origin uploads and reads the body and
the exposed ETag (not a header the rule does not expose); an origin no rule allows is blocked.

Needs Debian's `chromium`; skips without it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.cdp import Browser, chromium_binary
from tests.support.gwcluster import Gateway

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow,
              pytest.mark.skipif(chromium_binary() is None,
                                 reason="needs Debian's chromium (apt-get install chromium)")]


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"<!doctype html><title>viewer</title><p>dataset viewer</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def page_port():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("gw-cors-browser"))
    try:
        yield g.start()
    finally:
        g.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with Browser(tmp_path_factory.mktemp("chromium")) as b:
        yield b


FETCH = """(async () => {
  const out = {};
  try {
    const put = await fetch(%(put)s, {method: 'PUT', body: 'written by the browser',
                                      headers: {'Content-Type': 'application/octet-stream'}});
    out.put = put.status;
    out.putEtag = put.headers.get('etag');
    const get = await fetch(%(get)s);
    out.get = get.status;
    out.body = await get.text();
    out.etag = get.headers.get('etag');
    out.requestId = get.headers.get('x-amz-request-id');
  } catch (e) { out.error = String(e); }
  return out;
})()"""


def test_browser_fetch_cross_origin_through_presigned_urls(gw, browser, page_port) -> None:
    s3 = gw.client(signature_version="s3v4")  # SigV4 presigning signs the host only
    s3.create_bucket(Bucket="viewer")
    allowed = f"http://127.0.0.1:{page_port}"
    s3.put_bucket_cors(Bucket="viewer", CORSConfiguration={"CORSRules": [{
        "AllowedOrigins": [allowed], "AllowedMethods": ["GET", "PUT"],
        "AllowedHeaders": ["content-type"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 60}]})

    def urls(key: str) -> dict[str, str]:
        return {"put": json.dumps(s3.generate_presigned_url(
                    "put_object", Params={"Bucket": "viewer", "Key": key}, ExpiresIn=300)),
                "get": json.dumps(s3.generate_presigned_url(
                    "get_object", Params={"Bucket": "viewer", "Key": key}, ExpiresIn=300))}

    browser.goto(allowed + "/")
    browser.wait("document.readyState === 'complete' && location.port !== ''")
    got = browser.eval(FETCH % urls("from-page.txt"), await_promise=True)
    assert got.get("error") is None, got
    assert (got["put"], got["get"], got["body"]) == (200, 200, "written by the browser"), got
    etag = s3.head_object(Bucket="viewer", Key="from-page.txt")["ETag"]
    assert got["putEtag"] == etag and got["etag"] == etag  # exposed by the rule
    assert got["requestId"] is None  # sent, but not exposed: the browser hides it
    assert s3.get_object(Bucket="viewer", Key="from-page.txt")["Body"].read() == \
        b"written by the browser"

    # another origin (same page, other host name): the preflight is refused, fetch fails
    browser.goto(f"http://localhost:{page_port}/")
    browser.wait("document.readyState === 'complete' && location.hostname === 'localhost'")
    got = browser.eval(FETCH % urls("blocked.txt"), await_promise=True)
    assert "TypeError" in got.get("error", ""), got
    assert "put" not in got
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="viewer").get("Contents", [])]
    assert keys == ["from-page.txt"]  # the refused PUT never reached the bucket
