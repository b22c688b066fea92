"""s3fs (fsspec), as training data loaders use it, against a real `zonegate dev` cluster,
over HTTP and HTTPS (where aiobotocore sends aws-chunked bodies with trailers)."""

from __future__ import annotations

import hashlib
import random
import struct

import pytest

from tests.support.devcluster import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    MiB,
    file_md5,
    make_file,
    start_cluster,
)

pytestmark = pytest.mark.slow

s3fs = pytest.importorskip("s3fs")


@pytest.fixture(scope="module", params=["http", "https"])
def cluster(request, tmp_path_factory):
    yield from start_cluster(tmp_path_factory, f"s3fs-{request.param}",
                             tls=request.param == "https")


@pytest.fixture(scope="module")
def fs(cluster):
    fs = s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY, use_listings_cache=False,
                           skip_instance_cache=True,
                           client_kwargs={"endpoint_url": cluster.endpoint,
                                          "region_name": REGION, "verify": cluster.verify})
    fs.mkdir("data")
    return fs


def test_ls_with_directories_and_info(fs):
    for path in ("data/ls/a.txt", "data/ls/dir1/b.txt", "data/ls/dir1/sub/c.txt",
                 "data/ls/dir2/d.txt"):
        fs.pipe(path, path.encode())
    assert sorted(fs.ls("data/ls", detail=False)) == [
        "data/ls/a.txt", "data/ls/dir1", "data/ls/dir2"]
    detail = {e["name"]: e for e in fs.ls("data/ls", detail=True)}
    assert detail["data/ls/dir1"]["type"] == "directory"
    assert detail["data/ls/a.txt"]["type"] == "file"
    assert detail["data/ls/a.txt"]["size"] == len(b"data/ls/a.txt")
    assert fs.isdir("data/ls/dir1") and not fs.isdir("data/ls/a.txt")
    assert fs.isfile("data/ls/dir1/b.txt")
    assert fs.info("data/ls/dir1/sub/c.txt")["size"] == len("data/ls/dir1/sub/c.txt")
    assert not fs.exists("data/ls/nothing")
    assert "data" in [p.rstrip("/") for p in fs.ls("", detail=False)]


def test_put_get_and_cat(fs, tmp_path):
    src = tmp_path / "up.bin"
    md5 = make_file(src, 12 * MiB + 5, seed=5)
    fs.put(str(src), "data/pg/up.bin")
    assert fs.size("data/pg/up.bin") == 12 * MiB + 5
    dst = tmp_path / "down.bin"
    fs.get("data/pg/up.bin", str(dst))
    assert file_md5(dst) == md5
    # A directory tree, recursively.
    tree = tmp_path / "tree"
    (tree / "x" / "y").mkdir(parents=True)
    (tree / "top.txt").write_bytes(b"top")
    (tree / "x" / "y" / "leaf.txt").write_bytes(b"leaf")
    fs.put(str(tree), "data/pg/tree", recursive=True)
    assert fs.cat("data/pg/tree/x/y/leaf.txt") == b"leaf"
    back = tmp_path / "back"
    fs.get("data/pg/tree", str(back), recursive=True)
    assert (back / "x" / "y" / "leaf.txt").read_bytes() == b"leaf"
    assert fs.cat_file("data/pg/up.bin", start=MiB, end=MiB + 16) == \
        src.read_bytes()[MiB:MiB + 16]
    fs.rm("data/pg/tree", recursive=True)
    assert not fs.exists("data/pg/tree/top.txt")


def test_open_with_ranged_reads(fs):
    body = hashlib.shake_256(b"ranged").digest(7 * MiB + 333)
    with fs.open("data/ranged.bin", "wb") as f:
        for i in range(0, len(body), MiB):
            f.write(body[i:i + MiB])
    with fs.open("data/ranged.bin", "rb", block_size=512 * 1024) as f:
        assert f.size == len(body)
        rnd = random.Random(4)
        for _ in range(25):
            off = rnd.randrange(len(body))
            n = rnd.randrange(1, 300_000)
            f.seek(off)
            assert f.read(n) == body[off:off + n]
        f.seek(-10, 2)
        assert f.read() == body[-10:]


def test_find_and_walk(fs):
    paths = [f"data/walk/{d}/part-{i:03d}.bin" for d in ("train", "val") for i in range(3)]
    paths += ["data/walk/README"]
    for p in paths:
        fs.pipe(p, b"w")
    assert sorted(fs.find("data/walk")) == sorted(paths)
    assert sorted(fs.glob("data/walk/train/*.bin")) == sorted(p for p in paths if "train" in p)
    walked = {root: (sorted(dirs), sorted(files)) for root, dirs, files in fs.walk("data/walk")}
    assert walked["data/walk"] == (["train", "val"], ["README"])
    assert walked["data/walk/train"] == ([], ["part-000.bin", "part-001.bin", "part-002.bin"])
    assert fs.du("data/walk") == len(paths)


class ShardDataset:
    """PyTorch-style map dataset over fixed-size records packed in shard objects: each item is
    one ranged read, as a training loader with a random sampler does it."""

    def __init__(self, fs, prefix: str, record_size: int) -> None:
        self.fs = fs
        self.record_size = record_size
        self.shards = sorted(fs.find(prefix))
        self.index = []
        for shard in self.shards:
            n = fs.size(shard) // record_size
            self.index += [(shard, i) for i in range(n)]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, idx: int) -> bytes:
        shard, i = self.index[idx]
        start = i * self.record_size
        return self.fs.cat_file(shard, start=start, end=start + self.record_size)


def test_pytorch_style_loader_reads_shards_by_range(fs):
    record = 4096
    for s in range(4):
        payload = b"".join(struct.pack(">II", s, r) + bytes([r % 251]) * (record - 8)
                           for r in range(300))
        fs.pipe(f"data/shards/shard-{s:05d}.bin", payload)
    ds = ShardDataset(fs, "data/shards", record)
    assert len(ds) == 1200
    order = list(range(len(ds)))
    random.Random(0).shuffle(order)
    for idx in order[:200]:  # an epoch's first batches
        item = ds[idx]
        shard, rec = struct.unpack(">II", item[:8])
        assert (f"data/shards/shard-{shard:05d}.bin", rec) == ds.index[idx]
        assert item[8:] == bytes([rec % 251]) * (record - 8)
