"""The gateway's metrics add up across worker processes (prometheus_client multiprocess mode,
real processes), forget the in-flight requests of dead workers, keep their counters, and
mirror the erasure layer's event counters."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.server.metrics import ErasureStats, GatewayMetrics, multiprocess_active

pytestmark = pytest.mark.timeout(120)

WORKER = textwrap.dedent("""
    import sys, time
    from gateway.server.metrics import get_metrics, multiprocess_active
    assert multiprocess_active()
    m = get_metrics()
    n, flying, linger = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "linger"
    for _ in range(n):
        m.requests.labels("PutObject", "200").inc()
        m.received.labels("PutObject").inc(1000)
        m.duration.labels("PutObject").observe(0.01)
    for _ in range(flying):
        m.in_flight.inc()
    m.erasure_event("degraded_reads", 1)
    print("ready", flush=True)
    if linger:
        time.sleep(120)
""")
RENDER = "import sys; from gateway.server.metrics import get_metrics; " \
         "sys.stdout.write(get_metrics().render().decode())"


def run(code: str, mp_dir: Path, *args: str, linger: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(mp_dir)}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def scrape(mp_dir: Path) -> dict[str, float]:
    p = run(RENDER, mp_dir)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    values: dict[str, float] = {}
    for fam in text_string_to_metric_families(out):
        for s in fam.samples:
            values[s.name] = values.get(s.name, 0.0) + s.value
    return values


def test_metrics_of_several_workers_add_up_and_dead_workers_leave_no_in_flight(tmp_path):
    mp = tmp_path / "mp"
    mp.mkdir()
    done = run(WORKER, mp, "3", "5", "exit")  # exits with 5 "in flight": a worker that died
    assert done.communicate(timeout=60)[0].strip() == "ready"
    alive = run(WORKER, mp, "4", "2", "linger", linger=True)
    try:
        assert alive.stdout.readline().strip() == "ready"
        v = scrape(mp)
        assert v["zonegate_gateway_requests_total"] == 7
        assert v["zonegate_gateway_received_bytes_total"] == 7000
        assert v["zonegate_gateway_request_duration_seconds_count"] == 7
        assert v["zonegate_gateway_degraded_reads_total"] == 2
        assert v["zonegate_gateway_requests_in_flight"] == 2  # only the live worker's
    finally:
        alive.send_signal(signal.SIGKILL)
        alive.wait()
    v = scrape(mp)
    assert v["zonegate_gateway_requests_total"] == 7  # counters never go back
    assert v["zonegate_gateway_requests_in_flight"] == 0


def test_prepare_multiprocess_starts_from_empty(tmp_path):
    mp = tmp_path / "mp"
    mp.mkdir()
    first = run(WORKER, mp, "2", "0", "exit")
    first.communicate(timeout=60)
    assert list(mp.glob("*.db"))
    code = ("from gateway.server.metrics import prepare_multiprocess; import os, sys; "
            "p = prepare_multiprocess(sys.argv[1]); "
            "print(os.environ['PROMETHEUS_MULTIPROC_DIR'] == str(p))")
    p = subprocess.run([sys.executable, "-c", code, str(mp)], capture_output=True, text=True,
                       timeout=60)
    assert p.stdout.strip() == "True", p.stderr
    assert not list(mp.glob("*.db"))  # a restart must not count the last run's requests again
    assert scrape(mp).get("zonegate_gateway_requests_total", 0) == 0


def test_erasure_stats_feed_prometheus_and_stay_a_counter(tmp_path):
    assert not multiprocess_active()  # this test process: one registry
    m = GatewayMetrics()
    stats = ErasureStats(m, {"parts_written": 5}.items())
    assert stats["parts_written"] == 5
    stats["degraded_reads"] += 1
    stats["degraded_reads"] += 2
    stats["encode_seconds"] += 0.25
    stats["encode_bytes"] += 4096
    stats["something_new"] += 1  # not a metric: counted in the Counter only
    assert stats["degraded_reads"] == 3 and stats["something_new"] == 1
    v = {s.name + str(sorted(s.labels.items())): s.value
         for fam in text_string_to_metric_families(m.render().decode()) for s in fam.samples}
    assert v["zonegate_gateway_degraded_reads_total[]"] == 3
    assert v["zonegate_gateway_erasure_seconds_total[('operation', 'encode')]"] == 0.25
    assert v["zonegate_gateway_erasure_bytes_total[('operation', 'encode')]"] == 4096
    assert v["zonegate_gateway_parts_written_total[]"] == 0  # earlier counts were not ours
    (tmp_path / "repair").mkdir()
    for i in range(3):
        (tmp_path / "repair" / f"part{i}.p1.json").write_text("{}")
    (tmp_path / "repair" / ".part9.p1.json.123.tmp").write_text("{}")
    from erasure.repairqueue import RepairQueue
    m.watch_repair_queue(RepairQueue(tmp_path))
    asyncio.run(m.refresh_repair_backlog())  # what the /metrics endpoint does first
    fams = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    assert fams["zonegate_gateway_parts_awaiting_repair"].samples[0].value == 3
