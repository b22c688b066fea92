"""S3 object checksums: CRC32, CRC32C, CRC64NVME, SHA1, SHA256, and MD5 for ETags.

Values travel as S3 sends them: base64 of the big-endian digest (`x-amz-checksum-crc32:
NSRBwg==`). This module gives incremental hashers, parsing and validation of client-supplied
values, the two multipart forms S3 defines, and a helper that runs hashing in a worker thread.

- `new_hasher(algo)`: `.update(bytes)`, `.digest() -> bytes`, `.b64() -> str`.
- `parse_value(algo, b64)`: validates a value from a header or trailer (InvalidRequest).
- `verify(algo, expected_b64, hasher)`: BadDigest on mismatch, with S3's message.
- `composite(algo, part_values)`: checksum of the concatenated part digests + "-N"
  (COMPOSITE type; any algorithm).
- `full_object(algo, [(part_value, part_length), ...])`: CRC of the whole object from the
  parts' CRCs (FULL_OBJECT type; CRC algorithms only), via awscrt's combine functions.
- `ThreadedHashers`: feed chunks to several hashers; big chunks are hashed in a worker thread
  (hashlib and ISA-L release the GIL) while the event loop goes on with the next stage.

CRC32 uses ISA-L's (python-isal: 0.013 CPU-s/GiB here, against zlib's 0.20 and awscrt's
0.31); CRC32C and CRC64NVME use awscrt, which also provides the CRC combine functions, so none
is hand-written.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor
from typing import Protocol

from awscrt import checksums as _crt
from isal import isal_zlib

from gateway.s3.errors import S3Error

ALGORITHMS: tuple[str, ...] = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")
CRC_ALGORITHMS: frozenset[str] = frozenset({"CRC32", "CRC32C", "CRC64NVME"})
_DIGEST_SIZE = {"CRC32": 4, "CRC32C": 4, "CRC64NVME": 8, "SHA1": 20, "SHA256": 32}
_CRC_FUNCS = {"CRC32": isal_zlib.crc32, "CRC32C": _crt.crc32c, "CRC64NVME": _crt.crc64nvme}
_CRC_COMBINE = {
    "CRC32": _crt.combine_crc32,
    "CRC32C": _crt.combine_crc32c,
    "CRC64NVME": _crt.combine_crc64nvme,
}
# Chunks at least this big are hashed in a worker thread: below it, the hand-off costs more
# than the hashing.
THREAD_THRESHOLD = 256 * 1024


class Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...


def normalize_algorithm(name: str) -> str:
    """'crc32c' / 'CRC32C' -> 'CRC32C'; an unknown name -> S3Error InvalidRequest."""
    algo = name.strip().upper()
    if algo not in _DIGEST_SIZE:
        raise S3Error(
            "InvalidRequest",
            f"Value for x-amz-checksum-algorithm header is invalid: {name!r}",
        )
    return algo


def header_name(algo: str) -> str:
    """'CRC32' -> 'x-amz-checksum-crc32' (the header, trailer and XML element use this)."""
    return "x-amz-checksum-" + algo.lower()


def xml_name(algo: str) -> str:
    """'CRC64NVME' -> 'ChecksumCRC64NVME', the element name in S3's XML."""
    return "Checksum" + algo


def algorithm_from_header(name: str) -> str | None:
    """'x-amz-checksum-crc32' -> 'CRC32'; None for other headers (and x-amz-checksum-mode etc.)."""
    lname = name.lower()
    if not lname.startswith("x-amz-checksum-"):
        return None
    algo = lname[len("x-amz-checksum-"):].upper()
    return algo if algo in _DIGEST_SIZE else None


