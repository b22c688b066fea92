"""The top-level docker-compose.yml with deploy/ is a working deployment: the compose file is
valid for `docker-compose config`, every ZoneGate service runs a real `zonegate` subcommand
with a configuration `zonegate` accepts, Prometheus scrapes exactly those services, and the
Dockerfile copies what exists.

No container engine runs here, so the files are proven instead of run. The validator is
Debian's `docker-compose` (v1, installed by .ci/run); without it, docker-compose v1 from PyPI,
which does not install into the project's environment (it needs PyYAML < 6 and jsonschema < 4),
in its own virtual environment under .venv/compose, made on first use.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from erasure.config import ClusterConfig
from gateway.cli import build_parser

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
COMPOSE_FILE = REPO / "docker-compose.yml"
CONFIG_IN_CONTAINER = "/etc/zonegate/cluster.toml"
# PyYAML 5.3.1: the last 5.x that builds on Python 3.11 without Cython
COMPOSE_REQS = ["PyYAML==5.3.1", "docker-compose==1.29.2"]


def docker_compose() -> list[str]:
    """argv of a `docker-compose` v1: $ZONEGATE_DOCKER_COMPOSE, one on PATH, or .venv/compose."""
    if os.environ.get("ZONEGATE_DOCKER_COMPOSE"):
        return shlex.split(os.environ["ZONEGATE_DOCKER_COMPOSE"])
    if shutil.which("docker-compose"):
        return [shutil.which("docker-compose")]  # type: ignore[list-item]
    venv = REPO / ".venv" / "compose"
    exe = venv / "bin" / "docker-compose"
    if not exe.exists():
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True)
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *COMPOSE_REQS],
                             capture_output=True, text=True, timeout=480)
        if made.returncode or pip.returncode:
            shutil.rmtree(venv, ignore_errors=True)
            pytest.skip(f"cannot install docker-compose from PyPI: {pip.stderr[-500:]}")
    return [str(exe)]


def compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    return subprocess.run([*docker_compose(), "-f", str(path), "config"], capture_output=True,
                          text=True, cwd=path.parent, env=env, timeout=120)


@pytest.fixture(scope="module")
def compose() -> dict:
    """The compose file as docker-compose resolves it (anchors merged, paths absolute)."""
    res = compose_config(COMPOSE_FILE)
    assert res.returncode == 0, res.stderr
    return yaml.safe_load(res.stdout)


def zonegate_services(compose: dict) -> dict[str, dict]:
    return {name: s for name, s in compose["services"].items()
            if s.get("image", "").startswith("zonegate")}


def host_path(service: dict, container_path: str) -> Path:
    """The host file mounted at container_path in a service (bind mounts only)."""
    for v in service.get("volumes", []):
        src, dst = (v["source"], v["target"]) if isinstance(v, dict) else v.split(":")[:2]
        if dst == container_path:
            return Path(src)
    raise AssertionError(f"{container_path} is not mounted")


def mounted(service: dict, container_path: str) -> bool:
    for v in service.get("volumes", []):
        dst = v["target"] if isinstance(v, dict) else v.split(":")[1]
        if container_path == dst or container_path.startswith(dst.rstrip("/") + "/"):
            return True
    return False


def test_docker_compose_refuses_a_broken_file(tmp_path):
    # The validator can fail: an unknown service key is refused.
    bad = tmp_path / "docker-compose.yml"
    bad.write_text("services:\n  gateway:\n    image: zonegate:latest\n    comand: [serve]\n")
    res = compose_config(bad)
    assert res.returncode != 0
    assert "comand" in res.stderr


def test_compose_file_is_valid_and_has_the_whole_topology(compose):
    assert not (DEPLOY / "docker-compose.yml").exists()  # one compose file, at the top
    services = compose["services"]
    zg = zonegate_services(compose)
    nodes = sorted(n for n in zg if n != "gateway")
    assert "gateway" in zg
    assert nodes == [f"node{i:02d}" for i in range(1, 13)]
    assert {"prometheus", "grafana"} <= set(services)
    # each node has a volume of its own for its drives
    drive_volumes = []
    for n in nodes:
        vols = [v for v in zg[n]["volumes"] if (v["target"] if isinstance(v, dict)
                                                else v.split(":")[1]) == "/data"]
        assert len(vols) == 1, n
        drive_volumes.append(vols[0]["source"] if isinstance(vols[0], dict)
                             else vols[0].split(":")[0])
    assert len(set(drive_volumes)) == 12
    assert set(drive_volumes) <= set(compose["volumes"])


def test_every_service_runs_a_real_zonegate_subcommand_with_an_accepted_config(compose):
    parser = build_parser()
    seen_subcommands = set()
    for name, svc in zonegate_services(compose).items():
        argv = svc["command"] if isinstance(svc["command"], list) else shlex.split(svc["command"])
        args = parser.parse_args(argv)  # SystemExit (a failure) if zonegate refuses it
        seen_subcommands.add(argv[0])
        help_run = subprocess.run([sys.executable, "-m", "gateway.cli", argv[0], "--help"],
                                  capture_output=True, text=True, timeout=60)
        assert help_run.returncode == 0, help_run.stderr
        assert args.config == CONFIG_IN_CONTAINER
        cfg = ClusterConfig.load(host_path(svc, CONFIG_IN_CONTAINER))
        if argv[0] == "node":
            spec = cfg.node(args.id)
            assert name == args.id == spec.host == svc.get("hostname", name)
            assert str(spec.port) in [str(p) for p in svc.get("expose", [])]
            for d in spec.drives:
                assert mounted(svc, d), f"{name}: drive {d} is not on a volume"
            assert args.open_metrics == "any", f"{name}: Prometheus could not scrape it"
        else:
            assert argv[0] == "serve"
            listen_port = str(cfg.gateway["listen"]).rpartition(":")[2]
            published = [str(p.get("target")) if isinstance(p, dict) else str(p).split(":")[-1]
                         for p in svc.get("ports", [])]
            assert listen_port in published
            for key in ("metadata",):
                assert mounted(svc, str(cfg.gateway[key])), key
            assert mounted(svc, cfg.erasure.state_dir)
            assert {n.id for n in cfg.nodes} <= set(svc.get("depends_on", {}))
    assert seen_subcommands == {"serve", "node"}


def test_prometheus_targets_are_exactly_the_zonegate_services(compose):
    prom = compose["services"]["prometheus"]
    prom_file = host_path(prom, "/etc/prometheus/prometheus.yml")
    assert prom_file == DEPLOY / "prometheus.yml"
    doc = yaml.safe_load(prom_file.read_text())
    targets = [t for job in doc["scrape_configs"] for sc in job["static_configs"]
               for t in sc["targets"]]
    assert len(targets) == len(set(targets))
    zg = zonegate_services(compose)
    cfg = ClusterConfig.load(DEPLOY / "cluster.toml")
    expected = {f"{n.host}:{n.port}" for n in cfg.nodes}
    expected.add(f"gateway:{str(cfg.gateway['listen']).rpartition(':')[2]}")
    assert set(targets) == expected
    assert {t.rpartition(":")[0] for t in targets} == set(zg)
    for job in doc["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"


def test_grafana_is_provisioned_with_the_dashboard_in_the_repo(compose):
    graf = compose["services"]["grafana"]
    prov = host_path(graf, "/etc/grafana/provisioning")
    dashboards = host_path(graf, "/var/lib/grafana/dashboards")
    assert (dashboards / "zonegate.json").is_file()
    ds = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())
    assert ds["datasources"][0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((prov / "dashboards" / "zonegate.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_dockerfile_installs_the_zonegate_command():
    lines = [ln.strip() for ln in (DEPLOY / "Dockerfile").read_text().splitlines()
             if ln.strip() and not ln.strip().startswith("#")]
    copies = [ln.split()[1:-1] for ln in lines if ln.startswith("COPY ")]
    for srcs in copies:
        for src in srcs:
            assert (REPO / src).exists(), src
    copied = {s.rstrip("/") for srcs in copies for s in srcs}
    packages = {"zonestore", "erasure", "gateway"}
    assert packages | {"pyproject.toml"} <= copied
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "zonegate" in pyproject["project"]["scripts"]
    assert 'ENTRYPOINT ["zonegate"]' in lines
    # the context's ignore file keeps everything the COPY lines need
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for src in copied:
        assert f"!{src}" in ignore or f"!{src}/" in ignore, src
