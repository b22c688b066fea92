"""Checksums: the standard check values, incremental equals one-shot, S3's base64 forms,
multipart composite and full-object values equal what S3 (and botocore) compute, and the
threaded hashing gives the same digests as hashing inline."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import zlib

import pytest
from botocore.httpchecksum import (
    Crc32Checksum,
    CrtCrc32cChecksum,
    CrtCrc64NvmeChecksum,
    Sha1Checksum,
    Sha256Checksum,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.s3 import checksums
from gateway.s3.errors import S3Error

BOTOCORE = {"CRC32": Crc32Checksum, "CRC32C": CrtCrc32cChecksum,
            "CRC64NVME": CrtCrc64NvmeChecksum, "SHA1": Sha1Checksum, "SHA256": Sha256Checksum}


def test_check_values():
    # The catalogued check values: CRC of the ASCII string "123456789".
    def value(algo: str) -> int:
        h = checksums.new_hasher(algo)
        h.update(b"123456789")
        return int.from_bytes(h.digest(), "big")

    assert value("CRC32") == 0xCBF43926
    assert value("CRC32C") == 0xE3069283
    assert value("CRC64NVME") == 0xAE8B14860A799888
    assert checksums.checksum_b64("SHA256", b"") == base64.b64encode(
        hashlib.sha256(b"").digest()).decode()


@pytest.mark.parametrize("algo", checksums.ALGORITHMS)
def test_matches_botocore_and_incremental_equals_one_shot(algo):
    data = bytes(range(256)) * 1000 + b"tail"
    ref = BOTOCORE[algo]()
    ref.update(data)
    h = checksums.new_hasher(algo.lower())
    for i in range(0, len(data), 4097):
        h.update(data[i:i + 4097])
    assert h.b64() == ref.b64digest() == checksums.checksum_b64(algo, data)


def test_names():
    assert checksums.header_name("CRC64NVME") == "x-amz-checksum-crc64nvme"
    assert checksums.xml_name("CRC32C") == "ChecksumCRC32C"
    assert checksums.algorithm_from_header("X-Amz-Checksum-Sha1") == "SHA1"
    assert checksums.algorithm_from_header("x-amz-checksum-mode") is None
    assert checksums.algorithm_from_header("x-amz-checksum-type") is None
    with pytest.raises(S3Error) as e:
        checksums.normalize_algorithm("MD4")
    assert e.value.code == "InvalidRequest"


def test_verify_and_parse_errors():
    h = checksums.new_hasher("CRC32")
    h.update(b"abc")
    checksums.verify("CRC32", h.b64(), h)
    with pytest.raises(S3Error) as e:
        checksums.verify("CRC32", "AAAAAA==", h)
    assert (e.value.code, e.value.message) == (
        "BadDigest", "The CRC32 you specified did not match the calculated checksum.")
    for bad in ("", "AAAA", "AAAAAAAAAAA=", "not base64", "AAAAAA==="):
        with pytest.raises(S3Error) as e:
            checksums.parse_value("CRC32", bad)
        assert e.value.code == "InvalidRequest"
    with pytest.raises(S3Error) as e:
        checksums.parse_content_md5("abc")
    assert e.value.code == "InvalidDigest"
    assert checksums.parse_content_md5(base64.b64encode(b"x" * 16).decode()) == b"x" * 16


def _parts(data: bytes, sizes: list[int]) -> list[bytes]:
    out, i = [], 0
    for n in sizes:
        out.append(data[i:i + n])
        i += n
    out.append(data[i:])
    return out


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=20000), sizes=st.lists(st.integers(0, 5000), max_size=6),
       algo=st.sampled_from(sorted(checksums.CRC_ALGORITHMS)))
def test_full_object_crc_from_parts_equals_crc_of_the_whole(data, sizes, algo):
    parts = _parts(data, sizes)
    values = [(checksums.checksum_b64(algo, p), len(p)) for p in parts]
    assert checksums.full_object(algo, values) == checksums.checksum_b64(algo, data)


@pytest.mark.parametrize("algo", checksums.ALGORITHMS)
def test_composite_is_checksum_of_concatenated_part_checksums(algo):
    parts = [b"a" * 5000, b"b" * 3000, b"c"]
    values = [checksums.checksum_b64(algo, p) for p in parts]
    concatenated = b"".join(base64.b64decode(v) for v in values)
    assert checksums.composite(algo, values) == \
        checksums.checksum_b64(algo, concatenated) + "-3"


def test_composite_known_value_for_crc32():
    # Two parts "hello" and "world": CRC32 over their big-endian CRC32s.
    c1, c2 = zlib.crc32(b"hello"), zlib.crc32(b"world")
    expected = zlib.crc32(c1.to_bytes(4, "big") + c2.to_bytes(4, "big"))
    assert checksums.composite("CRC32", [
        base64.b64encode(c1.to_bytes(4, "big")).decode(),
        base64.b64encode(c2.to_bytes(4, "big")).decode(),
    ]) == base64.b64encode(expected.to_bytes(4, "big")).decode() + "-2"


def test_full_object_refuses_sha_algorithms():
    with pytest.raises(S3Error) as e:
        checksums.full_object("SHA256", [("x", 1)])
    assert e.value.code == "InvalidRequest"


def test_etags():
    md5s = [hashlib.md5(b"part1").digest(), hashlib.md5(b"part2").digest()]
    assert checksums.multipart_etag(md5s) == \
        '"' + hashlib.md5(md5s[0] + md5s[1]).hexdigest() + '-2"'
    assert checksums.etag_from_md5(hashlib.md5(b"").digest()) == \
        '"d41d8cd98f00b204e9800998ecf8427e"'


def test_threaded_hashers_equal_inline_hashing():
    chunks = [bytes([i]) * (300_000 if i % 2 else 1000) for i in range(12)]

    async def run():
        md5, crc = hashlib.md5(), checksums.new_hasher("CRC64NVME")
        th = checksums.ThreadedHashers([md5, crc])
        for c in chunks:
            await th.feed(c)
        await th.finish()
        return md5.digest(), crc.digest()

    md5_d, crc_d = asyncio.run(run())
    whole = b"".join(chunks)
    assert md5_d == hashlib.md5(whole).digest()
    assert crc_d == base64.b64decode(checksums.checksum_b64("CRC64NVME", whole))
