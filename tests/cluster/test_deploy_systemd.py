"""The systemd units under deploy/systemd/: restart policies that never give up, a kill mode
that reaches the gateway's workers, and command lines the zonegate CLI accepts."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from gateway.cli.main import build_parser

UNITS = sorted((Path(__file__).resolve().parents[2] / "deploy" / "systemd").glob("*.service"))


def load(path: Path) -> configparser.ConfigParser:
    p = configparser.ConfigParser(strict=False, interpolation=None)
    p.optionxform = str  # systemd keys are case-sensitive
    p.read(path)
    return p


def test_both_units_are_shipped():
    assert [u.name for u in UNITS] == ["zonegate-node@.service", "zonegate-serve.service"]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_unit_restarts_and_kills_the_whole_service(unit):
    svc = load(unit)["Service"]
    assert svc["KillMode"] in ("mixed", "control-group")
    assert svc["KillSignal"] == "SIGTERM" and float(svc["TimeoutStopSec"]) > 10
    assert svc["Restart"] == "on-failure" and float(svc["RestartSec"]) > 0
    assert load(unit)["Unit"]["StartLimitIntervalSec"] == "0"
    argv = shlex.split(svc["ExecStart"].replace("%i", "node01"))
    assert Path(argv[0]).name == "zonegate"
    args = build_parser().parse_args(argv[1:])
    assert args.command == ("node" if "node" in unit.name else "serve")
    assert args.config == "/etc/zonegate/cluster.toml"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_systemd_accepts_the_unit(unit, tmp_path):
    copy = tmp_path / unit.name.replace("@.", "@node01.")
    copy.write_text(unit.read_text())
    out = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True,
                         text=True, timeout=60)
    # The venv path does not exist here; keys newer than this systemd are ignored by it.
    problems = [ln for ln in (out.stdout + out.stderr).splitlines()
                if ln.strip() and "is not executable" not in ln
                and "Unknown key 'Restart" not in ln]
    assert problems == [], problems
