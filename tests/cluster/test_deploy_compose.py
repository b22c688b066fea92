"""The top-level docker-compose.yml with deploy/ is a working deployment: the compose file is
valid for `docker-compose config`, every ZoneGate service runs a real `zonegate` subcommand
with a configuration `zonegate` accepts, the gateways share the compose PostgreSQL through the
password secret and sit behind HAProxy (whose backend names them), Prometheus scrapes exactly
the ZoneGate services, and the Dockerfile copies what exists.

No container engine runs here, so the files are proven instead of run. The validator is
Debian's `docker-compose` (v1, installed by .ci/run); without it, docker-compose v1 from PyPI,
which does not install into the project's environment (it needs PyYAML < 6 and jsonschema < 4),
in its own virtual environment under .venv/compose, made on first use.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
import urllib.parse
from pathlib import Path

import pytest
import yaml

from erasure.config import ClusterConfig
from gateway.cli.main import build_parser

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
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


def gateways(compose: dict) -> dict[str, dict]:
    return {n: s for n, s in zonegate_services(compose).items() if s["command"][0] == "serve"}


def depends(service: dict) -> dict[str, str]:
    """depends_on as {service: condition}."""
    deps = service.get("depends_on", {})
    if isinstance(deps, list):
        return {d: "service_started" for d in deps}
    return {d: (c or {}).get("condition", "service_started") for d, c in deps.items()}


def secret_paths(compose: dict, service: dict) -> dict[str, Path]:
    """Where a service's secrets appear in its container -> the host file behind each."""
    out = {}
    for sec in service.get("secrets", []):
        src = sec if isinstance(sec, str) else sec["source"]
        target = src if isinstance(sec, str) else sec.get("target", src)
        path = target if target.startswith("/") else f"/run/secrets/{target}"
        out[path] = Path(compose["secrets"][src]["file"])
    return out


def haproxy_servers() -> list[tuple[str, str]]:
    """(name, address) of every `server` line of deploy/haproxy.cfg's gateways backend."""
    servers, backend = [], None
    for line in (DEPLOY / "haproxy.cfg").read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if not line[0].isspace():
            backend = words[1] if words[0] == "backend" and len(words) > 1 else None
        elif backend == "gateways" and words[0] == "server":
            servers.append((words[1], words[2]))
    return servers


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
    gws = gateways(compose)
    nodes = sorted(n for n in zg if n not in gws)
    assert sorted(gws) == ["gateway1", "gateway2"]
    assert nodes == [f"node{i:02d}" for i in range(1, 13)]
    assert {"postgres", "haproxy", "prometheus", "grafana"} <= set(services)
    # the gateways are one definition: the same command, each its own state volume
    g1, g2 = gws["gateway1"], gws["gateway2"]
    assert g1["command"] == g2["command"]
    assert {k: v for k, v in g1.items() if k != "volumes"} == \
        {k: v for k, v in g2.items() if k != "volumes"}
    states = [host_path(g, "/var/lib/zonegate") for g in (g1, g2)]
    assert len(set(states)) == 2 and {str(p) for p in states} <= set(compose["volumes"])
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
    pg = compose["services"]["postgres"]
    pg_env = pg["environment"]
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
            # reached through haproxy only
            assert not svc.get("ports"), f"{name} publishes a host port"
            assert listen_port in [str(p) for p in svc.get("expose", [])]
            # the metadata store is the compose PostgreSQL, its password the compose secret
            url = urllib.parse.urlsplit(str(cfg.gateway["metadata"]))
            assert url.scheme == "postgresql" and url.password is None
            assert url.hostname == "postgres" and url.port == 5432
            assert url.path.lstrip("/") == pg_env["POSTGRES_DB"]
            assert url.username == pg_env["POSTGRES_USER"]
            secrets = secret_paths(compose, svc)
            pw_file = secrets[str(cfg.gateway["metadata_password_file"])]
            assert pw_file == secret_paths(compose, pg)[pg_env["POSTGRES_PASSWORD_FILE"]]
            assert pw_file.is_file() and pw_file.read_text().strip()
            assert mounted(svc, cfg.erasure.state_dir)
            deps = depends(svc)
            assert deps.get("postgres") == "service_healthy"
            for n in cfg.nodes:
                assert deps.get(n.id) == "service_healthy", n.id
    assert seen_subcommands == {"serve", "node"}


def test_postgres_keeps_its_data_and_says_when_it_is_ready(compose):
    pg = compose["services"]["postgres"]
    assert pg["image"].split(":")[0] == "postgres"
    assert "POSTGRES_PASSWORD" not in pg["environment"]  # only from the secret
    data = host_path(pg, "/var/lib/postgresql/data")
    assert str(data) in compose["volumes"]
    test = pg["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "pg_isready"
    assert test[test.index("-U") + 1] == pg["environment"]["POSTGRES_USER"]


def test_haproxy_fronts_every_gateway_by_its_service_name(compose):
    hap = compose["services"]["haproxy"]
    assert hap["image"].split(":")[0] == "haproxy"
    assert host_path(hap, "/usr/local/etc/haproxy/haproxy.cfg") == DEPLOY / "haproxy.cfg"
    gws = gateways(compose)
    assert set(depends(hap)) == set(gws)
    servers = haproxy_servers()
    assert sorted(name for name, _ in servers) == sorted(gws)
    cfg = ClusterConfig.load(DEPLOY / "cluster.toml")
    port = str(cfg.gateway["listen"]).rpartition(":")[2]
    assert sorted(addr for _, addr in servers) == sorted(f"{g}:{port}" for g in gws)
    text = (DEPLOY / "haproxy.cfg").read_text()
    assert "httpchk GET /health/ready" in text
    # S3 on the host's 9000 is haproxy's frontend; the stats page is published too
    binds = [ln.split()[1].rpartition(":")[2] for ln in text.splitlines()
             if ln.strip().startswith("bind ")]
    published = {(str(p["published"]), str(p["target"])) if isinstance(p, dict)
                 else tuple(str(p).split(":")[-2:]) for p in hap["ports"]}
    assert ("9000", "9000") in published
    assert {t for _, t in published} == set(binds)

    # The gateways believe X-Forwarded-For and -Proto from haproxy's fixed address only
    # (aws:SourceIp, aws:SecureTransport), and haproxy appends the one and sets the other.
    addr = ipaddress.ip_address(hap["networks"]["default"]["ipv4_address"])
    subnet = compose["networks"]["default"]["ipam"]["config"][0]["subnet"]
    assert addr in ipaddress.ip_network(subnet)
    trusted = [ipaddress.ip_network(n) for n in cfg.gateway["trusted_proxies"]]
    assert any(addr in n for n in trusted) and all(n.num_addresses == 1 for n in trusted)
    words = [ln.split("#", 1)[0].split() for ln in text.splitlines()]
    assert ["option", "forwardfor"] in words  # appended, not `if-none`
    assert ["http-request", "set-header", "X-Forwarded-Proto", "http", "if", "!{", "ssl_fc",
            "}"] in words


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
    port = str(cfg.gateway["listen"]).rpartition(":")[2]
    expected |= {f"{g}:{port}" for g in gateways(compose)}
    assert set(targets) == expected
    gw_job = next(job for job in doc["scrape_configs"] if job["job_name"] == "gateway")
    assert {t.rpartition(":")[0] for sc in gw_job["static_configs"] for t in sc["targets"]} \
        == set(gateways(compose))
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
