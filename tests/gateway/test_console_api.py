"""The web console's HTTP API against a real gateway (two workers) and real nodes: login with
S3 keys only, the session cookie is required and cannot be forged, login and logout refuse
cross-site requests, no secret shows up in any response or log, the dashboard and zone map
follow uploads, the bucket browser keeps to S3's ownership rule and its presigned URLs
download the object, a bucket named "console" still works for S3, and `console = false`
turns it off."""

from __future__ import annotations

import base64
import json
import time
import tomllib
import urllib.parse
import urllib.request

import pytest

from erasure.config import write_config
from tests.support.consolehttp import Http
from tests.support.gwcluster import ACCESS_KEY, OTHER_ACCESS, OTHER_SECRET, SECRET_KEY, Gateway

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))

pytestmark = pytest.mark.timeout(300)

API_GETS = ("session", "overview", "zones", "layout", "buckets", "objects?bucket=photos",
            "object?bucket=photos&key=a.txt", "presign?bucket=photos&key=a.txt")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("console"), workers=2)
    g.start()
    s3 = g.client()
    s3.create_bucket(Bucket="photos")
    s3.put_object(Bucket="photos", Key="a.txt", Body=b"hello console", ContentType="text/plain",
                  Metadata={"camera": "z9"})
    for i in range(3):
        s3.put_object(Bucket="photos", Key=f"2026/12/img{i}.raw", Body=bytes([i]) * 1000)
    g.client(OTHER_ACCESS, OTHER_SECRET).create_bucket(Bucket="bobs-bucket")
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture
def alice(gw):
    h = Http(gw.port)
    status, _, _ = h.login(ACCESS_KEY, SECRET_KEY)
    assert status == 200
    return h


def test_page_and_static_files_are_served_without_login(gw):
    h = Http(gw.port)
    status, hdrs, _ = h.request("GET", "/console")
    assert status == 308 and hdrs["location"] == "/console/"
    status, hdrs, body = h.request("GET", "/console/")
    assert status == 200 and hdrs["content-type"].startswith("text/html")
    assert b'id="login-form"' in body
    assert "frame-ancestors 'none'" in hdrs["content-security-policy"]
    assert hdrs["x-content-type-options"] == "nosniff"
    for name in ("console.js", "console.css"):
        status, _, body = h.request("GET", f"/console/static/{name}")
        assert status == 200 and len(body) > 1000
    status, _, _ = h.request("GET", "/console/static/..%2Fsession.py")
    assert status == 404
    status, _, _ = h.request("GET", "/console/nope")
    assert status == 404


def test_every_api_needs_the_session_cookie(gw):
    h = Http(gw.port)
    for path in API_GETS:
        status, doc = h.get_json(path)
        assert status == 401, path
        assert doc["error"] == "Unauthorized"


def test_a_forged_or_tampered_cookie_is_refused(gw, alice):
    value = alice.cookie.split("=", 1)[1]
    payload, mac = value.split(".")
    raw = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = dict(raw, ak=OTHER_ACCESS)  # be bob without bob's key
    forged_payload = base64.urlsafe_b64encode(
        json.dumps(forged, separators=(",", ":")).encode()).rstrip(b"=").decode()
    expired = dict(raw, exp=int(time.time()) - 10)
    expired_payload = base64.urlsafe_b64encode(
        json.dumps(expired, separators=(",", ":")).encode()).rstrip(b"=").decode()
    for bad in (f"{forged_payload}.{mac}", f"{expired_payload}.{mac}", value[:-2] + "AA",
                "garbage", ""):
        h = Http(gw.port)
        h.cookie = f"zonegate_console={bad}"
        status, _ = h.get_json("overview")
        assert status == 401, bad
    status, doc = alice.get_json("session")
    assert status == 200 and doc["user"] == "alice"


def test_login_is_refused_with_bad_keys(gw):
    h = Http(gw.port)
    for access, secret in ((ACCESS_KEY, SECRET_KEY + "x"), (ACCESS_KEY, ""),
                           ("NOSUCHACCESSKEY", SECRET_KEY), (ACCESS_KEY, OTHER_SECRET)):
        status, hdrs, body = h.login(access, secret)
        assert status == 401, (access, secret)
        assert "set-cookie" not in hdrs
        assert json.loads(body)["error"] == "InvalidCredentials"
    # the form without JavaScript: back to the page with a message, still no cookie
    status, hdrs, _ = h.login(ACCESS_KEY, "wrong", accept_json=False)
    assert status == 303 and hdrs["location"] == "/console/?login=failed"
    assert "set-cookie" not in hdrs


