"""`zonegate layout` as an operator runs it (the real entry point in a subprocess) on the
metadata store of the config: stage, refuse with one line what would lose redundancy, diff,
apply as a new version, history, revert (refused too when it would drop a node holding data
together with others), and --files for erasure-only use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from erasure.config import write_config


def make_config(tmp: Path, n: int = 4) -> Path:
    return write_config(tmp / "cluster.toml", {
        "secret": "layout-cli-secret",
        "erasure": {"k": 2, "m": 1, "state_dir": str(tmp / "state")},
        "gateway": {"metadata": str(tmp / "meta.sqlite")},
        "nodes": [{"id": f"n{i}", "url": f"http://127.0.0.1:{9300 + i}",
                   "drives": [f"d/n{i}/a"]} for i in range(n)]})


def zg(cfg: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "gateway.cli", "layout", *args, "--config",
                        str(cfg)], capture_output=True, text=True, timeout=120)
    assert (r.returncode == 0) == ok, (r.returncode, r.stdout, r.stderr)
    return r


def show(cfg: Path, *extra: str) -> dict:
    return json.loads(zg(cfg, "show", "--json", *extra).stdout)


def test_stage_diff_apply_history_revert(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    doc = show(cfg)
    assert doc["layout"]["version"] == 1 and doc["staged"] == []
    zg(cfg, "node", "add", "n9", "http://127.0.0.1:9399", "--drive", "d/n9/a",
       "--domain", "rack9", "--weight", "2")
    zg(cfg, "node", "drain", "n0")
    zg(cfg, "drive", "drain", "n1", "d/n1/a")
    diff = zg(cfg, "diff").stdout
    assert "v1 -> v2" in diff and "~ node n0 state: active -> draining" in diff
    assert "+ node n9" in diff and "~ drive n1:d/n1/a active -> draining" in diff
    assert show(cfg)["layout"]["version"] == 1  # staged only
    out = zg(cfg, "apply", "--note", "grow and retire").stdout
    assert "applied layout v2" in out
    doc = show(cfg)
    assert doc["staged"] == [] and doc["layout"]["note"] == "grow and retire"
    nodes = {n["id"]: n for n in doc["layout"]["nodes"]}
    assert nodes["n0"]["state"] == "draining" and nodes["n9"]["weight"] == 2
    assert nodes["n9"]["domain"] == "rack9"
    assert "nothing staged" in zg(cfg, "apply").stdout
    # refusals are one line, nothing staged: too few writable nodes for 2+1 ...
    zg(cfg, "node", "drain", "n2")
    r = zg(cfg, "node", "drain", "n3", ok=False)
    assert r.stderr.count("\n") == 1 and "refused" in r.stderr and "2+1 needs 3" in r.stderr
    # ... domains that cannot hold k+m ...
    r = zg(cfg, "node", "domain", "n9", "n1", ok=False)
    assert "refused" in r.stderr and "failure domains" in r.stderr
    # ... removing more domains at once than parity covers
    zg(cfg, "unstage")
    zg(cfg, "node", "remove", "n0")
    r = zg(cfg, "node", "remove", "n1", ok=False)
    assert "more than m=1" in r.stderr
    zg(cfg, "apply")
    assert show(cfg)["layout"]["version"] == 3
    assert [x.split()[0] for x in zg(cfg, "history").stdout.splitlines()] == ["v3", "v2", "v1"]
    # revert to v2: n0 comes back (draining); a new version, the old ones kept
    assert "layout v4 = v2" in zg(cfg, "revert").stdout
    doc = show(cfg)
    assert doc["layout"]["version"] == 4
    assert {n["id"]: n["state"] for n in doc["layout"]["nodes"]}["n0"] == "draining"
    assert show(cfg, "--version", "1")["layout"]["version"] == 1
    # a drained drive comes back: drive activate
    zg(cfg, "drive", "activate", "n1", "d/n1/a")
    assert "~ drive n1:d/n1/a draining -> active" in zg(cfg, "diff").stdout
    zg(cfg, "unstage")
    # the erasure code is a layout change like the others
    zg(cfg, "erasure", "3", "1")
    assert "erasure: 3+1 for new writes (was 2+1)" in zg(cfg, "diff").stdout


def test_files_store_for_erasure_only_use(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    zg(cfg, "node", "weight", "n1", "0.5", "--files")
    zg(cfg, "apply", "--files")
    assert (tmp_path / "state" / "layout" / "v00000002.json").is_file()
    assert show(cfg, "--files")["layout"]["version"] == 2
    assert show(cfg)["layout"]["version"] == 1  # the metadata store is another truth
