"""Prometheus for a cluster: the scrape configuration of deploy/prometheus.yml pointed at a
cluster's real addresses, and the command that runs Debian's `prometheus` on it
(`zonegate dev --prometheus`, and the test that checks the Grafana dashboard against it).

The jobs are deploy/prometheus.yml's (`gateway`: the gateway's /metrics, all workers merged;
`nodes`: every node's /metrics); only the targets (and, for an HTTPS gateway, the scheme and
the CA to trust) change. The file is written as JSON, which is YAML too.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

# What deploy/prometheus.yml holds (tests/cluster/test_deploy_prometheus.py keeps the two equal).
DEFAULT_SCRAPE: dict[str, Any] = {
    "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
    "scrape_configs": [
        {"job_name": "gateway", "metrics_path": "/metrics",
         "static_configs": [{"targets": ["gateway1:9000", "gateway2:9000"]}]},
        {"job_name": "nodes", "metrics_path": "/metrics",
         "static_configs": [{"targets": ["node01:9100"]}]},
    ],
}


def _hostport(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0]


def scrape_config(cluster: dict[str, Any], gateway_url: str, *, ca_file: str | Path | None = None,
                  base: dict[str, Any] | None = None, interval: str | None = None
                  ) -> dict[str, Any]:
    """`base` (default: deploy/prometheus.yml's content) with the targets of `cluster` (a
    cluster config as a dict: its `nodes[].url`) and of the gateway at `gateway_url`."""
    doc = copy.deepcopy(base or DEFAULT_SCRAPE)
    if interval:
        doc.setdefault("global", {})["scrape_interval"] = interval
        doc["global"]["evaluation_interval"] = interval
    for job in doc["scrape_configs"]:
        if job["job_name"] == "gateway":
            job["static_configs"] = [{"targets": [_hostport(gateway_url)]}]
            if gateway_url.startswith("https"):
                job["scheme"] = "https"
                if ca_file:
                    job["tls_config"] = {"ca_file": str(ca_file)}
        elif job["job_name"] == "nodes":
            job["static_configs"] = [{"targets": [_hostport(n["url"]) for n in cluster["nodes"]]}]
    return doc


def binary() -> str | None:
    return shutil.which("prometheus")


def prepare(directory: Path, doc: dict[str, Any], listen: str, exe: str) -> list[str]:
    """Write the configuration under `directory`; the argv that runs Prometheus on it."""
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "prometheus.yml"
    conf.write_text(json.dumps(doc, indent=2) + "\n")
    return [exe, f"--config.file={conf}", f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address={listen}", "--storage.tsdb.retention.time=7d"]
