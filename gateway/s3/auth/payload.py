"""The verified request payload: decoding, hashing and integrity checks while streaming.

`RequestBody(auth, headers, raw_chunks)` is an async iterator of the payload bytes exactly as
the object should store them. It undoes aws-chunked framing (STREAMING-* modes) and, while the
bytes flow, computes MD5 (for the ETag), the SHA-256 the signature committed to, and the
requested `x-amz-checksum-*`. When the body ends it checks, in this order: length
(IncompleteBody), x-amz-content-sha256 (XAmzContentSHA256Mismatch), Content-MD5 (BadDigest),
the checksum from the header or trailer (BadDigest). Any failure is raised from the iteration
itself, so a writer that commits only after a clean end stores nothing on bad input. Malformed
headers (InvalidDigest, InvalidRequest, MissingContentLength) are raised by the constructor,
before any byte is read.

    body = RequestBody(auth, request.headers, request.stream())
    async for chunk in body: ...           # hand to the erasure writer
    body.etag, body.size, body.checksum    # valid after the end
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable, AsyncIterator
from concurrent.futures import Executor

from gateway.s3 import checksums
from gateway.s3.auth.chunked import AwsChunkedDecoder
from gateway.s3.auth.common import AuthResult, Headers, first, lower_headers
from gateway.s3.errors import S3Error
from gateway.s3.md5lanes import new_md5
from gateway.s3.numbers import parse_uint, shown


def _parse_length(value: str, name: str) -> int:
    # `[0-9]+` (isdigit() takes "²"); past any object size it saturates, so that the size
    # check answers EntityTooLarge for a length of 5,000 digits.
    try:
        return parse_uint(value.strip(), saturate=True)
    except ValueError:
        raise S3Error("InvalidArgument", f"{name} must be a non-negative integer",
                      ArgumentName=name, ArgumentValue=shown(value)) from None


def stored_content_encoding(headers: Headers) -> str | None:
    """Content-Encoding to store: the header minus `aws-chunked` (a transfer detail);
    None when nothing is left."""
    value = first(lower_headers(headers), "content-encoding")
    if value is None:
        return None
    kept = [p.strip() for p in value.split(",") if p.strip() and p.strip().lower() != "aws-chunked"]
    return ", ".join(kept) or None


class RequestBody:
    """Decoded, verified request payload. Iterate once.

    auth: the request's AuthResult (decides the payload mode).
    headers: the request headers.
    raw: the raw body chunks as received.
    md5: compute MD5 for the ETag (`md5_digest`, `etag`).
    checksum_algorithm: compute this checksum even if the client sent none (e.g. the
        multipart upload was created with it); a client-sent header or trailer wins.
    max_size: bodies longer than this -> EntityTooLarge (checked up front when the length is
        known, and while streaming otherwise).
    """

    def __init__(
        self,
        auth: AuthResult,
        headers: Headers,
        raw: AsyncIterable[bytes],
        *,
        md5: bool = True,
        checksum_algorithm: str | None = None,
        max_size: int | None = None,
        executor: Executor | None = None,
    ) -> None:
        h = lower_headers(headers)
        self._auth = auth
        self._max_size = max_size
        self.size = 0
        self.complete = False
        self.md5_digest: bytes | None = None

        # Which checksum: from an x-amz-checksum-* header, or a trailer, or the caller.
        sent: dict[str, str] = {}
        for name, values in h.items():
            algo = checksums.algorithm_from_header(name)
            if algo is not None:
                sent[algo] = values[0]
        trailer_names = [t.strip().lower() for v in h.get("x-amz-trailer", [])
                         for t in v.split(",") if t.strip()]
        if len(sent) > 1:
            raise S3Error("InvalidRequest", "Expecting a single x-amz-checksum- header. "
                                            "Multiple checksum Types are not allowed.")
        if sent and trailer_names:
            raise S3Error("InvalidRequest", "Expecting a single x-amz-checksum- header or "
                                            "x-amz-trailer, not both.")
        trailer_algos = [a for a in map(checksums.algorithm_from_header, trailer_names) if a]
        if len(trailer_algos) > 1:
            raise S3Error("InvalidRequest", "Expecting a single x-amz-checksum- trailer.")
        sdk_algo = first(h, "x-amz-sdk-checksum-algorithm")
        self.checksum_algorithm: str | None = None
        self._checksum_expected: str | None = None
        self._checksum_trailer: str | None = None
        if sent:
            (algo, value), = sent.items()
            checksums.parse_value(algo, value)  # malformed -> InvalidRequest now, not later
            self.checksum_algorithm, self._checksum_expected = algo, value
        elif trailer_algos:
            self.checksum_algorithm = trailer_algos[0]
            self._checksum_trailer = checksums.header_name(trailer_algos[0])
        elif sdk_algo:
            self.checksum_algorithm = checksums.normalize_algorithm(sdk_algo)
        elif checksum_algorithm:
            self.checksum_algorithm = checksums.normalize_algorithm(checksum_algorithm)
        if (sdk_algo and self.checksum_algorithm
                and checksums.normalize_algorithm(sdk_algo) != self.checksum_algorithm):
            raise S3Error("InvalidRequest", "Value for x-amz-sdk-checksum-algorithm header is "
                                            "invalid: it names another algorithm than the "
                                            "checksum sent.")

        content_md5 = first(h, "content-md5")
        # an empty Content-MD5 is a malformed one (InvalidDigest), not an absent one
        self._content_md5 = checksums.parse_content_md5(content_md5) \
            if content_md5 is not None else None

        # How the bytes arrive.
        self._decoder: AwsChunkedDecoder | None = None
        if auth.streaming:
            dl = first(h, "x-amz-decoded-content-length")
            if dl is None:
                raise S3Error("MissingContentLength",
                              "An aws-chunked upload needs x-amz-decoded-content-length.")
            self.expected_size: int | None = _parse_length(dl, "x-amz-decoded-content-length")
            self._decoder = AwsChunkedDecoder(
                raw, mode=auth.content_sha256, decoded_length=self.expected_size,
                declared_trailers=trailer_names, auth=auth)
            self._source: AsyncIterable[bytes] = self._decoder
        else:
            if trailer_names:
                raise S3Error("InvalidRequest", "x-amz-trailer needs a STREAMING-*-TRAILER "
                                                "x-amz-content-sha256.")
            cl = first(h, "content-length")
            self.expected_size = _parse_length(cl, "Content-Length") if cl is not None else None
            self._source = raw
        if max_size is not None and self.expected_size is not None \
                and self.expected_size > max_size:
            raise S3Error("EntityTooLarge", ProposedSize=self.expected_size,
                          MaxSizeAllowed=max_size)

        hashers: list[checksums.Hasher] = []
        self._md5 = new_md5() if (md5 or self._content_md5 is not None) else None
        if self._md5 is not None:
            hashers.append(self._md5)
        self._sha256 = hashlib.sha256() if auth.payload_sha256 is not None else None
        if self._sha256 is not None:
            hashers.append(self._sha256)
        self._checksum = (checksums.new_hasher(self.checksum_algorithm)
                          if self.checksum_algorithm else None)
        if self._checksum is not None:
            hashers.append(self._checksum)
        self._hashing = checksums.ThreadedHashers(hashers, executor=executor)
        self._iterated = False

    @property
    def trailers(self) -> dict[str, str]:
        """Trailing headers received (aws-chunked trailer forms), after the end."""
        return self._decoder.trailers if self._decoder is not None else {}

    @property
    def etag(self) -> str | None:
        """The quoted hex MD5, after the end (None if md5 was not computed)."""
        return checksums.etag_from_md5(self.md5_digest) if self.md5_digest else None

    @property
    def checksum(self) -> str | None:
        """Base64 value of `checksum_algorithm`, verified or computed; None before the end."""
        return self._checksum.b64() if (self._checksum is not None and self.complete) else None

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._iterated:
            raise RuntimeError("a request body can be iterated only once")
        self._iterated = True
        return self._run()

    async def _run(self) -> AsyncIterator[bytes]:
        hashing = self._hashing
        try:
            async for chunk in self._source:
                if not chunk:
                    continue
                if type(chunk) is not bytes and not (type(chunk) is memoryview
                                                     and chunk.readonly):
                    chunk = bytes(chunk)  # a read-only view is never written while held
                self.size += len(chunk)
                if self.expected_size is not None and self.size > self.expected_size:
                    raise S3Error("IncompleteBody", "The body is longer than Content-Length.")
                if self._max_size is not None and self.size > self._max_size:
                    raise S3Error("EntityTooLarge", MaxSizeAllowed=self._max_size)
                await hashing.feed(chunk)
                yield chunk
            await hashing.finish()
        except BaseException:
            hashing.cancel()
            raise
        self._verify_end()
        self.complete = True

    def _verify_end(self) -> None:
        if self.expected_size is not None and self.size != self.expected_size:
            raise S3Error("IncompleteBody", f"Received {self.size} bytes of the "
                                            f"{self.expected_size} announced.")
        expected_sha = self._auth.payload_sha256
        if self._sha256 is not None and expected_sha is not None \
                and self._sha256.hexdigest() != expected_sha:
            raise S3Error("XAmzContentSHA256Mismatch",
                          ClientComputedContentSHA256=expected_sha,
                          S3ComputedContentSHA256=self._sha256.hexdigest())
        if self._md5 is not None:
            self.md5_digest = self._md5.digest()
            if self._content_md5 is not None and self._content_md5 != self.md5_digest:
                raise S3Error("BadDigest")
        if self._checksum is not None and self.checksum_algorithm is not None:
            expected = self._checksum_expected
            if self._checksum_trailer is not None:
                expected = self.trailers.get(self._checksum_trailer)
                if expected is None:
                    raise S3Error("MalformedTrailerError",
                                  f"The trailer {self._checksum_trailer} was not sent.")
            if expected is not None:
                checksums.verify(self.checksum_algorithm, expected, self._checksum)
