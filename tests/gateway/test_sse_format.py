"""The encrypted chunk format (gateway/store/encryption.py) and the master key file
(gateway/store/ssekeys.py), without a cluster: the stored bytes of sealed parts are kept in
memory and read back through the same plan a GET uses.

Hypothesis: any object (any part sizes) and any byte range decrypt to exactly the plaintext,
reading only the stored chunks the range touches; a flipped bit in a chunk read, a chunk cut
off, or the wrong data key fails to open."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.s3.errors import S3Error
from gateway.store import encryption as enc
from gateway.store import ssekeys
from gateway.store.encryption import CHUNK, SEALED, TAG, DecryptError, stored_size


class MemoryStorage:
    """Storage.read over stored parts kept as bytes (layout {"part_uid", "data"}); records
    the stored ranges asked for."""

    def __init__(self) -> None:
        self.reads: list[tuple[int, int]] = []

    async def read(self, parts: list[dict[str, Any]], offset: int, length: int
                   ) -> AsyncIterator[bytes]:
        self.reads.append((offset, length))
        blob = b"".join(p["layout"]["data"] for p in parts)
        assert sum(int(p["size"]) for p in parts) == len(blob)
        view = blob[offset:offset + length]
        for i in range(0, len(view), 100_000):  # pieces that do not line up with chunks
            yield view[i:i + 100_000]


async def _gather(it: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in it])


async def _pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


def make_object(key: bytes, sizes: list[int], piece: int = 70_000
                ) -> tuple[bytes, list[dict[str, Any]]]:
    plain, parts = [], []
    for n, size in enumerate(sizes, 1):
        data = os.urandom(size)
        uid = f"{os.urandom(8).hex()}.p{n}"
        sealed = asyncio.run(_gather(enc.seal(_pieces(data, piece), enc.part_aead(key, uid), n)))
        assert len(sealed) == stored_size(size)
        plain.append(data)
        parts.append({"number": n, "size": size, "layout": {"part_uid": uid, "data": sealed}})
    return b"".join(plain), parts


def read(parts: list[dict[str, Any]], key: bytes, a: int, n: int,
         storage: MemoryStorage | None = None) -> bytes:
    return asyncio.run(_gather(enc.read_plain(storage or MemoryStorage(), parts, key, a, n)))


sizes = st.lists(st.integers(0, 3 * CHUNK + 17), min_size=1, max_size=4).filter(
    lambda s: sum(s) > 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=sizes, data=st.data())
def test_any_range_of_any_object_decrypts_to_its_bytes(sizes, data):
    key = os.urandom(32)
    plain, parts = make_object(key, sizes)
    a = data.draw(st.integers(0, len(plain) - 1))
    n = data.draw(st.integers(1, len(plain) - a))
    storage = MemoryStorage()
    assert read(parts, key, a, n, storage) == plain[a:a + n]
    # only the chunks the range touches are fetched: at most one extra chunk per end and
    # per part boundary crossed
    (off, length), = storage.reads
    crossed = sum(1 for p in parts) - 1
    assert length <= n + TAG * (n // CHUNK + 2 + crossed) + 2 * CHUNK


@settings(max_examples=40, deadline=None)
@given(sizes=sizes, data=st.data())
def test_a_flipped_bit_in_a_chunk_read_fails(sizes, data):
    key = os.urandom(32)
    plain, parts = make_object(key, sizes)
    i = data.draw(st.sampled_from([i for i, p in enumerate(parts) if p["size"]]))
    stored = bytearray(parts[i]["layout"]["data"])
    bit = data.draw(st.integers(0, len(stored) * 8 - 1))
    stored[bit // 8] ^= 1 << (bit % 8)
    parts[i]["layout"]["data"] = bytes(stored)
    with pytest.raises(DecryptError):
        read(parts, key, 0, len(plain))


def test_truncation_reordering_and_wrong_key_fail():
    key = os.urandom(32)
    plain, parts = make_object(key, [2 * CHUNK + 5])
    assert read(parts, key, 0, len(plain)) == plain
    with pytest.raises(DecryptError):
        read(parts, os.urandom(32), 0, len(plain))
    good = parts[0]["layout"]["data"]
    # the part cut after its second whole chunk: that chunk is not the last one sealed
    parts[0]["layout"]["data"] = good[:2 * SEALED]
    parts[0]["size"] = 2 * CHUNK
    with pytest.raises(DecryptError):
        read(parts, key, 0, 2 * CHUNK)
    # two chunks swapped
    parts[0]["layout"]["data"] = good[SEALED:2 * SEALED] + good[:SEALED] + good[2 * SEALED:]
    parts[0]["size"] = len(plain)
    with pytest.raises(DecryptError):
        read(parts, key, 0, CHUNK)
    # a part moved to another part number (same uid and bytes) does not open there
    parts[0]["layout"]["data"] = good
    parts[0]["number"] = 2
    with pytest.raises(DecryptError):
        read(parts, key, 0, len(plain))


def test_a_ranged_read_of_a_large_object_reads_about_the_range():
    key = os.urandom(32)
    plain, parts = make_object(key, [64 * CHUNK + 3], piece=1 << 20)
    storage = MemoryStorage()
    a = 1_000_003
    assert read(parts, key, a, 1 << 20, storage) == plain[a:a + (1 << 20)]
    (_, length), = storage.reads
    assert length <= (1 << 20) + 2 * SEALED


def test_master_key_file(tmp_path):
    p = tmp_path / "keys"
    p.write_text("# comment\n\n" + ssekeys.new_key_line("old") + ssekeys.new_key_line("new"))
    mk = ssekeys.MasterKeys.load(p)
    assert mk.newest == "new" and set(mk.keys) == {"old", "new"}
    assert "new" in repr(mk) and base64.b64encode(mk.keys["new"]).decode() not in repr(mk)
    data_key = ssekeys.new_data_key()
    env = ssekeys.seal_key("AES256", data_key, master=mk)
    assert env.key_id == "new"
    again = ssekeys.Envelope.from_text(env.to_text())
    assert ssekeys.open_key(again, master=mk) == data_key
    # rotated out: the object's key is gone
    with pytest.raises(S3Error) as e:
        ssekeys.open_key(again, master=ssekeys.MasterKeys({"old": mk.keys["old"]}, "old"))
    assert e.value.code == "InternalError"
    for bad in ("k1 notbase64!\n", "k1 " + base64.b64encode(b"short").decode() + "\n",
                "bad id " + base64.b64encode(bytes(32)).decode() + "\n",
                ssekeys.new_key_line("a") * 2, "# nothing\n"):
        p.write_text(bad)
        with pytest.raises(ssekeys.MasterKeyError):
            ssekeys.MasterKeys.load(p)
    with pytest.raises(ssekeys.MasterKeyError):
        ssekeys.MasterKeys.load(tmp_path / "missing")
    made = tmp_path / "sub" / "made.keys"
    ssekeys.create_key_file(made)
    assert made.stat().st_mode & 0o777 == 0o600 and ssekeys.MasterKeys.load(made).newest == "k1"


def test_customer_key_envelope():
    ck, other = os.urandom(32), os.urandom(32)
    data_key = ssekeys.new_data_key()
    env = ssekeys.Envelope.from_text(ssekeys.seal_key("SSE-C", data_key,
                                                      customer_key=ck).to_text())
    assert ck not in env.to_text().encode() and base64.b64encode(ck).decode() not in env.to_text()
    assert ssekeys.open_key(env, customer_key=ck) == data_key
    with pytest.raises(S3Error) as e:
        ssekeys.open_key(env, customer_key=other)
    assert e.value.code == "AccessDenied"
    # the ETag of SSE-C content is stable per object and not the MD5
    md5 = "0123456789abcdef0123456789abcdef"
    assert ssekeys.opaque_etag(data_key, md5) == ssekeys.opaque_etag(data_key, md5) != md5


def test_relative_key_file_and_serve_refuses_a_bad_one(tmp_path):
    import subprocess
    import sys

    from erasure.config import write_config
    (tmp_path / "keys").write_text(ssekeys.new_key_line("r1"))
    st = ssekeys.SseSettings.from_gateway({"sse_master_key_file": "keys"}, str(tmp_path))
    assert st.master is not None and st.master.newest == "r1" and not st.allow_http
    assert ssekeys.SseSettings.from_gateway({"sse_c_allow_http": "true"}).allow_http
    cfg = tmp_path / "zonegate.toml"
    write_config(cfg, {"secret": "s" * 32, "erasure": {"k": 1, "m": 1},
                       "gateway": {"listen": "127.0.0.1:1", "metadata": str(tmp_path / "m.db"),
                                   "sse_master_key_file": "missing.keys"},
                       "nodes": [{"id": "n1", "url": "http://127.0.0.1:2", "drives": ["d"]},
                                 {"id": "n2", "url": "http://127.0.0.1:3", "drives": ["d"]}]})
    r = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "master key file" in r.stderr and str(tmp_path / "missing.keys") in r.stderr
    assert "Traceback" not in r.stderr
