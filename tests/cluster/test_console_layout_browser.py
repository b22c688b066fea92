"""The console's Layout view in a real headless Chromium against a real gateway and nodes: after
logging in through the form, the Layout tab shows the layout version and note, every node id
with its state, a draining drive, the staged change and the mover's run, with no script
error; it reads at 1280×800 and at phone width without sideways scrolling (screenshots are
kept in the test's tmp dir).

Needs Debian's `chromium` (`.ci/run` installs it); skips without it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cdp import Browser, chromium_binary
from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY, Gateway

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(chromium_binary() is None,
                                 reason="needs Debian's chromium (apt-get install chromium)")]
ROWS = "[...document.querySelectorAll('#layout-nodes tbody tr')]"


def zg(g: Gateway, *args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "gateway.cli", "layout", *args, "--config",
                        str(g.config_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)


def test_layout_view_in_chromium(tmp_path):
    g = Gateway(tmp_path / "cluster", nodes=6, drives_per_node=2,
                gateway_options={"mover_interval_seconds": 1, "layout_poll_seconds": 1})
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="shape")
        for i in range(6):
            s3.put_object(Bucket="shape", Key=f"o{i}", Body=bytes([i]) * (256 << 10))
        drive = str(g.nodes.drive_paths(2)[1])
        zg(g, "drive", "drain", g.nodes.ids[2], drive)
        zg(g, "apply", "--note", "retire node02's second drive")
        zg(g, "node", "weight", g.nodes.ids[5], "2")  # staged, not applied

        with Browser(tmp_path / "chromium") as b:
            b.viewport(1280, 800)
            b.goto(g.endpoint + "/console/#layout")
            b.wait("document.readyState === 'complete' && !document.querySelector('#login').hidden")
            b.eval("document.querySelector('#access_key').focus()")
            b.type_text(ACCESS_KEY)
            b.key("Tab")
            b.type_text(SECRET_KEY)
            b.key("Enter")
            b.wait("!document.querySelector('#tabs').hidden")
            b.wait("!document.querySelector('#view-layout').hidden")  # the #layout hash
            assert b.eval("document.querySelector('#tab-layout').getAttribute('aria-selected')") \
                == "true"
            b.wait("(document.querySelector('#layout-version') || {}).textContent === 'v2'")
            b.wait(f"{ROWS}.length === {6 * 2}")
            # the mover finishes the drain; the drained drive's zones all empty
            b.wait("(document.querySelector('#moves-phase') || {}).textContent === 'done'",
                   timeout=60)
            b.wait(f"{ROWS}.some(tr => tr.innerText.includes('draining') && "
                   "tr.querySelector('td.ok'))", timeout=30)
            drained = b.eval(f"{ROWS}.map(tr => tr.innerText).find(t => t.includes('draining'))")
            zones = drained.split("\t")[-1]  # "empty of total", green once all are empty
            empty, total = zones.split(" of ")
            assert empty == total and int(total) > 0, drained
            ids = b.eval("[...document.querySelectorAll('#layout-nodes tbody th')]"
                         ".map(th => th.textContent)")
            assert ids == g.nodes.ids
            summary = b.eval("document.querySelector('#layout-summary').innerText")
            assert "retire node02's second drive" in summary and "4+2" in summary
            staged = b.eval("document.querySelector('#staged').innerText")
            assert "node weight" in staged and g.nodes.ids[5] in staged
            moves = b.eval("document.querySelector('#moves').innerText")
            assert "v2" in moves and "0 / 0" in moves  # failed / stuck
            b.screenshot(tmp_path / "layout-1280x800.png", full_page=True)

            b.viewport(390, 844, mobile=True, scale=2)
            b.wait("document.documentElement.scrollWidth <= 390")
            b.screenshot(tmp_path / "layout-390x844.png")
            assert b.exceptions() == []
    finally:
        g.stop()
