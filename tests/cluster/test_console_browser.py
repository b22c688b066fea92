"""The web console in a real headless Chromium against `zonegate dev`: log in through the form
with the keyboard, see health and nodes, watch the zone map change after uploads and deletes
made with boto3, move through zones with the arrow keys, browse a bucket and download through
the presigned link, read well at 1280×800 and 390×844 (screenshots are kept in the test's
tmp dir), log out. Hidden elements are not displayed (no tabs or "Log out" on the login
page), every S3 operation has its name in the operations table, the capacity card reads
used / total (percent), and each drive's writable figure is the same on both pages.

Needs Debian's `chromium` (`.ci/run` installs it); skips without it."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.support.cdp import Browser, chromium_binary
from tests.support.devcluster import ACCESS_KEY, SECRET_KEY, start_cluster

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow,
              pytest.mark.skipif(chromium_binary() is None,
                                 reason="needs Debian's chromium (apt-get install chromium)")]
MiB = 1 << 20
NODES = 10  # the fewest the default 8+2 takes: a quicker start than dev's 12
DRIVES = NODES * 2
ZONES = 24
SHARDS = 10

CELLS = "[...document.querySelectorAll('#zonemap .cell')]"
# whether the tab bar, the user box with "Log out" and the login form take up space on screen
SHOWN = ("(() => { const on = (s) => getComputedStyle(document.querySelector(s)).display "
         "!== 'none'; return {tabs: on('#tabs'), who: on('#who'), login: on('#login')}; })()")
WRITTEN = f"{CELLS}.reduce((s, c) => s + Number(c.dataset.written || 0), 0)"
GARBAGE = f"{CELLS}.reduce((s, c) => s + Number(c.dataset.garbage || 0), 0)"


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    yield from start_cluster(tmp_path_factory, "console-dev", zones=ZONES, zone_size="16M",
                             nodes=NODES)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with Browser(tmp_path_factory.mktemp("chromium")) as b:
        b.call("Page.setDownloadBehavior", behavior="deny")
        yield b


def _focused(b: Browser) -> dict:
    return b.eval("(() => { const e = document.activeElement; return {id: e.id, "
                  "tag: e.tagName, label: e.getAttribute('aria-label'), "
                  "index: e.dataset ? e.dataset.index : null}; })()")


def _cells_summary(b: Browser) -> dict:
    return b.eval(f"(() => {{ const cs = {CELLS}; const by = {{}}; "
                  "for (const c of cs) by[c.dataset.cond] = (by[c.dataset.cond] || 0) + 1; "
                  f"return {{n: cs.length, by, written: {WRITTEN}, garbage: {GARBAGE}}}; }})()")


def test_console_in_chromium(dev, browser, tmp_path):
    b = browser
    s3 = dev.client()
    s3.create_bucket(Bucket="datasets")
    s3.put_object(Bucket="datasets", Key="readme.txt", Body=b"tokenized shards live here\n")

    # every operation has its name in the console's table (none counted as Unknown)
    s3.put_bucket_tagging(Bucket="datasets", Tagging={"TagSet": [{"Key": "team", "Value": "ml"}]})
    s3.get_bucket_acl(Bucket="datasets")
    s3.get_public_access_block(Bucket="datasets")
    s3.put_bucket_ownership_controls(Bucket="datasets", OwnershipControls={
        "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})

    b.viewport(1280, 800)
    b.goto(dev.endpoint + "/console/")
    b.wait("document.readyState === 'complete' && !document.querySelector('#login').hidden")
    # the login page shows no tabs and no "Log out" (`hidden` beats the flex display)
    assert b.eval(SHOWN) == {"tabs": False, "who": False, "login": True}
    b.screenshot(tmp_path / "login-1280x800.png")

    # a wrong secret is refused in the page
    b.eval("document.querySelector('#access_key').focus()")
    b.type_text(ACCESS_KEY)
    b.key("Tab")
    assert _focused(b)["id"] == "secret_key"
    b.type_text("not-the-secret")
    b.key("Enter")
    b.wait("document.querySelector('#login-error').textContent.includes('wrong')")
    assert b.eval("document.cookie") == ""  # HttpOnly, and none was set anyway

    # log in through the form, by keyboard
    b.eval("document.querySelector('#secret_key').value = ''; "
           "document.querySelector('#secret_key').focus()")
    b.type_text(SECRET_KEY)
    b.key("Enter")
    b.wait("!document.querySelector('#tabs').hidden")
    assert b.eval("document.querySelector('#who-name').textContent") == "root"
    assert b.eval("document.cookie") == ""  # the session cookie is HttpOnly
    b.wait("document.querySelector('#health').textContent.includes('Healthy')")
    b.wait(f"document.querySelectorAll('#nodes tbody tr').length === {DRIVES}")
    text = b.eval("document.querySelector('#view-overview').innerText")
    assert f"{NODES} of {NODES}" in text and "8+2" in text
    b.wait("document.querySelector('#ops').innerText.includes('PutObject')")
    assert b.eval(SHOWN) == {"tabs": True, "who": True, "login": False}
    ops = b.eval("[...document.querySelectorAll('#ops tbody th')].map(th => th.textContent)")
    for op in ("PutBucketTagging", "GetBucketAcl", "GetPublicAccessBlock",
               "PutBucketOwnershipControls"):
        assert op in ops, ops
    assert "Unknown" not in ops
    # the capacity card: used / total (percent), the bar drawn against the total
    used = b.eval("document.querySelector('#capacity-used').textContent")
    assert re.fullmatch(r"[\d.]+ [KMGT]?i?B / [\d.]+ [KMGT]iB used \(\d+\.\d%\)", used), used
    # each drive's writable figure, to compare with the zone map's
    writable = b.eval("[...document.querySelectorAll('#nodes tbody tr')].map(tr => "
                      "tr.querySelectorAll('td.num')[2].textContent)")
    b.screenshot(tmp_path / "overview-1280x800.png")

    # the zone map, reached with the keyboard from the tab bar
    b.eval("document.querySelector('#tab-overview').focus()")
    b.key("ArrowRight")
    assert _focused(b)["id"] == "tab-zones"
    b.wait(f"{CELLS}.length === {DRIVES * ZONES}")
    before = _cells_summary(b)
    sums = b.eval("[...document.querySelectorAll('#zonemap .drive .sum')].map(e => e.textContent)")
    assert [re.search(r"writable ([^·]+?)( ·|$)", t).group(1) for t in sums] == writable
    assert set(before["by"]) <= {"empty", "open", "closed", "full", "conventional", "offline"}
    assert before["by"].get("conventional") == DRIVES * 2  # each emulated drive has 2

    # uploads fill zones: the map follows within a few polls
    # (10 x 16 MiB at 8+2: 20 MiB per node, one stream, so a full 16 MiB zone on each node)
    for i in range(SHARDS):
        s3.put_object(Bucket="datasets", Key=f"shards/{i:03d}.bin", Body=bytes([i]) * (16 * MiB))
    b.wait(f"{WRITTEN} >= {before['written']} + {SHARDS * 16 * 1.25} * {MiB}", timeout=30)
    after_put = _cells_summary(b)
    assert after_put["by"].get("full", 0) > before["by"].get("full", 0)
    assert after_put["by"].get("empty", 0) < before["by"].get("empty", 0)
    b.screenshot(tmp_path / "zones-1280x800.png")

    # deletes turn written bytes into garbage (shaded), until reclaim resets the zones
    for i in range(SHARDS):
        s3.delete_object(Bucket="datasets", Key=f"shards/{i:03d}.bin")
    b.wait(f"{GARBAGE} > {after_put['garbage']} + 50 * {MiB} || {WRITTEN} < {after_put['written']}",
           timeout=60)
    b.wait("document.querySelectorAll('#zonemap .cell .garbage').length > 0")

    # zones are keyboard-navigable: Tab into a grid, arrows move, the detail line follows
    b.eval("document.querySelector('#zonemap [role=grid] .cell[tabindex=\"0\"]').focus()")
    first = _focused(b)
    assert first["label"] and "zone" in first["label"]
    b.key("ArrowRight")
    second = _focused(b)
    assert int(second["index"]) == int(first["index"]) + 1
    assert b.eval("document.querySelector('#zone-detail').textContent") == second["label"]
    b.key("End")
    assert int(_focused(b)["index"]) == ZONES - 1
    assert b.eval("document.querySelectorAll('.legend .cell').length") >= 8

    # phone width: nothing sticks out sideways, the map wraps
    b.viewport(390, 844, mobile=True, scale=2)
    time.sleep(0.5)
    assert b.eval("document.documentElement.scrollWidth") <= 390
    b.screenshot(tmp_path / "zones-390x844.png")
    b.eval("document.querySelector('#tab-overview').click()")
    b.wait("document.querySelector('#health').textContent.includes('Healthy')")
    assert b.eval("document.documentElement.scrollWidth") <= 390
    b.screenshot(tmp_path / "overview-390x844.png")
    b.viewport(1280, 800)

    # bucket browser: bucket, object details, the presigned download works
    b.click("#tab-buckets")
    b.wait("[...document.querySelectorAll('#bucket-list button')]"
           ".some(x => x.textContent === 'datasets')")
    b.click("#bucket-list button")
    b.wait("document.querySelector('#objects').innerText.includes('readme.txt')")
    b.eval("[...document.querySelectorAll('#objects button')]"
           ".find(x => x.textContent === 'readme.txt').click()")
    b.wait("document.querySelector('#object').innerText.includes('27 bytes')")
    assert "8+2" in b.eval("document.querySelector('#object').innerText")
    b.key("Enter")  # the Download button has the focus
    href = b.wait("document.querySelector('#download-link') && "
                  "document.querySelector('#download-link').href")
    assert "X-Amz-Signature=" in href and SECRET_KEY not in href
    body = b.eval(f"fetch({json.dumps(href)}).then(r => r.text())", await_promise=True)
    assert body == "tokenized shards live here\n"
    b.screenshot(tmp_path / "buckets-1280x800.png")

    # log out: back to the form, the API is closed
    b.click("#logout")
    b.wait("!document.querySelector('#login').hidden")
    assert b.eval(SHOWN) == {"tabs": False, "who": False, "login": True}
    status = b.eval("fetch('/console/api/overview').then(r => r.status)", await_promise=True)
    assert status == 401

    # the cell format, on a map drawn from a made-up answer (polling stopped with the logout)
    b.eval("document.querySelector('#view-zones').hidden = false")
    b.eval("renderZones({nodes: [{id: 'nodeX', up: true, source: 'zones', error: null, drives: [{"
           "drive: 0, capacity: {}, zones: ["
           "{index: 0, cond: 'full', capacity: 100, written: 100, live: 25, garbage: 75, reclaiming: true},"
           "{index: 1, cond: 'open', capacity: 100, written: 40, live: 40, garbage: 0, reclaiming: false},"
           "{index: 2, cond: 'offline', capacity: 100, written: 0, live: 0, garbage: 0, reclaiming: false}"
           "]}]}]})")
    cells = b.eval("[...document.querySelectorAll('#zd-nodeX-0 .cell')].map(c => ({cls: c.className, "
                   "label: c.getAttribute('aria-label'), fill: c.firstChild.style.height, "
                   "garbage: c.firstChild.firstChild.style.height}))")
    assert cells[0] == {"cls": "cell full reclaiming", "fill": "100%", "garbage": "75%",
                        "label": "nodeX drive 0 zone 0: full, 100% written, 25 B live, 75 B "
                                 "garbage, being reclaimed"}
    assert cells[1]["cls"] == "cell open" and cells[1]["fill"] == "40%"
    assert cells[1]["garbage"] == "0%"
    assert cells[2]["cls"] == "cell offline" and "offline" in cells[2]["label"]

    assert b.exceptions() == []
    # the screenshots stay in tmp_path; CI may ask for a copy where it collects artefacts
    keep = os.environ.get("ZONEGATE_TEST_ARTEFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for png in tmp_path.glob("*.png"):
            shutil.copy(png, Path(keep) / png.name)