class CrcHasher:
    """Incremental CRC32 / CRC32C / CRC64NVME with the hashlib-like surface."""

    __slots__ = ("algorithm", "_func", "value")

    def __init__(self, algorithm: str, value: int = 0) -> None:
        self.algorithm = algorithm
        self._func = _CRC_FUNCS[algorithm]
        self.value = value

    def update(self, data: bytes, /) -> None:
        self.value = self._func(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(_DIGEST_SIZE[self.algorithm], "big")

    def b64(self) -> str:
        return base64.b64encode(self.digest()).decode("ascii")


class ShaHasher:
    """hashlib SHA1/SHA256 with a `.b64()` like the CRC hashers."""

    __slots__ = ("algorithm", "_h")

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self._h = hashlib.sha1() if algorithm == "SHA1" else hashlib.sha256()

    def update(self, data: bytes, /) -> None:
        self._h.update(data)

    def digest(self) -> bytes:
        return self._h.digest()

    def b64(self) -> str:
        return base64.b64encode(self._h.digest()).decode("ascii")


def new_hasher(algo: str) -> CrcHasher | ShaHasher:
    """A fresh incremental hasher for one of `ALGORITHMS` (name case-insensitive)."""
    algo = normalize_algorithm(algo)
    return CrcHasher(algo) if algo in CRC_ALGORITHMS else ShaHasher(algo)


def checksum_b64(algo: str, data: bytes) -> str:
    """One-shot base64 checksum of `data`."""
    h = new_hasher(algo)
    h.update(data)
    return h.b64()


def parse_value(algo: str, value: str) -> bytes:
    """Decode a client-supplied base64 checksum; malformed -> S3Error InvalidRequest."""
    algo = normalize_algorithm(algo)
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != _DIGEST_SIZE[algo]:
        raise S3Error(
            "InvalidRequest", f"Value for {header_name(algo)} header is invalid."
        )
    return raw


def verify(algo: str, expected_b64: str, hasher: Hasher) -> None:
    """Compare a client's value with the computed one; mismatch -> BadDigest as S3 words it."""
    algo = normalize_algorithm(algo)
    expected = parse_value(algo, expected_b64)
    if expected != hasher.digest():
        raise S3Error(
            "BadDigest", f"The {algo} you specified did not match the calculated checksum."
        )


def parse_content_md5(value: str) -> bytes:
    """Decode a Content-MD5 header; not base64 of 16 bytes -> S3Error InvalidDigest."""
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16:
        raise S3Error("InvalidDigest")
    return raw


# ---- multipart ---------------------------------------------------------------------------


def composite(algo: str, part_values: Sequence[str]) -> str:
    """S3's COMPOSITE multipart checksum: checksum of the concatenated binary part checksums,
    base64, then "-N" with N the number of parts."""
    algo = normalize_algorithm(algo)
    h = new_hasher(algo)
    for value in part_values:
        h.update(parse_value(algo, value))
    return f"{h.b64()}-{len(part_values)}"


def full_object(algo: str, parts: Iterable[tuple[str, int]]) -> str:
    """S3's FULL_OBJECT multipart checksum: the CRC of the whole object computed from each
    part's CRC (base64) and length, without reading the data again. CRC algorithms only."""
    algo = normalize_algorithm(algo)
    if algo not in CRC_ALGORITHMS:
        raise S3Error(
            "InvalidRequest",
            f"The FULL_OBJECT checksum type is not supported for the {algo} algorithm.",
        )
    combine = _CRC_COMBINE[algo]
    crc = 0
    for value, length in parts:
        part_crc = int.from_bytes(parse_value(algo, value), "big")
        crc = combine(crc, part_crc, length)
    return base64.b64encode(crc.to_bytes(_DIGEST_SIZE[algo], "big")).decode("ascii")


def multipart_etag(part_md5s: Sequence[bytes]) -> str:
    """The multipart ETag (quoted): MD5 of the concatenated binary part MD5s, then "-N"."""
    h = hashlib.md5(b"".join(part_md5s))
    return f'"{h.hexdigest()}-{len(part_md5s)}"'


def etag_from_md5(md5_digest: bytes) -> str:
    """A single-PUT ETag: the hex MD5 of the body, in quotes."""
    return f'"{md5_digest.hex()}"'


# ---- hashing beside the event loop -------------------------------------------------------


def _update_all(hashers: Sequence[Hasher], chunks: Sequence[bytes]) -> None:
    for h in hashers:
        many = getattr(h, "update_many", None)
        if many is not None:
            many(chunks)  # md5lanes.LaneMd5: the batch as one update, hashed beside others
        else:
            for c in chunks:
                h.update(c)


class ThreadedHashers:
    """Feeds chunks to several hashers, hashing in a worker thread beside the event loop.

    Small chunks (a web server hands out 64 KiB or less) are batched by reference, without
    copying, until `threshold` bytes are waiting; the batch is then hashed in a thread while
    the caller goes on (the hashers release the GIL). One batch is in flight at a time,
    so order is kept. `await feed(chunk)` returns once the chunk is queued; the caller must not
    mutate it afterwards (pass `bytes`). `await finish()` hashes what is left; read the
    hashers after it. Memory held: at most two batches of about `threshold` bytes.
    """

    def __init__(
        self,
        hashers: Sequence[Hasher],
        *,
        threshold: int = THREAD_THRESHOLD,
        executor: Executor | None = None,
    ) -> None:
        self.hashers = list(hashers)
        self._threshold = threshold
        self._executor = executor
        self._batch: list[bytes] = []
        self._batched = 0
        self._pending: asyncio.Future[None] | None = None

    async def _flush(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            await pending
        if not self._batch:
            return
        batch, self._batch, self._batched = self._batch, [], 0
        loop = asyncio.get_running_loop()
        self._pending = loop.run_in_executor(self._executor, _update_all, self.hashers, batch)

    async def feed(self, chunk: bytes) -> None:
        if not self.hashers or not chunk:
            return
        self._batch.append(chunk)
        self._batched += len(chunk)
        if self._batched >= self._threshold:
            await self._flush()

    async def finish(self) -> None:
        if self._batched and self._batched < 64 * 1024:
            if self._pending is not None:
                pending, self._pending = self._pending, None
                await pending
            batch, self._batch, self._batched = self._batch, [], 0
            _update_all(self.hashers, batch)  # too little to be worth a thread hand-off
            return
        await self._flush()
        if self._pending is not None:
            pending, self._pending = self._pending, None
            await pending

    def cancel(self) -> None:
        """Drop queued work (error paths); the hashers' state is then undefined."""
        self._pending = None
        self._batch, self._batched = [], 0
