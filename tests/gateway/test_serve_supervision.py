"""Small pieces of the gateway's supervision and limits, without processes: the `[gateway]`
limit keys, the restart backoff of `zonegate dev`, and which metrics directories count as
stale."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gateway.cli.devchild import RESTART_DELAY_MAX_S, STABLE_S, Child
from gateway.server.httplimits import HttpLimits
from gateway.server.serve import remove_stale_metrics_dirs


def test_limits_come_from_the_gateway_table_and_bad_values_are_refused():
    assert HttpLimits.from_gateway(None) == HttpLimits()
    lim = HttpLimits.from_gateway({"max_header_bytes": 16384, "body_timeout_seconds": 5,
                                   "listen": "127.0.0.1:9000"})
    assert lim.max_header_bytes == 16384 and lim.body_timeout_seconds == 5.0
    assert isinstance(lim.body_timeout_seconds, float)
    for key, bad in [("max_header_bytes", 0), ("max_header_count", 2.5),
                     ("header_timeout_seconds", -1), ("max_connections", True),
                     ("send_timeout_seconds", "60")]:
        with pytest.raises(ValueError, match=f"gateway.{key}"):
            HttpLimits.from_gateway({key: bad})


def test_restart_backoff_doubles_and_resets_after_a_stable_run(tmp_path):
    c = Child("gateway", ["true"], tmp_path / "log")
    now = 1000.0
    delays = []
    for _ in range(10):
        c.starts.append(now)
        now += 1  # died a second after its start
        delays.append(c.restart_delay(now))
    assert delays[:4] == [0.0, 0.5, 1.0, 2.0]
    assert delays == sorted(delays) and delays[-1] == RESTART_DELAY_MAX_S
    c.starts.append(now)
    assert c.restart_delay(now + STABLE_S) == 0.0  # ran long enough: at once again


def test_stale_metrics_dirs_are_those_of_dead_processes_only(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    gone = int(dead.stdout)
    mine = os.getpid()
    dead_master = tmp_path / f"zonegate-metrics-{gone}-abc"
    live_master = tmp_path / f"zonegate-metrics-{mine}-def"
    old_dead = tmp_path / "zonegate-metrics-x1y2z3"  # the older naming: files name the pids
    old_live = tmp_path / "zonegate-metrics-q9w8e7"
    empty_old = tmp_path / "zonegate-metrics-empty0"
    for d in (dead_master, live_master, old_dead, old_live, empty_old):
        d.mkdir()
    (dead_master / f"counter_{mine}.db").write_bytes(b"")  # a live worker keeps it
    (old_dead / f"counter_{gone}.db").write_bytes(b"")
    (old_live / f"counter_{gone}.db").write_bytes(b"")
    (old_live / f"gauge_livesum_{mine}.db").write_bytes(b"")
    other = tmp_path / "unrelated"
    other.mkdir()
    assert remove_stale_metrics_dirs(tmp_path) == [old_dead]
    (dead_master / f"counter_{mine}.db").unlink()
    assert remove_stale_metrics_dirs(tmp_path) == [dead_master]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live_master.name, old_live.name, empty_old.name, "unrelated"])
