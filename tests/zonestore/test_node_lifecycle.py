"""A node process's life: start-up errors, crash (SIGKILL) and graceful stop (SIGTERM) with
its data intact, streaming a large record with bounded memory, and corrupt data never served."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys

import aiohttp
import pytest

from tests.support.nodeproc import MALLOC_ENV, NodeCluster, node_request

pytestmark = pytest.mark.timeout(300)
MiB = 1 << 20


async def put(session, c, rid, payload, meta=b""):
    status, _, body = await node_request(session, c, 0, "PUT", f"/v1/records/{rid}",
                                         body=payload + meta,
                                         headers={"X-ZG-Length": str(len(payload))})
    assert status == 201, body
    return json.loads(body)


async def test_records_survive_sigkill_and_restart(tmp_path, session):
    records = {f"r{n}": (os.urandom(n), f"meta{n}".encode()) for n in (0, 1, 4095, 4097, 3 * MiB)}
    with NodeCluster(tmp_path, 1, drives_per_node=2) as c:
        for rid, (payload, meta) in records.items():
            await put(session, c, rid, payload, meta)
        await put(session, c, "gone", b"deleted before the crash")
        assert (await node_request(session, c, 0, "DELETE", "/v1/records/gone"))[0] == 204
        old_pid = c.pid(0)
        c.kill(0)
        c.restart(0)
        assert c.pid(0) != old_pid
        for rid, (payload, meta) in records.items():
            status, headers, body = await node_request(session, c, 0, "GET", f"/v1/records/{rid}")
            assert status == 200 and body == payload, rid
            assert base64.b64decode(headers["X-ZG-Meta"]) == meta
            status, _, body = await node_request(session, c, 0, "GET", "/v1/records",
                                                 query={"prefix": rid, "limit": "1"})
            assert json.loads(body)["records"][0]["id"] == rid
        assert (await node_request(session, c, 0, "GET", "/v1/records/gone"))[0] == 404
        # And it keeps working.
        await put(session, c, "after", b"x" * 10_000)
        assert (await node_request(session, c, 0, "GET", "/v1/records/after"))[2] == b"x" * 10_000


async def test_sigterm_stops_gracefully_and_keeps_data(tmp_path, session):
    with NodeCluster(tmp_path, 1, drives_per_node=1) as c:
        await put(session, c, "kept", b"k" * 100_000, b"m")
        assert c.terminate(0) == 0
        log = c.log_path(0).read_text()
        assert "stopped" in log and "Traceback" not in log
        c.restart(0)
        status, headers, body = await node_request(session, c, 0, "GET", "/v1/records/kept")
        assert status == 200 and body == b"k" * 100_000


def rss_kib(c: NodeCluster) -> int:
    return c.proc_status(0)["VmRSS"]


async def test_256mib_record_streams_in_and_out_with_bounded_server_memory(tmp_path, session):
    # 256 MiB, not less: the zone log legitimately buffers up to ~50 MiB per open zone (write
    # behind, group commit), so a smaller record could not tell streaming from buffering.
    # glibc's default allocator here: the tuned settings keep up to 256 MiB of freed heap on
    # purpose, so RSS would measure retention instead of live memory.
    size = 256 * MiB
    with NodeCluster(tmp_path, 1, drives_per_node=1, tuned_malloc=False) as c:
        await put(session, c, "warmup", os.urandom(2 * MiB))  # first-use allocations
        baseline = rss_kib(c)
        peak = baseline
        sent = hashlib.sha256()

        async def body():
            block = os.urandom(MiB)
            for i in range(size // MiB):
                chunk = i.to_bytes(8, "big") + block[8:]
                sent.update(chunk)
                yield chunk
            yield b"trailing-meta"

        async def watch():
            nonlocal peak
            while True:
                peak = max(peak, rss_kib(c))
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch())
        try:
            path = "/v1/records/big"
            headers = {**c.headers(0, "PUT", path), "X-ZG-Length": str(size)}
            async with session.put(c.urls[0] + path, data=body(), headers=headers) as resp:
                assert resp.status == 201, await resp.text()
            got = hashlib.sha256()
            n = 0
            async with session.get(c.urls[0] + path, headers=c.headers(0, "GET", path)) as resp:
                assert resp.status == 200
                assert resp.headers["X-ZG-Meta"] == "dHJhaWxpbmctbWV0YQ=="
                async for chunk in resp.content.iter_chunked(MiB):
                    got.update(chunk)
                    n += len(chunk)
        finally:
            watcher.cancel()
        hwm = c.proc_status(0)["VmHWM"]
    assert n == size and got.digest() == sent.digest()
    grown = (max(peak, hwm) - baseline) * 1024
    print(f"server RSS baseline {baseline // 1024} MiB, peak grew by {grown / MiB:.1f} MiB "
          f"for a {size // MiB} MiB record")
    assert grown < size // 2, f"server RSS grew by {grown / MiB:.1f} MiB"


async def test_corrupt_data_is_never_served(tmp_path, session):
    marker = b"ZG-CORRUPTION-TEST-PATTERN-0123456789"
    payload = (marker + bytes(range(256)) * 16) * 2000  # ~8 MiB, the marker is findable on disk
    with NodeCluster(tmp_path, 1, drives_per_node=1) as c:
        await put(session, c, "victim", payload)
        hits = 0
        for zone in sorted((c.drive_paths(0)[0] / "zones").iterdir()):
            if zone.suffix or not zone.stat().st_size:
                continue
            data = zone.read_bytes()
            pos = data.find(marker, len(data) // 3)  # damage the middle of the record
            if pos >= 0:
                with open(zone, "r+b") as f:
                    f.seek(pos + 5)
                    f.write(b"X")
                hits += 1
                break
        assert hits == 1
        path = "/v1/records/victim"
        try:
            async with session.get(c.urls[0] + path, headers=c.headers(0, "GET", path)) as resp:
                if resp.status == 200:
                    body = await resp.read()
                    pytest.fail(f"corrupt record served whole ({len(body)} bytes)")
                assert resp.status == 409
        except aiohttp.ClientPayloadError:
            pass  # the stream was cut short: the client never gets bad bytes as good ones
        status, _, body = await node_request(session, c, 0, "GET", "/v1/stats")
        assert json.loads(body)["totals"]["crc_failures"] >= 1
        # The node still serves healthy records.
        await put(session, c, "healthy", b"fine")
        assert (await node_request(session, c, 0, "GET", "/v1/records/healthy"))[2] == b"fine"


def run_node_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zonestore.node", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **MALLOC_ENV})


def test_missing_drive_is_a_one_line_error(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s\n")
    r = run_node_cli("--id", "n1", "--drive", str(tmp_path / "nope"), "--listen", "127.0.0.1:0",
                     "--secret-file", str(secret))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no such drive" in lines[0] and "--create-drives" in lines[0]
    assert not (tmp_path / "nope").exists()
    # A directory that is not a drive: refused, and nothing is written into it.
    stranger = tmp_path / "photos"
    stranger.mkdir()
    (stranger / "cat.jpg").write_bytes(b"meow")
    r = run_node_cli("--id", "n1", "--drive", str(stranger), "--listen", "127.0.0.1:0",
                     "--secret-file", str(secret))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert sorted(p.name for p in stranger.iterdir()) == ["cat.jpg"]
    r = run_node_cli("--id", "n1", "--drive", str(tmp_path), "--listen", "127.0.0.1:0",
                     "--secret-file", str(tmp_path / "no-secret"))
    assert r.returncode != 0 and "secret" in r.stderr and "Traceback" not in r.stderr


def test_busy_port_and_busy_drive_are_one_line_errors(tmp_path):
    with NodeCluster(tmp_path / "a", 1, drives_per_node=1) as c:
        secret = tmp_path / "secret"
        secret.write_text("s\n")
        # Another node on the same drive: refused, the running node is untouched.
        r = run_node_cli("--id", "twin", "--drive", str(c.drive_paths(0)[0]), "--listen",
                         "127.0.0.1:0", "--secret-file", str(secret))
        assert r.returncode == 2 and "in use by another node" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        # A port that is taken.
        r = run_node_cli("--id", "n2", "--drive", str(tmp_path / "d2"), "--create-drives",
                         "--listen", f"127.0.0.1:{c.nodes[0].port}", "--secret-file", str(secret))
        assert r.returncode == 2 and "cannot listen" in r.stderr and "Traceback" not in r.stderr
        assert c.nodes[0].running


async def test_create_drives_flag_creates_missing_drives(tmp_path, session):
    c = NodeCluster(tmp_path, 1, drives_per_node=1,
                    extra_args=["--create-drives", "--zones", "8", "--zone-size-mib", "16"])
    drive = c.drive_paths(0)[0]
    c.nodes[0].drives = []  # let the node create it, not the helper
    c.extra_args += ["--drive", str(drive)]
    with c:
        assert (drive / "zoned.json").is_file()
        assert json.loads((drive / "zoned.json").read_text())["nr_zones"] == 8
        await put(session, c, "x", b"on a fresh drive")


async def test_sigterm_lets_an_in_flight_put_finish(tmp_path, session):
    size = 8 * MiB
    with NodeCluster(tmp_path, 1, drives_per_node=1) as c:
        started = asyncio.Event()

        async def slow_body():
            for i in range(size // MiB):
                yield bytes([i]) * MiB
                if i == 1:
                    started.set()
                    await asyncio.sleep(1.0)  # SIGTERM arrives while the body is half sent

        async def send():
            path = "/v1/records/inflight"
            headers = {**c.headers(0, "PUT", path), "X-ZG-Length": str(size)}
            async with session.put(c.urls[0] + path, data=slow_body(), headers=headers) as r:
                return r.status

        task = asyncio.create_task(send())
        await started.wait()
        for _ in range(200):  # until the node has the PUT in hand (this stats request is 1)
            _, _, body = await node_request(session, c, 0, "GET", "/v1/stats")
            if json.loads(body)["inflight"] >= 2:
                break
            await asyncio.sleep(0.01)
        c.nodes[0].proc.terminate()
        assert await task == 201
        assert await asyncio.to_thread(c.nodes[0].proc.wait, 30) == 0
        c.restart(0)
        status, _, body = await node_request(session, c, 0, "GET", "/v1/records/inflight")
        assert status == 200 and body == b"".join(bytes([i]) * MiB for i in range(8))
