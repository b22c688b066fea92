"""The cluster config loads good files, round-trips through write_config, and refuses bad ones
with one line that names the bad field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from erasure.config import ClusterConfig, ConfigError, write_config


def good(n: int = 12) -> dict:
    return {
        "secret": "cluster-hmac-secret",
        "erasure": {"k": 8, "m": 2, "segment_size": 1048576, "backend": "isa_l_rs_vand"},
        "gateway": {"listen": "127.0.0.1:9000", "region": "us-east-1"},
        "users": [{"name": "root", "access_key": "AK", "secret_key": "SK"}],
        "nodes": [{"id": f"node{i:02d}", "url": f"http://127.0.0.1:{9101 + i}",
                   "drives": [f"data/node{i:02d}/d0"]} for i in range(n)],
    }


def test_good_file_loads_with_defaults(tmp_path: Path) -> None:
    p = tmp_path / "cluster.toml"
    write_config(p, good())
    cfg = ClusterConfig.load(p)
    assert cfg.erasure.write_quorum == 9  # k+1
    assert cfg.erasure.scheme.n == 10
    assert cfg.erasure.health_interval == 5.0
    assert cfg.node("node03").domain == "node03"  # default domain = id
    assert cfg.node("node03").port == 9104
    assert cfg.users[0].access_key == "AK"
    assert cfg.gateway["listen"] == "127.0.0.1:9000"
    again = ClusterConfig.load(write_config(tmp_path / "again.toml", cfg))
    assert again.to_dict() == cfg.to_dict()


def bad(path: str, value, remove: bool = False) -> dict:
    d = copy.deepcopy(good())
    keys = path.split(".")
    cur = d
    for k in keys[:-1]:
        cur = cur[int(k)] if isinstance(cur, list) else cur[k]
    last = keys[-1]
    if remove:
        del cur[last]
    elif isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value
    return d


@pytest.mark.parametrize("path,value,remove,field", [
    ("secret", None, True, "secret: missing"),
    ("secret", 12345678, False, "secret: must be a string"),
    ("secret", "short", False, "secret: must be at least"),
    ("erasure.k", "8", False, "erasure.k: must be an integer"),
    ("erasure.k", True, False, "erasure.k: must be an integer"),
    ("erasure.m", 0, False, "erasure.m: must be >= 1"),
    ("erasure.k", 11, False, "erasure: k+m = 13 fragments need at least 13 nodes"),
    ("erasure.write_quorum", 7, False, "erasure.write_quorum: must be between"),
    ("erasure.write_quorum", 11, False, "erasure.write_quorum: must be between"),
    ("erasure.backend", "bogus", False, "erasure.backend: 'bogus'"),
    ("erasure.segment_size", 0, False, "erasure.segment_size"),
    ("erasure.sgement_size", 1, False, "erasure.sgement_size: unknown setting"),
    ("erasure.health_interval", 0, False, "erasure.health_interval: must be > 0 seconds"),
    ("erasure.write_stall", -1, False, "erasure.write_stall: must be > 0 seconds"),
    ("nodes.3.url", "127.0.0.1:9000", False, "nodes[3].url: must be http://host:port"),
    ("nodes.3.url", "http://127.0.0.1", False, "nodes[3].url: must be http://host:port"),
    ("nodes.3.url", "http://127.0.0.1:9101", False, "nodes[3].url: duplicate node url"),
    ("nodes.4.id", "node00", False, "nodes[4].id: duplicate node id 'node00'"),
    ("nodes.4.id", "../etc", False, "nodes[4].id: must be letters"),
    ("nodes.5.drives", "d0", False, "nodes[5].drives: must be an array"),
    ("nodes.5.drives", [""], False, "nodes[5].drives[0]: must be a path"),
    ("nodes.6.zone", 1, False, "nodes[6].zone: unknown setting"),
    ("nodes", [], False, "nodes: missing"),
    ("users.0.access_key", "", False, "users[0].access_key: must not be empty"),
    ("users.0.secret_key", None, True, "users[0].secret_key: missing"),
])
def test_bad_field_is_named(path: str, value, remove: bool, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        ClusterConfig.from_dict(bad(path, value, remove), source="c.toml")
    msg = str(e.value)
    assert msg.startswith("c.toml: ") and field in msg and "\n" not in msg, msg


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("secret = [unclosed\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        ClusterConfig.load(p)
    with pytest.raises(ConfigError, match="no such config file"):
        ClusterConfig.load(tmp_path / "nope.toml")


def test_unknown_node_id_is_a_clear_error() -> None:
    cfg = ClusterConfig.from_dict(good())
    with pytest.raises(ConfigError, match="no node with id 'node99'"):
        cfg.node("node99")


def test_the_shipped_example_secrets_are_called_out_and_real_ones_are_not() -> None:
    shipped = ClusterConfig.load(Path(__file__).resolve().parents[2] / "deploy" / "cluster.toml")
    warnings = shipped.placeholder_warnings()
    assert any("`secret`" in w for w in warnings)
    assert any("access_key" in w for w in warnings) and any("secret_key" in w for w in warnings)
    assert shipped.placeholder_warnings(users=False) == \
        [w for w in warnings if "`secret`" in w]  # what a node logs
    assert ClusterConfig.from_dict(good()).placeholder_warnings() == []