def test_login_sets_a_strict_httponly_cookie_and_works_on_every_worker(gw):
    h = Http(gw.port)
    status, hdrs, body = h.login(ACCESS_KEY, SECRET_KEY)
    assert status == 200
    cookie = hdrs["set-cookie"]
    assert cookie.startswith("zonegate_console=")
    for attr in ("HttpOnly", "SameSite=Strict", "Path=/console"):
        assert attr in cookie
    doc = json.loads(body)
    assert doc["user"] == "alice" and doc["csrf"]
    # two workers: new connections land on either; the session holds on both
    for _ in range(8):
        status, doc = h.get_json("session")
        assert status == 200 and doc["user"] == "alice"
    # without JavaScript the form redirects to the page with the cookie
    h2 = Http(gw.port)
    status, hdrs, _ = h2.login(ACCESS_KEY, SECRET_KEY, accept_json=False)
    assert status == 303 and hdrs["location"] == "/console/" and "set-cookie" in hdrs


def test_cross_site_login_and_logout_are_refused(gw):
    h = Http(gw.port)
    for origin in (None, "http://evil.example", "null", f"https://127.0.0.1:{gw.port + 1}"):
        status, hdrs, body = h.login(ACCESS_KEY, SECRET_KEY, origin=origin)
        assert status == 403, origin
        assert "set-cookie" not in hdrs
        assert json.loads(body)["error"] == "CrossOrigin"
    # a Referer of the page is enough when a browser sends no Origin
    body = urllib.parse.urlencode({"access_key": ACCESS_KEY, "secret_key": SECRET_KEY}).encode()
    status, _, _ = h.request("POST", "/console/api/login", body, {
        "Accept": "application/json", "Referer": h.origin + "/console/",
        "Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200

    h.login(ACCESS_KEY, SECRET_KEY)
    _, doc = h.get_json("session")
    csrf = doc["csrf"]
    for headers in ({"Origin": h.origin}, {"Origin": h.origin, "X-CSRF-Token": "wrong"},
                    {"Origin": "http://evil.example", "X-CSRF-Token": csrf},
                    {"X-CSRF-Token": csrf}):
        status, hdrs, _ = h.request("POST", "/console/api/logout", b"", headers)
        assert status == 403, headers
        assert "set-cookie" not in hdrs
    status, hdrs, _ = h.request("POST", "/console/api/logout", b"",
                                {"Origin": h.origin, "X-CSRF-Token": csrf})
    assert status == 200
    assert "Max-Age=0" in hdrs["set-cookie"]
    # GET of a state-changing endpoint does nothing
    status, _, _ = h.request("GET", "/console/api/logout")
    assert status == 405


def test_overview_shows_health_nodes_capacity_and_requests(gw, alice):
    status, doc = alice.get_json("overview")
    assert status == 200
    h = doc["health"]
    assert h["ok"] and h["nodes"] == 6 and h["nodes_up"] == 6 and h["nodes_down"] == []
    assert h["k"] == 4 and h["m"] == 2
    assert len(doc["nodes"]) == 6 and all(n["up"] and len(n["drives"]) == 1 for n in doc["nodes"])
    cap = doc["capacity"]
    assert cap["live"] > 0 and cap["writable"] > 0 and cap["records"] > 0
    assert cap["source"] == "node" and cap["stranded"] is not None and cap["garbage"] >= 0
    assert doc["repair"]["parts_awaiting_repair"] == 0
    ops = doc["requests"]["operations"]
    assert ops["PutObject"]["total"] >= 4 and ops["CreateBucket"]["total"] >= 2
    # the console's own requests are not counted as S3 requests
    assert not any(op.startswith("/console") for op in ops)


def test_capacity_adds_up_and_writable_agrees_between_overview_and_zone_map(gw, alice):
    """One computation of a drive's writable space (the node's, which holds empty zones back
    as a reserve) on both pages; the capacity card's total is what the parts add up to."""
    for _ in range(5):  # both pages at one moment: a background write may come between
        _, ov = alice.get_json("overview")
        _, zm = alice.get_json("zones")
        over = {(n["id"], d["drive"]): d["capacity"]["writable"]
                for n in ov["nodes"] for d in n["drives"]}
        zone = {(n["id"], d["drive"]): d["capacity"]["writable"]
                for n in zm["nodes"] for d in n["drives"]}
        if over == zone:
            break
        time.sleep(1.2)
    assert over == zone and len(over) == 6
    # the room of the writable-looking zones is more: the reserve is not writable by puts
    for n in zm["nodes"]:
        for d in n["drives"]:
            room = sum(z["capacity"] - z["written"] for z in d["zones"]
                       if z["cond"] in ("empty", "open", "closed"))
            assert room > d["capacity"]["writable"]
    cap = ov["capacity"]
    assert cap["reserve"] > 0
    assert cap["total"] == (cap["live"] + cap["garbage"] + cap["stranded"] + cap["writable"]
                            + cap["reserve"])
    assert 0 < cap["used"] <= cap["total"]


def _written(doc: dict) -> int:
    return sum(z["written"] for n in doc["nodes"] for d in n["drives"] for z in d["zones"])


def test_zone_map_has_a_cell_per_zone_and_follows_uploads(gw, alice):
    status, doc = alice.get_json("zones")
    assert status == 200
    assert len(doc["nodes"]) == 6
    for n in doc["nodes"]:
        assert n["up"] and n["source"] == "zones"  # the nodes have /v1/zones
        (d,) = n["drives"]
        assert len(d["zones"]) == 32  # tests/support/nodeproc.py TEST_GEOMETRY
        for z in d["zones"]:
            assert z["cond"] in ("empty", "open", "closed", "full", "conventional", "offline")
            assert 0 <= z["garbage"] <= z["written"] <= z["capacity"]
    before = _written(doc)
    gw.client().put_object(Bucket="photos", Key="big.bin", Body=b"z" * (3 << 20))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(1.2)  # the console caches node answers for a second
        _, doc = alice.get_json("zones")
        if _written(doc) > before:
            break
    assert _written(doc) > before


def test_the_fallback_map_from_a_real_nodes_stats_matches_its_zones(gw):
    """A node without /v1/zones gets a map from /v1/stats: as many cells, same conventional
    and full zones, as the node's own zone map."""
    from gateway.console.data import _drive_from_stats

    docs = {}
    for path in ("/v1/stats", "/v1/zones"):
        req = urllib.request.Request(gw.nodes.urls[0] + path,
                                     headers=gw.nodes.headers(0, "GET", path, {}, b""))
        with _NO_PROXY.open(req, timeout=10) as resp:
            docs[path] = json.load(resp)
    (stats_drive,) = docs["/v1/stats"]["drives"]
    (zones_drive,) = docs["/v1/zones"]["drives"]
    approx = _drive_from_stats(stats_drive)["zones"]
    assert len(approx) == len(zones_drive["zones"])
    for cond in ("conventional", "full"):
        assert sum(z["cond"] == cond for z in approx) == \
            sum(z["cond"] == cond for z in zones_drive["zones"])


def test_bucket_browser_lists_the_users_buckets_and_objects(gw, alice):
    _, doc = alice.get_json("buckets")
    assert [b["name"] for b in doc["buckets"]] == ["photos"]  # not bob's
    _, doc = alice.get_json("objects?bucket=photos&delimiter=/")
    assert "a.txt" in [o["key"] for o in doc["objects"]]
    assert doc["prefixes"] == ["2026/"]
    _, doc = alice.get_json("objects?bucket=photos&prefix=2026/12/&delimiter=/")
    assert [o["key"] for o in doc["objects"]] == [f"2026/12/img{i}.raw" for i in range(3)]
    assert all(o["size"] == 1000 for o in doc["objects"])
    _, o = alice.get_json("object?bucket=photos&key=a.txt")
    assert o["size"] == 13 and o["user_meta"] == {"camera": "z9"}
    assert o["headers"].get("Content-Type") == "text/plain"
    assert len(o["parts"]) == 1 and o["parts"][0]["scheme"] == "4+2"
    assert len(o["parts"][0]["nodes"]) == 6
    status, doc = alice.get_json("objects?bucket=bobs-bucket")
    assert status == 403 and doc["error"] == "AccessDenied"
    status, doc = alice.get_json("object?bucket=photos&key=missing")
    assert status == 404 and doc["error"] == "NoSuchKey"
    status, doc = alice.get_json("objects?bucket=nosuchbucket")
    assert status == 404


def test_presigned_download_gets_the_object_and_cannot_be_altered(gw, alice):
    status, doc = alice.get_json("presign?bucket=photos&key=a.txt")
    assert status == 200 and doc["expires_in"] == 300
    url = urllib.parse.urlsplit(doc["url"])
    assert url.netloc == f"127.0.0.1:{gw.port}" and url.path == "/photos/a.txt"
    h = Http(gw.port)
    status, hdrs, body = h.request("GET", f"{url.path}?{url.query}", cookie=False)
    assert status == 200 and body == b"hello console"
    assert hdrs["content-disposition"].startswith("attachment")
    # another key with the same signature is refused by S3
    status, _, body = h.request("GET", f"/photos/2026/12/img0.raw?{url.query}", cookie=False)
    assert status == 403 and b"SignatureDoesNotMatch" in body
    status, _ = alice.get_json("presign?bucket=bobs-bucket&key=x")
    assert status == 403


def test_no_secret_in_any_response_or_log(gw):
    h = Http(gw.port)
    h.login(ACCESS_KEY, SECRET_KEY + "-wrong")
    h.login(ACCESS_KEY, SECRET_KEY)
    for path in API_GETS:
        status, _ = h.get_json(path)
        assert status == 200, path
    h.request("GET", "/console/")
    secrets = [SECRET_KEY, SECRET_KEY + "-wrong", gw.nodes.secret,
               urllib.parse.quote(SECRET_KEY, safe=""), OTHER_SECRET]
    everything = b"\n".join(h.seen)
    for s in secrets:
        assert s.encode() not in everything
    log = gw.log_path.read_bytes()
    for s in secrets:
        assert s.encode() not in log
    assert b"console login refused" in log  # the log was written, without the secret


def test_a_bucket_named_console_still_works_for_s3(gw):
    s3 = gw.client()
    s3.create_bucket(Bucket="console")
    s3.put_object(Bucket="console", Key="api/overview", Body=b"not the console")
    s3.put_object(Bucket="console", Key="static/console.js", Body=b"mine")
    assert s3.get_object(Bucket="console", Key="api/overview")["Body"].read() == \
        b"not the console"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="console")["Contents"]]
    assert keys == ["api/overview", "static/console.js"]
    s3.head_bucket(Bucket="console")
    # unsigned, the same paths are the console
    h = Http(gw.port)
    status, _ = h.get_json("overview")
    assert status == 401
    status, _, body = h.request("GET", "/console/static/console.js")
    assert status == 200 and body != b"mine"
    for key in ("api/overview", "static/console.js"):
        s3.delete_object(Bucket="console", Key=key)
    s3.delete_bucket(Bucket="console")


