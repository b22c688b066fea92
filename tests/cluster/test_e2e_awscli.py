"""The aws cli (from PyPI, the venv's `aws`) against a real `zonegate dev` cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.devcluster import file_md5, make_file, start_cluster

pytestmark = pytest.mark.slow

AWS = str(Path(sys.executable).with_name("aws"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from start_cluster(tmp_path_factory, "awscli")


@pytest.fixture(scope="module")
def aws(cluster, tmp_path_factory):
    env = cluster.aws_env(tmp_path_factory.mktemp("awsconfig") / "config")

    def run(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        p = subprocess.run([AWS, "--endpoint-url", cluster.endpoint, *args], env=env,
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"aws {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    run("s3", "mb", "s3://cli")
    return run


def s3api(aws, *args: str) -> dict:
    out = aws("s3api", *args, "--output", "json").stdout
    return json.loads(out) if out.strip() else {}


def test_cp_200mb_up_and_down(aws, tmp_path):
    src = tmp_path / "big.bin"
    md5 = make_file(src, 200_000_000, seed=7)
    aws("s3", "cp", str(src), "s3://cli/big/big.bin")
    head = s3api(aws, "head-object", "--bucket", "cli", "--key", "big/big.bin")
    assert head["ContentLength"] == 200_000_000
    assert head["ETag"].endswith('-24"')  # 8 MiB parts
    dst = tmp_path / "back.bin"
    aws("s3", "cp", "s3://cli/big/big.bin", str(dst))
    assert file_md5(dst) == md5


def test_sync_ls_and_rm_recursive(aws, tmp_path):
    tree = tmp_path / "tree"
    files = {
        "a.txt": b"alpha\n",
        "sub/b.bin": bytes(range(256)) * 100,
        "sub/deeper/c.json": b'{"c": 1}',
        "sub/deeper/d e.txt": b"with a space",
        "medium.bin": None,  # 9 MB: multipart inside sync
    }
    for rel, body in files.items():
        p = tree / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if body is None:
            make_file(p, 9_000_000, seed=3)
        else:
            p.write_bytes(body)
    out = aws("s3", "sync", str(tree), "s3://cli/tree").stdout
    assert out.count("upload:") == len(files)
    # Nothing changed: nothing to do.
    assert "upload:" not in aws("s3", "sync", str(tree), "s3://cli/tree").stdout
    # One file changed: only it goes up.
    (tree / "a.txt").write_bytes(b"alpha, changed\n")
    out = aws("s3", "sync", str(tree), "s3://cli/tree").stdout
    assert out.count("upload:") == 1 and "a.txt" in out
    # ls: buckets, a "directory", recursive.
    assert "cli" in aws("s3", "ls").stdout
    top = aws("s3", "ls", "s3://cli/tree/").stdout
    assert "PRE sub/" in top and "a.txt" in top and "c.json" not in top
    rec = aws("s3", "ls", "--recursive", "s3://cli/tree/").stdout
    assert sum(1 for line in rec.splitlines() if line.strip()) == len(files)
    assert "tree/sub/deeper/d e.txt" in rec
    # Down again, byte for byte.
    back = tmp_path / "back"
    aws("s3", "sync", "s3://cli/tree", str(back))
    for rel in files:
        assert file_md5(back / rel) == file_md5(tree / rel), rel
    # rm --recursive takes everything under the prefix and nothing else.
    aws("s3", "cp", str(tree / "a.txt"), "s3://cli/keep/a.txt")
    out = aws("s3", "rm", "--recursive", "s3://cli/tree/").stdout
    assert out.count("delete:") == len(files)
    assert aws("s3", "ls", "--recursive", "s3://cli/tree/", check=False).stdout.strip() == ""
    assert "keep/a.txt" in aws("s3", "ls", "--recursive", "s3://cli/keep/").stdout


def test_s3api_calls(aws, tmp_path):
    body = tmp_path / "body.txt"
    body.write_bytes(b"s3api body\n")
    r = s3api(aws, "put-object", "--bucket", "cli", "--key", "api/obj.txt", "--body", str(body),
              "--content-type", "text/plain", "--metadata", "purpose=test")
    etag = r["ETag"]
    h = s3api(aws, "head-object", "--bucket", "cli", "--key", "api/obj.txt")
    assert (h["ETag"], h["ContentType"], h["Metadata"]) == (etag, "text/plain", {"purpose": "test"})
    listed = s3api(aws, "list-objects-v2", "--bucket", "cli", "--prefix", "api/")
    assert [o["Key"] for o in listed["Contents"]] == ["api/obj.txt"]
    out = tmp_path / "out.txt"
    s3api(aws, "get-object", "--bucket", "cli", "--key", "api/obj.txt", "--range", "bytes=0-4",
          str(out))
    assert out.read_bytes() == b"s3api"
    s3api(aws, "copy-object", "--bucket", "cli", "--key", "api/copy.txt",
          "--copy-source", "cli/api/obj.txt")
    up = s3api(aws, "create-multipart-upload", "--bucket", "cli", "--key", "api/mp")
    part = s3api(aws, "upload-part", "--bucket", "cli", "--key", "api/mp", "--part-number", "1",
                 "--upload-id", up["UploadId"], "--body", str(body))
    parts = s3api(aws, "list-parts", "--bucket", "cli", "--key", "api/mp",
                  "--upload-id", up["UploadId"])
    assert [p["ETag"] for p in parts["Parts"]] == [part["ETag"]]
    mp = tmp_path / "mp.json"
    mp.write_text(json.dumps({"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}))
    s3api(aws, "complete-multipart-upload", "--bucket", "cli", "--key", "api/mp",
          "--upload-id", up["UploadId"], "--multipart-upload", f"file://{mp}")
    assert s3api(aws, "head-object", "--bucket", "cli", "--key", "api/mp")["ETag"].endswith('-1"')
    s3api(aws, "delete-object", "--bucket", "cli", "--key", "api/copy.txt")
    failed = aws("s3api", "head-object", "--bucket", "cli", "--key", "api/copy.txt", check=False)
    assert failed.returncode != 0 and "404" in failed.stderr
    missing = aws("s3api", "get-object", "--bucket", "cli", "--key", "api/none",
                  str(tmp_path / "x"), check=False)
    assert missing.returncode != 0 and "NoSuchKey" in missing.stderr
