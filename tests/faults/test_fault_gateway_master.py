"""SIGKILL of the gateway's master process in a `zonegate dev` cluster: its uvicorn workers die
with it (none is left serving the port), the launcher starts a new master, again and again
with a backoff instead of giving the cluster up, the Prometheus multiprocess directories of
dead masters do not pile up in /tmp, and after a crash of the launcher and the master together
a new `zonegate dev` on the same data starts and serves what was stored."""

from __future__ import annotations

import os
import re
import signal
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.devcluster import DevCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def gateway_master(cluster: DevCluster) -> int | None:
    """The running `zonegate serve` master of the cluster (None while there is none)."""
    for pid in cluster.child_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and alive(pid) and children_of(pid):
            return pid
    return None


def metrics_dirs(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"zonegate-metrics-{pid}-*"))


def read_back(cluster: DevCluster, key: str, body: bytes) -> bool:
    try:
        s3 = cluster.client()
        return s3.get_object(Bucket="master", Key=key)["Body"].read() == body
    except Exception:
        return False


def test_sigkill_of_the_gateway_master(tmp_path):
    # Two kills in a row: the restart after the second already backs off (the backoff's
    # doubling and that it never gives up: tests/gateway/test_serve_supervision.py).
    _master_kills(tmp_path, 2)


@pytest.mark.soak
def test_five_sigkills_of_the_gateway_master_in_a_row(tmp_path):
    # As many kills in a row as made the launcher give up and stop the whole cluster (5
    # starts a minute).
    _master_kills(tmp_path, 5)


def _master_kills(tmp_path, rounds: int) -> None:
    cluster = DevCluster(tmp_path / "data", nodes=10, zones=8, zone_size="16M", workers=2)
    try:
        cluster.start()
        s3 = cluster.client()
        s3.create_bucket(Bucket="master")
        s3.put_object(Bucket="master", Key="k", Body=b"kept")
        killed = []
        # each master dies soon after it started
        for round_ in range(rounds):
            master = wait_until(lambda: gateway_master(cluster), 90, "a gateway master")
            assert master not in killed
            workers = wait_until(lambda m=master: children_of(m) if len(children_of(m)) >= 2
                                 else None, 60, "its two workers")
            assert metrics_dirs(master), "the master's metrics dir is named after it"
            os.kill(master, signal.SIGKILL)
            killed.append(master)
            # Its workers do not outlive it (they used to keep the port, re-parented to init).
            wait_until(lambda w=workers: not any(alive(p) for p in w), 30,
                       f"workers {workers} of the killed master gone")
            if round_ in (0, rounds - 1):  # a new master serves on the same port
                wait_until(lambda: read_back(cluster, "k", b"kept"), 90, "a new master serving")
        assert cluster.proc.poll() is None, cluster.output()[-3000:]
        out = cluster.output()
        assert out.count("gateway exited") >= rounds and "not restarting" not in out
        assert re.search(r"restarting it in \d", out), "later restarts back off"
        # The dead masters' metrics directories were removed by the masters after them.
        wait_until(lambda: not any(metrics_dirs(p) for p in killed), 30,
                   "metrics dirs of dead masters removed")
        s3 = cluster.client()
        s3.put_object(Bucket="master", Key="k2", Body=b"after the kills")

        # A crash of the launcher and the gateway master together: every child goes (the
        # nodes by their death signal, the workers with their master), and a new launcher on
        # the same data starts, on the same port, and serves what was stored.
        master = gateway_master(cluster)
        everything = cluster.child_pids()
        cluster.proc.kill()
        os.kill(master, signal.SIGKILL)
        cluster.proc.wait()
        cluster.proc = None
        cluster.start()  # at once: it waits for the old children to let go of the data
        assert not any(alive(p) for p in everything)
        assert read_back(cluster, "k2", b"after the kills")
        assert read_back(cluster, "k", b"kept")
    finally:
        cluster.stop()
