"""A real Prometheus (Debian's `prometheus`) scrapes a `zonegate dev` cluster with the project's
scrape configuration (deploy/prometheus.yml, its targets pointed at the cluster): the gateway
(every worker merged into one /metrics) and every node are up, and after some S3 traffic every
PromQL expression of the Grafana dashboard parses and returns series. `zonegate dev
--prometheus` starts one itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from botocore.exceptions import ClientError

from gateway.cli import promdev
from tests.support.devcluster import DevCluster, free_port

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="no `prometheus` binary (Debian package prometheus)")]

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "zonegate.json"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def api(base: str, path: str, **params: str) -> dict:
    url = f"{base}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with _NO_PROXY.open(url, timeout=30) as resp:
        return json.load(resp)


def wait_for(what: str, check, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def all_up(base: str, expected: int) -> list[dict] | None:
    try:
        targets = api(base, "targets")["data"]["activeTargets"]
    except OSError:
        return None
    up = [t for t in targets if t["health"] == "up"]
    return targets if len(up) == expected == len(targets) else None


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    # ten nodes, the fewest the default 8+2 takes
    cluster = DevCluster(tmp_path_factory.mktemp("prom") / "data", tls=True, zones=16,
                         zone_size="16M", nodes=10)
    try:
        yield cluster.start(extra=("--prometheus", "--prometheus-interval", "1s"))
    finally:
        cluster.stop()


def test_the_builtin_scrape_configuration_is_deploys():
    deploy = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    strip = [{k: v for k, v in job.items() if k != "static_configs"}
             for job in deploy["scrape_configs"]]
    assert strip == [{k: v for k, v in job.items() if k != "static_configs"}
                     for job in promdev.DEFAULT_SCRAPE["scrape_configs"]]
    assert deploy["global"] == promdev.DEFAULT_SCRAPE["global"]


def traffic(dev: DevCluster) -> None:
    s3 = dev.client()
    s3.create_bucket(Bucket="prom")
    for i in range(6):
        s3.put_object(Bucket="prom", Key=f"k{i}", Body=b"x" * (300_000 + i))
        s3.get_object(Bucket="prom", Key=f"k{i}")["Body"].read()
    s3.delete_object(Bucket="prom", Key="k0")
    try:
        s3.get_object(Bucket="prom", Key="missing")
    except ClientError:
        pass  # a 4xx, for the error panel


def dashboard_exprs() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]


def test_every_dashboard_query_returns_series(dev, tmp_path):
    doc = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    cfg = json.loads(json.dumps(__import__("tomllib").loads(dev.config_path.read_text())))
    scrape = promdev.scrape_config(cfg, dev.endpoint, ca_file=dev.data / "tls" / "ca.pem",
                                   base=doc, interval="1s")
    listen = f"127.0.0.1:{free_port()}"
    argv = promdev.prepare(tmp_path / "prometheus", scrape, listen, shutil.which("prometheus"))
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://{listen}"
    try:
        wait_for("every target up", lambda: all_up(base, dev.nodes + 1), timeout=120)
        def value(expr: str) -> float:
            res = api(base, "query", query=expr)["data"]["result"]
            return float(res[0]["value"][1]) if res else 0.0

        # A counter's series appears with its first request, and a rate needs an increase
        # between two scrapes of it: traffic until Prometheus has the series, then again.
        traffic(dev)
        wait_for("the counters in Prometheus", lambda: value(
            "sum(zonegate_gateway_received_bytes_total)") > 0, timeout=150)
        traffic(dev)
        wait_for("the traffic in Prometheus", lambda: value(
            "sum(rate(zonegate_gateway_received_bytes_total[1m]))") > 0, timeout=150)
        failed: list[str] = []
        empty: list[str] = []

        def all_answer() -> bool:
            # every panel's query, again until each returns series (some rates need one
            # more scrape than the counter above), or the time runs out
            empty.clear()
            for title, expr in dashboard_exprs():
                try:
                    res = api(base, "query", query=expr)
                except urllib.error.HTTPError as e:
                    failed.append(f"{title}: {expr}: {e.read().decode()[:300]}")
                    continue
                assert res["status"] == "success"
                if not res["data"]["result"]:
                    empty.append(f"{title}: {expr}")
            return bool(failed) or not empty

        deadline = time.monotonic() + 30
        while not all_answer() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not failed, "queries Prometheus refuses:\n" + "\n".join(failed)
        assert not empty, "queries that return nothing:\n" + "\n".join(empty)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def test_dev_prometheus_scrapes_every_process(dev):
    out = dev.output()
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("prometheus:"))
    base = line.split()[-1]
    targets = wait_for("every target up", lambda: all_up(base, dev.nodes + 1), timeout=120)
    assert {t["scrapeInterval"] for t in targets} == {"1s"}  # --prometheus-interval
    jobs = sorted(t["labels"]["job"] for t in targets)
    assert jobs == ["gateway"] + ["nodes"] * dev.nodes
    assert next(t for t in targets if t["labels"]["job"] == "gateway")["scrapeUrl"] \
        .startswith("https://")  # verified against the dev CA
