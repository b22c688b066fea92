"""A streaming multipart/form-data reader for POST object (browser form uploads), over
python-multipart's push parser (the one starlette uses): the text fields before the file are
gathered (bounded), then the file part's bytes stream to the caller as they arrive; nothing
after the file is read (S3 ignores fields below it). Any malformation is S3's
MalformedPOSTRequest, never an exception of the parser's."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from gateway.s3.errors import S3Error

MAX_FIELDS_BYTES = 20 * 1024   # S3's limit on the form before the file
MAX_PART_HEADERS = 8
MALFORMED = "The body of your POST request is not well-formed multipart/form-data."


def boundary_of(content_type: str | None) -> bytes:
    """The boundary of a `multipart/form-data` Content-Type; MalformedPOSTRequest otherwise
    (S3 answers a POST of anything else so)."""
    ctype, params = parse_options_header(content_type or "")
    boundary = params.get(b"boundary")
    if ctype != b"multipart/form-data" or not boundary or len(boundary) > 70:
        raise S3Error("MalformedPOSTRequest", MALFORMED)
    return boundary


class FormReader:
    """`await fields()` -> (text fields before the file, lower-cased names; the file part's
    filename and Content-Type); then `file_chunks()` yields the file's bytes."""

    def __init__(self, stream: AsyncIterator[bytes], boundary: bytes) -> None:
        self._stream = stream
        self._events: deque[tuple[str, Any]] = deque()
        self._header_name = b""
        self._header_value = b""
        self._parser = MultipartParser(boundary, {
            "on_part_begin": lambda: self._events.append(("begin", None)),
            "on_header_field": self._on_field,
            "on_header_value": self._on_value,
            "on_header_end": self._on_header_end,
            "on_headers_finished": lambda: self._events.append(("headers", None)),
            "on_part_data": lambda d, s, e: self._events.append(("data", bytes(d[s:e]))),
            "on_part_end": lambda: self._events.append(("end", None)),
            "on_end": lambda: self._events.append(("done", None)),
        }, max_header_count=MAX_PART_HEADERS)
        self._ended = False
        self.in_file = False

    def _on_field(self, d: bytes, s: int, e: int) -> None:
        self._header_name += d[s:e]

    def _on_value(self, d: bytes, s: int, e: int) -> None:
        self._header_value += d[s:e]

    def _on_header_end(self) -> None:
        self._events.append(("header", (self._header_name.lower(), self._header_value)))
        self._header_name = self._header_value = b""

    async def _next(self) -> tuple[str, Any]:
        while not self._events:
            if self._ended:
                raise S3Error("MalformedPOSTRequest", MALFORMED)
            try:
                chunk = await anext(self._stream)
            except StopAsyncIteration:
                self._ended = True
                try:
                    self._parser.finalize()
                except MultipartParseError:
                    raise S3Error("MalformedPOSTRequest", MALFORMED) from None
                continue
            try:
                self._parser.write(chunk)
            except MultipartParseError:
                raise S3Error("MalformedPOSTRequest", MALFORMED) from None
        return self._events.popleft()

    async def fields(self) -> tuple[dict[str, str], str, str | None]:
        """(fields, file name, file Content-Type) once the file part's headers are read.
        Repeated fields: the first counts. InvalidArgument without a file part."""
        out: dict[str, str] = {}
        total = 0
        while True:
            kind, _ = await self._next()
            if kind == "done":
                raise S3Error("InvalidArgument", "POST requires exactly one file upload per "
                              "request.", ArgumentName="file", ArgumentValue="0")
            if kind != "begin":
                raise S3Error("MalformedPOSTRequest", MALFORMED)
            headers: dict[bytes, bytes] = {}
            while (ev := await self._next())[0] == "header":
                headers.setdefault(ev[1][0], ev[1][1])
            if ev[0] != "headers":
                raise S3Error("MalformedPOSTRequest", MALFORMED)
            disp, params = parse_options_header(headers.get(b"content-disposition", b""))
            name = params.get(b"name")
            if disp != b"form-data" or name is None:
                raise S3Error("MalformedPOSTRequest", MALFORMED)
            field = name.decode("utf-8", "replace")
            if field.lower() == "file":
                self.in_file = True
                filename = params.get(b"filename", b"").decode("utf-8", "replace")
                ctype = headers.get(b"content-type")
                return out, filename, ctype.decode("latin-1") if ctype else None
            value = bytearray()
            while (ev := await self._next())[0] == "data":
                value += ev[1]
                total += len(ev[1])
                if total > MAX_FIELDS_BYTES:
                    raise S3Error("MaxPostPreDataLengthExceeded", "Your POST request fields "
                                  "preceding the upload file were too large.")
            if ev[0] != "end":
                raise S3Error("MalformedPOSTRequest", MALFORMED)
            out.setdefault(field.lower(), value.decode("utf-8", "replace"))

    async def drain(self, limit: int = 64 * 1024) -> None:
        """Read (and drop) what follows the file, up to `limit` bytes: S3 ignores it, and an
        unread rest would be left on the connection."""
        n = 0
        try:
            while n <= limit:
                kind, data = await self._next()
                if kind == "done":
                    return
                n += len(data or b"")
        except S3Error:
            return

    async def file_chunks(self) -> AsyncIterator[bytes]:
        """The file part's bytes, as they arrive; MalformedPOSTRequest if the form ends
        without closing it."""
        while True:
            kind, data = await self._next()
            if kind == "data":
                if data:
                    yield data
            elif kind == "end":
                return
            else:
                raise S3Error("MalformedPOSTRequest", MALFORMED)
