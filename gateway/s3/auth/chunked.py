"""aws-chunked body decoding: the payload of STREAMING-* uploads, as an async iterator.

Three forms, chosen by x-amz-content-sha256:
- STREAMING-AWS4-HMAC-SHA256-PAYLOAD: `hex-size;chunk-signature=<sig>\\r\\n<data>\\r\\n` ...,
  ending with a 0-size chunk; each signature is chained from the previous one, starting at the
  request's seed signature. A chunk is yielded only after its signature has been verified.
- STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER: the same, then trailing headers
  (`x-amz-checksum-crc32:<b64>\\r\\n`) and `x-amz-trailer-signature:<sig>`, chained from the
  final chunk's signature.
- STREAMING-UNSIGNED-PAYLOAD-TRAILER: `hex-size\\r\\n<data>\\r\\n` ..., `0\\r\\n`, trailers,
  `\\r\\n` (what boto3 sends over HTTPS). Data is passed through as it arrives.

Bounded: chunk header and trailer lines at most 4 KiB, chunks at most 16 MiB; at most one chunk
is held (signed forms) or none (unsigned). The decoded length must equal
x-amz-decoded-content-length. Every malformation is an S3Error raised from iteration, so a
consumer that stores only after the iterator ends cleanly never keeps a bad body.

    dec = AwsChunkedDecoder(raw_chunks, mode=auth.content_sha256, decoded_length=n,
                            declared_trailers=["x-amz-checksum-crc32"], auth=auth)
    async for data in dec: ...
    dec.trailers   # {"x-amz-checksum-crc32": "NSRBwg=="} once the stream has ended
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterable, AsyncIterator, Sequence

from gateway.s3.auth.common import (
    STREAMING_MODES,
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    AuthResult,
)
from gateway.s3.auth.sigv4 import (
    EMPTY_SHA256,
    chunk_signature,
    signatures_equal,
    trailer_signature,
)
from gateway.s3.errors import S3Error

MAX_LINE = 4096
MAX_CHUNK = 16 * 1024 * 1024
MAX_TRAILERS = 16
_THREAD_HASH = 256 * 1024
_HEXDIGITS = frozenset(b"0123456789abcdefABCDEF")
_SIG_PREFIX = b"chunk-signature="


def _malformed(detail: str) -> S3Error:
    return S3Error("InvalidRequest", f"Malformed aws-chunked body: {detail}")


def _incomplete(detail: str) -> S3Error:
    return S3Error("IncompleteBody", f"The aws-chunked body is incomplete: {detail}")


class _Source:
    """Buffered reads (lines, exact counts, what is there) over an async byte iterator."""

    def __init__(self, raw: AsyncIterable[bytes]) -> None:
        self._it = raw.__aiter__()
        self._buf = b""
        self._pos = 0

    async def _more(self) -> bool:
        while True:
            try:
                piece = await self._it.__anext__()
            except StopAsyncIteration:
                return False
            if piece:
                break
        piece = bytes(piece)
        if self._pos < len(self._buf):
            self._buf = self._buf[self._pos:] + piece
        else:
            self._buf = piece
        self._pos = 0
        return True

    async def readline(self, limit: int) -> bytes | None:
        """The next CRLF-terminated line without its CRLF; None at EOF with nothing buffered."""
        while True:
            i = self._buf.find(b"\r\n", self._pos)
            if i >= 0:
                if i - self._pos > limit:
                    raise _malformed(f"a line is longer than {limit} bytes")
                line = self._buf[self._pos:i]
                self._pos = i + 2
                return line
            if len(self._buf) - self._pos > limit + 1:
                raise _malformed(f"a line is longer than {limit} bytes")
            if not await self._more():
                if self._pos >= len(self._buf):
                    return None
                rest = self._buf[self._pos:]
                self._pos = len(self._buf)
                return rest  # a last line without CRLF; callers decide whether that is fine

    async def read_some(self, n: int) -> bytes:
        """Between 1 and n bytes; IncompleteBody at EOF."""
        if self._pos >= len(self._buf) and not await self._more():
            raise _incomplete("the body ended inside a chunk")
        avail = len(self._buf) - self._pos
        if self._pos == 0 and n >= avail:
            out, self._buf = self._buf, b""
            return out
        take = min(n, avail)
        out = self._buf[self._pos:self._pos + take]
        self._pos += take
        return out

    async def read_exact(self, n: int) -> bytes:
        parts = []
        while n > 0:
            piece = await self.read_some(n)
            parts.append(piece)
            n -= len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def at_eof(self) -> bool:
        return self._pos >= len(self._buf) and not await self._more()


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class AwsChunkedDecoder:
    """Decodes one aws-chunked request body; iterate it once for the payload bytes.

    mode: the request's x-amz-content-sha256 (one of the STREAMING-* values).
    decoded_length: x-amz-decoded-content-length.
    declared_trailers: the names in x-amz-trailer (trailer forms); each must arrive, and
        nothing else may.
    auth: needed for the signed forms (seed signature, signing key, scope, date).
    After a clean end: `trailers` (lowercased name -> value), `decoded_bytes`, `complete`.
    """

    def __init__(
        self,
        raw: AsyncIterable[bytes],
        *,
        mode: str,
        decoded_length: int,
        declared_trailers: Sequence[str] = (),
        auth: AuthResult | None = None,
        max_chunk: int = MAX_CHUNK,
        max_line: int = MAX_LINE,
    ) -> None:
        if mode not in STREAMING_MODES:
            raise ValueError(f"not an aws-chunked mode: {mode!r}")
        self.mode = mode
        self.signed = mode in (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER)
        self.expects_trailer = mode != STREAMING_SIGNED
        if self.signed and (auth is None or auth.signing_key is None or auth.signature is None
                            or auth.scope is None or auth.amz_date is None):
            raise S3Error("InvalidRequest",
                          f"{mode} requires a SigV4 Authorization header.")
        self._auth = auth
        self._source = _Source(raw)
        self._decoded_length = decoded_length
        self._declared = [t.strip().lower() for t in declared_trailers if t.strip()]
        self._max_chunk = max_chunk
        self._max_line = max_line
        self._previous = auth.signature if auth is not None and self.signed else ""
        self._iterated = False
        self.trailers: dict[str, str] = {}
        self.decoded_bytes = 0
        self.complete = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._iterated:
            raise RuntimeError("an aws-chunked body can be iterated only once")
        self._iterated = True
        return self._run()

    def _parse_header(self, line: bytes) -> tuple[int, str | None]:
        size_part, sep, ext = line.partition(b";")
        size_part = size_part.strip()
        if not size_part or len(size_part) > 16 or not set(size_part) <= _HEXDIGITS:
            raise _malformed(f"bad chunk size line {line[:80]!r}")
        size = int(size_part, 16)
        if size > self._max_chunk:
            raise _malformed(f"chunk of {size} bytes exceeds the {self._max_chunk}-byte limit")
        sig = None
        if self.signed:
            if not sep or not ext.startswith(_SIG_PREFIX):
                raise _malformed("a chunk has no chunk-signature")
            sig_b = ext[len(_SIG_PREFIX):].strip()
            if len(sig_b) != 64 or not set(sig_b) <= _HEXDIGITS:
                raise _malformed("a chunk-signature is not 64 hex characters")
            sig = sig_b.decode("ascii")
        return size, sig

    def _check_chunk_signature(self, sig: str | None, data_sha256: str) -> None:
        auth = self._auth
        assert auth is not None and auth.signing_key is not None and sig is not None
        assert auth.amz_date is not None and auth.scope is not None
        expected = chunk_signature(auth.signing_key, auth.amz_date, auth.scope, self._previous,
                                   data_sha256)
        if not signatures_equal(expected, sig):
            raise S3Error("SignatureDoesNotMatch",
                          "The chunk signature we calculated does not match the one you "
                          "provided.", SignatureProvided=sig)
        self._previous = sig

    async def _run(self) -> AsyncIterator[bytes]:
        src = self._source
        while True:
            line = await src.readline(self._max_line)
            if line is None:
                raise _incomplete("the body ended before the final 0-size chunk")
            size, sig = self._parse_header(line)
            if self.decoded_bytes + size > self._decoded_length:
                raise _incomplete(
                    f"it carries more than x-amz-decoded-content-length={self._decoded_length}"
                    " bytes")
            if size == 0:
                if self.signed:
                    self._check_chunk_signature(sig, EMPTY_SHA256)
                break
            if self.signed:
                data = await src.read_exact(size)
                if size >= _THREAD_HASH:
                    digest = await asyncio.get_running_loop().run_in_executor(
                        None, _sha256_hex, data)
                else:
                    digest = _sha256_hex(data)
                self._check_chunk_signature(sig, digest)
                await self._expect_crlf()
                self.decoded_bytes += size
                yield data
            else:
                left = size
                while left:
                    piece = await src.read_some(left)
                    left -= len(piece)
                    self.decoded_bytes += len(piece)
                    yield piece
                await self._expect_crlf()
        if self.decoded_bytes != self._decoded_length:
            raise _incomplete(
                f"received {self.decoded_bytes} bytes, x-amz-decoded-content-length says "
                f"{self._decoded_length}")
        if self.expects_trailer:
            await self._read_trailers()
        else:
            line = await src.readline(self._max_line)
            if line not in (None, b""):
                raise _malformed("data after the final chunk")
        if not await src.at_eof():
            raise _malformed("data after the end of the aws-chunked body")
        self.complete = True

    async def _expect_crlf(self) -> None:
        if await self._source.read_exact(2) != b"\r\n":
            raise _malformed("chunk data is not followed by CRLF")

    async def _read_trailers(self) -> None:
        received: list[tuple[str, str]] = []
        signature: str | None = None
        while True:
            line = await self._source.readline(self._max_line)
            if line is None:
                break
            if line == b"":
                if received or signature is not None:
                    break
                continue  # some clients put an empty line between the last chunk and trailers
            if signature is not None:
                raise S3Error("MalformedTrailerError",
                              "x-amz-trailer-signature must be the last trailing header.")
            name_b, sep, value_b = line.partition(b":")
            try:
                name = name_b.decode("ascii").strip().lower()
                value = value_b.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise S3Error("MalformedTrailerError") from None
            if not sep or not name:
                raise S3Error("MalformedTrailerError")
            if name == "x-amz-trailer-signature":
                signature = value
                continue
            if name not in self._declared or any(n == name for n, _ in received):
                raise S3Error("MalformedTrailerError",
                              f"The trailing header {name!r} was not declared in x-amz-trailer "
                              "or was sent twice.")
            received.append((name, value))
            if len(received) > MAX_TRAILERS:
                raise S3Error("MalformedTrailerError", "Too many trailing headers.")
        missing = [n for n in self._declared if not any(r == n for r, _ in received)]
        if missing:
            raise S3Error("MalformedTrailerError",
                          f"The trailing header {missing[0]!r} declared in x-amz-trailer was "
                          "not sent.")
        if self.signed:
            auth = self._auth
            assert auth is not None and auth.signing_key is not None
            assert auth.amz_date is not None and auth.scope is not None
            if signature is None:
                raise S3Error("MalformedTrailerError",
                              "The trailing headers carry no x-amz-trailer-signature.")
            expected = trailer_signature(auth.signing_key, auth.amz_date, auth.scope,
                                         self._previous, received)
            if not signatures_equal(expected, signature):
                raise S3Error("SignatureDoesNotMatch",
                              "The trailer signature we calculated does not match the one you "
                              "provided.", SignatureProvided=signature)
        self.trailers = dict(received)
