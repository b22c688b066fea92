"""`zonegate dev`, the one command that runs a local cluster: its configuration, its certificate,
and its processes (started, restarted, stopped, never orphaned)."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import stat
import threading
import time
import tomllib

import pytest

from erasure.config import ClusterConfig
from gateway.cli.devconfig import new_config, refresh_config
from gateway.server.tls import ensure_self_signed
from tests.support.devcluster import ACCESS_KEY, SECRET_KEY, ClusterError, DevCluster


def test_self_signed_certificate_is_made_once_and_verifies(tmp_path):
    cert, key = ensure_self_signed(tmp_path / "tls")
    first = cert.read_bytes()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert ensure_self_signed(tmp_path / "tls") == (cert, key)
    assert cert.read_bytes() == first  # reused, so clients can keep trusting it
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def serve(n: int) -> None:
            for _ in range(n):
                conn, _ = listener.accept()
                try:
                    with server_ctx.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)
                except ssl.SSLError:
                    pass

        t = threading.Thread(target=serve, args=(2,), daemon=True)
        t.start()
        client_ctx = ssl.create_default_context(cafile=str(cert))
        for name in ("localhost", "127.0.0.1"):
            with socket.create_connection(("127.0.0.1", port)) as raw:
                with client_ctx.wrap_socket(raw, server_hostname=name) as tls:
                    assert tls.version() in ("TLSv1.2", "TLSv1.3")
                    tls.send(b"x")
        t.join(5)


def test_new_config_takes_credentials_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ZONEGATE_ACCESS_KEY", "MYACCESSKEY")
    monkeypatch.setenv("ZONEGATE_SECRET_KEY", "my-secret-key-123")
    cfg = new_config(tmp_path, 12, "127.0.0.1", 0)
    parsed = ClusterConfig.from_dict(cfg)
    assert [(u.name, u.access_key, u.secret_key) for u in parsed.users] == [
        ("root", "MYACCESSKEY", "my-secret-key-123")]
    assert len(parsed.nodes) == 12 and len({n.url for n in parsed.nodes}) == 12
    assert all(len(n.drives) == 2 and all(os.path.isabs(d) for d in n.drives)
               for n in parsed.nodes)
    assert os.path.isabs(parsed.erasure.state_dir)


def test_new_config_makes_random_credentials(tmp_path, monkeypatch):
    monkeypatch.delenv("ZONEGATE_ACCESS_KEY", raising=False)
    monkeypatch.delenv("ZONEGATE_SECRET_KEY", raising=False)
    a = new_config(tmp_path, 10, "127.0.0.1", 0)
    b = new_config(tmp_path, 10, "127.0.0.1", 0)
    assert a["users"][0]["access_key"] != b["users"][0]["access_key"]
    assert a["users"][0]["secret_key"] != b["users"][0]["secret_key"]
    assert a["secret"] != b["secret"] and len(a["users"][0]["secret_key"]) == 40


def test_refresh_config_moves_a_taken_node_port_and_keeps_the_rest(tmp_path, monkeypatch):
    monkeypatch.delenv("ZONEGATE_ACCESS_KEY", raising=False)
    monkeypatch.delenv("ZONEGATE_SECRET_KEY", raising=False)
    cfg = new_config(tmp_path, 10, "127.0.0.1", 0)
    secret, users = cfg["secret"], [dict(u) for u in cfg["users"]]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        cfg["nodes"][3]["url"] = f"http://127.0.0.1:{taken}"
        notes = refresh_config(cfg, "127.0.0.1", 12345)
    assert cfg["nodes"][3]["url"] != f"http://127.0.0.1:{taken}"
    assert any("node04" in n for n in notes)
    assert cfg["gateway"]["listen"] == "127.0.0.1:12345"
    assert cfg["secret"] == secret and cfg["users"] == users
    ClusterConfig.from_dict(cfg)


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if _alive(p)]
    return alive


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_dev_starts_restarts_and_stops_everything(tmp_path):
    cluster = DevCluster(tmp_path / "data", nodes=12, zones=16, zone_size="16M")
    try:
        cluster.start()
        out = cluster.output()
        assert cluster.endpoint in out and ACCESS_KEY in out and SECRET_KEY in out
        assert "s3 ls" in out
        cfg_text = cluster.config_path.read_bytes()
        assert stat.S_IMODE(cluster.config_path.stat().st_mode) == 0o600
        assert len(tomllib.loads(cfg_text.decode())["nodes"]) == 12
        children = cluster.child_pids()
        assert len(children) >= 15  # 12 nodes + the gateway + its 2 uvicorn workers
        s3 = cluster.client()
        s3.create_bucket(Bucket="persist")
        s3.put_object(Bucket="persist", Key="k", Body=b"survives restarts")

        # A node that dies is restarted (and logged).
        node_pid = next(p for p in children if b"node01" in open(f"/proc/{p}/cmdline", "rb").read())
        os.kill(node_pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while "node01 exited" not in cluster.output() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "restarting" in cluster.output()

        # SIGTERM (what Ctrl-C leads to) stops every child, and the launcher exits 0.
        assert cluster.stop() == 0
        assert _wait_gone(children, 5) == []
        assert cluster.child_pids() == []

        # A restart finds the same configuration and the data.
        cluster.start()
        assert cluster.config_path.read_bytes() == cfg_text
        s3 = cluster.client()
        assert s3.get_object(Bucket="persist", Key="k")["Body"].read() == b"survives restarts"

        # One cluster per data directory: a second launcher is refused, the first carries on.
        second = DevCluster(cluster.data, nodes=12, zones=16, zone_size="16M")
        with pytest.raises(ClusterError, match="in use by another"):
            second.start(timeout=60)
        assert s3.get_object(Bucket="persist", Key="k")["Body"].read() == b"survives restarts"

        # Even SIGKILL of the launcher leaves no orphans (PR_SET_PDEATHSIG).
        children = cluster.child_pids()
        assert children
        cluster.proc.kill()
        cluster.proc.wait()
        assert _wait_gone(children, 30) == []
    finally:
        cluster.stop()


@pytest.mark.slow
def test_dev_refuses_a_port_in_use(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        cluster = DevCluster(tmp_path / "data", nodes=10, zones=8, zone_size="16M",
                             port=busy.getsockname()[1])
        with pytest.raises(Exception, match="in use"):
            cluster.start(timeout=60)
    assert cluster.child_pids() == []


@pytest.mark.slow
def test_dev_moves_a_node_whose_port_is_taken_during_start(tmp_path, capsys):
    from gateway.cli.dev import Launcher
    from gateway.cli.main import build_parser
    from tests.support.devcluster import free_port

    args = build_parser().parse_args([
        "dev", "--data", str(tmp_path / "data"), "--port", str(free_port()), "--nodes", "10",
        "--zones", "8", "--zone-size", "16M", "--workers", "1"])
    launcher = Launcher(args)
    launcher.prepare()
    url = launcher.cfg["nodes"][2]["url"]
    port = int(url.rsplit(":", 1)[1])
    try:
        with socket.socket() as thief:  # takes node03's port after the launcher checked it
            thief.bind(("127.0.0.1", port))
            thief.listen()
            assert launcher.start()
        assert f"port {port} was taken" in capsys.readouterr().out
        saved = tomllib.loads(launcher.config_path.read_text())
        assert saved["nodes"][2]["url"] != url
        assert launcher.cfg["nodes"][2]["url"] == saved["nodes"][2]["url"]
    finally:
        launcher.stop()
    assert all(not c.alive() for c in [*launcher.children, launcher.gateway])
