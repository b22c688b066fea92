"""A drive that starts failing I/O (issue 12): no acknowledged data lost, no 500 to S3 clients.

The fault is the kernel's, not a hook in the code: one node's emulated drive lives on an ext4
filesystem on a loop device, and the test shuts that filesystem down (FS_IOC_SHUTDOWN, what
`xfs_io -x -c shutdown` does), after which every read, write and fsync on it fails with EIO,
page cache or not. This machine has loop devices but no device-mapper (so no dm-error /
dm-flakey) and no FUSE library; a shut-down filesystem is a drive that died under load.
Needs root (losetup, mount); skipped otherwise.

Then: every object written before still reads back byte-exact (degraded reads), new writes
succeed at full width (the node answers 507 drive_failed, the gateway hands the fragment to
another node), the node says the drive failed (`/v1/stats`, `/health/ready`, metrics) and keeps
serving, and `zonegate repair` rebuilds what the drive held: with two more nodes stopped every
object still reads.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.support.gwcluster import Gateway, wait_for
from tests.support.nodeproc import TEST_GEOMETRY
from zonestore.emulated import create_emulated_drive

pytestmark = [pytest.mark.timeout(300)]
FS_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
SHUTDOWN_NOLOGFLUSH = 2
VICTIM = 3
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@contextlib.contextmanager
def loop_ext4(root: Path, size: str = "3G") -> Iterator[Path]:
    """A fresh ext4 filesystem on a loop device, mounted under root (skips the test when the
    machine does not allow it)."""
    if os.geteuid() != 0 or not all(map(shutil.which, ("losetup", "mkfs.ext4", "mount"))):
        pytest.skip("needs root with losetup, mkfs.ext4 and mount")
    image, mnt = root / "drive.img", root / "mnt"
    mnt.mkdir(parents=True)
    _run("truncate", "-s", size, str(image))
    try:
        dev = _run("losetup", "-f", "--show", str(image))
    except subprocess.CalledProcessError as e:
        pytest.skip(f"no loop device here: {e.stderr.strip()}")
    try:
        _run("mkfs.ext4", "-q", "-F", dev)
        try:
            _run("mount", dev, str(mnt))
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot mount here: {e.stderr.strip()}")
        try:
            yield mnt
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def shut_down(mnt: Path) -> None:
    """Every later I/O on the filesystem fails with EIO (the drive is dead)."""
    fd = os.open(mnt, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", SHUTDOWN_NOLOGFLUSH))
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    root = tmp_path_factory.mktemp("eio")
    with loop_ext4(root / "loop") as mnt:
        # seven nodes: a 4+2 part has a node left to take a rebuilt fragment
        g = Gateway(root / "cluster", nodes=7)
        drive = g.nodes.drive_paths(VICTIM)[0]
        create_emulated_drive(mnt / "d0", TEST_GEOMETRY)
        drive.parent.mkdir(parents=True)
        drive.symlink_to(mnt / "d0")  # NodeCluster leaves an existing drive as it is
        g.start()
        try:
            yield g, mnt
        finally:
            g.stop()


def node_get(g: Gateway, i: int, path: str, query: dict[str, str] | None = None
             ) -> tuple[int, bytes]:
    url = g.nodes.urls[i] + path + (f"?{urlencode(query)}" if query else "")
    req = urllib.request.Request(url, headers=g.nodes.headers(i, "GET", path, query))
    try:
        with _NO_PROXY.open(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def repair(g: Gateway) -> tuple[int, str]:
    proc = subprocess.run([str(Path(sys.executable).parent / "zonegate"), "repair", "--config",
                           str(g.config_path)], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "COLUMNS": "200"})
    return proc.returncode, proc.stdout + proc.stderr


def test_failing_drive_loses_nothing_and_is_rebuilt(cluster) -> None:
    g, mnt = cluster
    s3 = g.client()
    s3.create_bucket(Bucket="eio")
    sizes = [0, 1, 70_000, 1_000_000, 3 * 1024 * 1024 + 17] * 4
    objects = {f"before/{i:02d}": os.urandom(n) for i, n in enumerate(sizes)}
    for key, data in objects.items():
        s3.put_object(Bucket="eio", Key=key, Body=data)
    status, body = node_get(g, VICTIM, "/v1/records", {"prefix": ""})
    assert status == 200 and len(json.loads(body)["records"]) > 10  # it holds fragments

    shut_down(mnt)

    # every acknowledged object reads back, and new writes succeed (no 5xx: boto3 retries
    # nothing here, any error raises)
    for key, data in objects.items():
        got = s3.get_object(Bucket="eio", Key=key)["Body"].read()
        assert hashlib.md5(got).digest() == hashlib.md5(data).digest(), key
        if len(data) > 10:  # a small range is read straight from a data fragment
            assert s3.get_object(Bucket="eio", Key=key, Range="bytes=1-9")["Body"].read() == \
                data[1:10]
    after = {f"after/{i:02d}": os.urandom(n) for i, n in enumerate(sizes)}
    for key, data in after.items():
        s3.put_object(Bucket="eio", Key=key, Body=data)
    objects.update(after)

    # the node is alive and says which drive failed
    assert g.nodes.nodes[VICTIM].running
    status, body = node_get(g, VICTIM, "/v1/stats")
    drive = json.loads(body)["drives"][0]
    assert status == 200 and drive["failed"] is True and "Errno 5" in drive["error"], drive
    assert drive["writable_bytes"] == 0
    status, body = node_get(g, VICTIM, "/health/ready")
    ready = json.loads(body)
    assert (status, ready["status"], ready["failed_drives"], ready["writable_bytes"]) == (
        200, "degraded", [0], 0)
    status, body = node_get(g, VICTIM, "/metrics")
    assert status == 200 and 'zonegate_node_drive_failed{drive="0"} 1.0' in body.decode()
    status, body = node_get(g, VICTIM, "/v1/records", {"prefix": ""})
    assert status == 200 and json.loads(body)["records"] == []  # its records are gone
    for i in range(len(g.nodes.nodes)):
        if i != VICTIM:  # the new objects went to the other nodes at full width
            assert node_get(g, i, "/health/ready")[0] == 200

    # repair rebuilds what the drive held, elsewhere
    code, out = repair(g)
    assert code == 0, out
    assert "0 failed, 0 unrecoverable" in out, out

    # so that with two more nodes gone (three fragments of each part out of reach without
    # the rebuild) everything still reads
    others = [i for i in range(len(g.nodes.nodes)) if i != VICTIM][:2]
    for i in others:
        g.nodes.kill(i)
    try:
        assert wait_for(lambda: all(node_get_safe(g, i) is None for i in others))
        for key, data in objects.items():
            got = s3.get_object(Bucket="eio", Key=key)["Body"].read()
            assert hashlib.md5(got).digest() == hashlib.md5(data).digest(), key
    finally:
        for i in others:
            g.nodes.restart(i)
    assert "Traceback" not in g.log_tail(400)


def node_get_safe(g: Gateway, i: int) -> int | None:
    try:
        return node_get(g, i, "/health/live")[0]
    except OSError:
        return None
