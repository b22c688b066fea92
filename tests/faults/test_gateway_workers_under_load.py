"""Gateway workers on a loaded machine (issue 24, D2): with ten busy-loop processes beside it
(each in its own session, as other users' work is, and each ending by itself), a `zonegate
serve` killed with SIGKILL starts again with all its workers, none killed before it served;
and a worker that gets no CPU for longer than uvicorn's 5 s health ping is left to start
rather than killed and replaced (which, under load, the replacement suffered too: 26-71 s
before a restarted gateway answered)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gwcluster import _NO_PROXY, Gateway, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

LOAD = 10
LOAD_SECONDS = 150  # each busy loop ends by itself after this, whatever happens to the test
BUSY = f"import time\nend = time.monotonic() + {LOAD_SECONDS}\nwhile time.monotonic() < end: pass"


@contextlib.contextmanager
def busy_load(n: int = LOAD) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True)
             for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def children_of(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.add(int(entry.name))
    return out


def log_since(g: Gateway, mark: int) -> str:
    return g.log_path.read_bytes()[mark:].decode(errors="replace")


def answers(g: Gateway) -> bool:
    try:
        with _NO_PROXY.open(g.endpoint + "/", timeout=5):
            return True
    except urllib.error.HTTPError:
        return True  # an S3 answer (403 for anonymous)
    except OSError:
        return False


@pytest.fixture
def gw(tmp_path):
    g = Gateway(tmp_path, workers=2)
    g.start()
    yield g
    g.stop()


def test_a_starved_worker_is_left_to_start_not_replaced(gw):
    master = gw.proc.pid
    assert wait_for(lambda: len(children_of(master)) == 2, timeout=60)
    with busy_load():
        mark = gw.log_path.stat().st_size
        victim = min(children_of(master))
        os.kill(victim, signal.SIGKILL)
        survivors = children_of(master) - {victim}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            fresh = children_of(master) - survivors - {victim}
            if fresh:
                break
            time.sleep(0.02)
        assert fresh, gw.log_tail()
        (starved,) = fresh
        # No CPU at all for 8 s: what a loaded machine gives a process now and then.
        os.kill(starved, signal.SIGSTOP)
        time.sleep(8)
        os.kill(starved, signal.SIGCONT)
        assert wait_for(lambda: log_since(gw, mark).count("Application startup complete") >= 1,
                        timeout=120), log_since(gw, mark)
        assert children_of(master) == survivors | {starved}, log_since(gw, mark)
        log = log_since(gw, mark)
        assert log.count("died") == 1, log  # the SIGKILLed worker only
    assert answers(gw)


def test_sigkilled_gateway_comes_back_with_every_worker_under_load(gw):
    with busy_load():
        for _ in range(2):
            os.killpg(gw.proc.pid, signal.SIGKILL)
            gw.proc.wait()
            mark = gw.log_path.stat().st_size
            t0 = time.monotonic()
            gw.start_gateway()  # returns once it answers (up to 60 s)
            took = time.monotonic() - t0
            assert wait_for(lambda m=mark: log_since(gw, m).count(
                "Application startup complete") >= 2, timeout=120), log_since(gw, mark)
            log = log_since(gw, mark)
            assert "died" not in log and log.count("Started server process") == 2, log
            print(f"gateway answering {took:.1f} s after its restart at load "
                  f"{os.getloadavg()[0]:.1f}")
        assert answers(gw)