def test_a_dead_node_shows_as_down_in_the_overview_and_the_zone_map(gw, alice):
    victim = gw.nodes.ids[2]
    gw.nodes.kill(2)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, doc = alice.get_json("overview")
            if doc["health"]["nodes_down"] == [victim]:
                break
            time.sleep(0.5)
        assert doc["health"]["nodes_down"] == [victim]
        assert doc["health"]["write_quorum"]  # 5 of 6 up, 5 needed
        node = next(n for n in doc["nodes"] if n["id"] == victim)
        assert not node["up"] and node["error"] and node["drives"] == []
        time.sleep(1.2)
        _, zones = alice.get_json("zones")
        node = next(n for n in zones["nodes"] if n["id"] == victim)
        assert not node["up"] and node["error"] and node["drives"] == []
        assert all(n["drives"] for n in zones["nodes"] if n["id"] != victim)
    finally:
        gw.nodes.restart(2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, doc = alice.get_json("overview")
        if not doc["health"]["nodes_down"]:
            break
        time.sleep(0.5)
    assert doc["health"]["nodes_down"] == []


def test_console_false_turns_it_off(gw):
    """Last in the module: restarts the gateway without the console, then with it again."""
    raw = tomllib.loads(gw.config_path.read_text())
    try:
        raw["gateway"]["console"] = False
        write_config(gw.config_path, raw)
        gw.stop_gateway()
        gw.start_gateway()
        h = Http(gw.port)
        status, hdrs, body = h.request("GET", "/console/")
        # plain S3: an anonymous GET of the bucket "console", which does not exist
        assert status == 404 and b"<Code>NoSuchBucket</Code>" in body
        status, _, body = h.login(ACCESS_KEY, SECRET_KEY)
        # an unsigned POST to an object is S3's browser form upload, which is not served
        assert status == 405 and "set-cookie" not in _
    finally:
        raw["gateway"].pop("console", None)
        write_config(gw.config_path, raw)
        gw.stop_gateway()
        gw.start_gateway()
    status, _, _ = Http(gw.port).request("GET", "/console/")
    assert status == 200
