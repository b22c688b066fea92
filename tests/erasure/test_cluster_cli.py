"""`zonegate node --config C --id ID` runs the node the config describes, and a small 2+1
cluster of them works end to end with ErasureCluster and `zonegate repair`."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig, write_config
from gateway.server.serve import MALLOC_ENV

pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
pytestmark = pytest.mark.timeout(300)
ZONEGATE = str(Path(sys.executable).parent / "zonegate")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


async def run(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        ZONEGATE, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"})
    out = (await proc.communicate())[0].decode()
    return proc.returncode, out


async def test_zonegate_node_from_config_and_repair(tmp_path: Path) -> None:
    ports = free_ports(3)
    cfg = ClusterConfig.from_dict({
        "secret": "cli-test-secret-123",
        "erasure": {"k": 2, "m": 1, "segment_size": 65536, "state_dir": str(tmp_path / "st")},
        "nodes": [{"id": f"n{i}", "url": f"http://127.0.0.1:{p}",
                   "drives": [str(tmp_path / f"n{i}" / "d0")]} for i, p in enumerate(ports)],
    })
    path = write_config(tmp_path / "c.toml", cfg)
    procs = []
    try:
        for i in range(3):
            log = open(tmp_path / f"n{i}.log", "wb")  # noqa: ASYNC230, SIM115
            procs.append(await asyncio.create_subprocess_exec(
                ZONEGATE, "node", "--config", str(path), "--id", f"n{i}", "--create-drives",
                stdout=log, stderr=log, env={**os.environ, **MALLOC_ENV}, start_new_session=True))
            log.close()
        async with ErasureCluster(cfg, health_interval=0) as cluster:
            for _ in range(300):
                if all((await cluster.check_health()).values()):
                    break
                await asyncio.sleep(0.1)
            else:
                logs = "\n".join((tmp_path / f"n{i}.log").read_text()[-500:] for i in range(3))
                pytest.fail(f"nodes not ready:\n{logs}")
            payload = os.urandom(300_000)

            async def body() -> AsyncIterator[bytes]:
                yield payload

            layout = await cluster.write_part("cli00001.p1", body(), length=len(payload),
                                              stream="t", meta=lambda r: {"k": "v"})
            assert layout.missing == []
            assert b"".join([b async for b in cluster.read_part(layout)]) == payload
            [scanned] = await cluster.scan()
            assert scanned.meta == {"k": "v"} and scanned.length == len(payload)
        code, out = await run("repair", "--config", str(path))
        assert code == 0 and "0 parts fixed, 0 failed, 0 unrecoverable, 1 healthy" in out, out
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                await asyncio.wait_for(p.wait(), 20)
            except TimeoutError:
                p.kill()
                await p.wait()


async def test_zonegate_node_refuses_unknown_id_and_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('secret = "cli-test-secret-123"\n[[nodes]]\nid = "a"\nurl = "nope"\n')
    code, out = await run("node", "--config", str(bad), "--id", "a")
    assert code == 1 and "nodes[0].url: must be http://host:port" in out, out
    good = ClusterConfig.from_dict({
        "secret": "cli-test-secret-123", "erasure": {"k": 1, "m": 1},
        "nodes": [{"id": "a", "url": "http://127.0.0.1:1"}, {"id": "b", "url": "http://127.0.0.1:2"}]})
    path = write_config(tmp_path / "good.toml", good)
    code, out = await run("node", "--config", str(path), "--id", "zz")
    assert code == 1 and "no node with id 'zz'" in out, out
