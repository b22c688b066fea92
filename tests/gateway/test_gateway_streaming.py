"""Bounded memory: a large single PUT and GET stream through the gateway without growing its
resident memory by anything near the object's size."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.support.gwcluster import Gateway

pytestmark = pytest.mark.timeout(300)
MiB = 1024 * 1024
SIZE = 160 * MiB


def vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


class Pattern:
    """A file-like body of SIZE pseudo-random bytes made on the fly (the test holds no copy)."""

    def __init__(self, size: int) -> None:
        self.size, self.pos = size, 0
        self.block = hashlib.sha256(b"seed").digest() * (MiB // 32)
        self.md5 = hashlib.md5()

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        out = bytearray()
        while len(out) < n:
            off = (self.pos + len(out)) % len(self.block)
            out += self.block[off:off + n - len(out)]
        self.pos += n
        self.md5.update(out)
        return bytes(out)

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = {0: pos, 1: self.pos + pos, 2: self.size + pos}[whence]
        if self.pos == 0:
            self.md5 = hashlib.md5()
        return self.pos

    def tell(self) -> int:
        return self.pos


def test_big_single_put_and_get_stream_in_bounded_memory(tmp_path):
    g = Gateway(tmp_path, workers=1)
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="stream")
        s3.put_object(Bucket="stream", Key="warm", Body=b"w" * MiB)
        s3.get_object(Bucket="stream", Key="warm")["Body"].read()
        before = vm_hwm_kib(g.proc.pid)
        body = Pattern(SIZE)
        etag = s3.put_object(Bucket="stream", Key="big", Body=body, ContentLength=SIZE)["ETag"]
        assert etag == f'"{body.md5.hexdigest()}"'
        got = hashlib.md5()
        n = 0
        for chunk in s3.get_object(Bucket="stream", Key="big")["Body"].iter_chunks(MiB):
            got.update(chunk)
            n += len(chunk)
        assert n == SIZE and got.hexdigest() == body.md5.hexdigest()
        grown_mib = (vm_hwm_kib(g.proc.pid) - before) / 1024
        assert grown_mib < 64, f"gateway peak RSS grew by {grown_mib:.0f} MiB for a 160 MiB object"
    finally:
        g.stop()

