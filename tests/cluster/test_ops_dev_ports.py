"""Two `zonegate dev` clusters on neighbouring --ports start at the same time and both serve:
their node ports (P+101.. would overlap) are claimed against each other, recorded in each
config, and never shared; a third cluster asking for a port the first one uses fails at once
with one line naming the clash."""

from __future__ import annotations

import subprocess
import sys
import threading
import tomllib

import pytest

from tests.support.devcluster import DevCluster, cluster_port

pytestmark = pytest.mark.timeout(600)


def ports(cluster: DevCluster) -> set[int]:
    cfg = tomllib.loads(cluster.config_path.read_text())
    return {int(n["url"].rsplit(":", 1)[1]) for n in cfg["nodes"]} | {
        int(cfg["gateway"]["listen"].rsplit(":", 1)[1])}


def test_two_dev_clusters_on_nearby_ports_both_start(tmp_path):
    p = cluster_port()
    a = DevCluster(tmp_path / "a", nodes=10, zones=8, zone_size="16M", workers=1, port=p)
    b = DevCluster(tmp_path / "b", nodes=10, zones=8, zone_size="16M", workers=1, port=p + 1)
    errors: list[BaseException] = []
    started = [threading.Event(), threading.Event()]
    done = threading.Event()

    def start(c: DevCluster, ready: threading.Event) -> None:
        try:
            c.start(timeout=300)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        ready.set()
        # The launcher gets SIGTERM when the thread that started it ends (PR_SET_PDEATHSIG).
        done.wait()

    threads = [threading.Thread(target=start, args=(c, e)) for c, e in zip((a, b), started, strict=True)]
    try:
        for t in threads:
            t.start()
        for e in started:
            e.wait()
        assert not errors, errors
        assert len(ports(a)) == len(ports(b)) == 11
        assert not ports(a) & ports(b)
        # chosen apart from the start, not moved after a node lost a race for its port
        assert "was taken" not in a.output() + b.output()
        for c in (a, b):
            s3 = c.client()
            s3.create_bucket(Bucket="ports")
            s3.put_object(Bucket="ports", Key="k", Body=c.data.name.encode())
            assert s3.get_object(Bucket="ports", Key="k")["Body"].read() == c.data.name.encode()

        # a third cluster on a port the first one's node uses: one line, naming the clash
        taken = sorted(ports(a) - {p})[0]
        res = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "dev", "--data", str(tmp_path / "c"),
             "--port", str(taken), "--nodes", "10"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 1
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, res.stderr
        assert f"port {taken} is taken by node" in lines[0] and str(a.data) in lines[0]
    finally:
        for c in (a, b):
            c.stop()
        done.set()
        for t in threads:
            t.join()
