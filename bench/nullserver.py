"""A null S3 server: speaks just enough S3 for boto3's upload_file/download_file and curl, reads
and discards every body, and serves zeros for GETs. No auth, no storage, no hashing.

It is the client's ceiling on this machine: whatever rate boto3 reaches against it is the most
any server could show in the same run (see shared/notes/performance.md).

    python -m bench.nullserver --port 9900
"""

from __future__ import annotations

import argparse
import itertools
import re

from aiohttp import web

ZEROS = memoryview(bytes(1024 * 1024))
_ids = itertools.count(1)
XML = "application/xml"


def _etag(n: int) -> str:
    return f'"{n:032x}"'


class NullS3:
    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}   # "bucket/key" -> size, so GET/HEAD can answer
        self.uploads: dict[str, int] = {}  # upload id -> bytes received so far

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path.lstrip("/")
        q = request.query
        m = request.method
        if m == "PUT":
            n = 0
            async for chunk in request.content.iter_any():
                n += len(chunk)
            headers = {"ETag": _etag(next(_ids))}
            for k, v in request.headers.items():  # s3transfer copies these into Complete
                if k.lower().startswith("x-amz-checksum-") and k.lower() != "x-amz-checksum-type":
                    headers[k] = v
            if "uploadId" in q:
                self.uploads[q["uploadId"]] = self.uploads.get(q["uploadId"], 0) + n
            elif "/" in path:
                self.sizes[path] = int(request.headers.get("x-amz-decoded-content-length", n))
            return web.Response(status=200, headers=headers)
        if m == "POST" and "uploads" in q:
            uid = f"u{next(_ids)}"
            self.uploads[uid] = 0
            bucket, _, key = path.partition("/")
            return web.Response(content_type=XML, text=(
                f"<InitiateMultipartUploadResult><Bucket>{bucket}</Bucket><Key>{key}</Key><UploadId>{uid}"
                "</UploadId></InitiateMultipartUploadResult>"))
        if m == "POST" and "uploadId" in q:
            await request.read()
            self.sizes[path] = self.uploads.pop(q["uploadId"], 0)
            bucket, _, key = path.partition("/")
            return web.Response(content_type=XML, text=(
                "<CompleteMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key>"
                "<ETag>{}</ETag></CompleteMultipartUploadResult>").format(
                    bucket, key, _etag(next(_ids))[:-1] + '-1"'))
        if m == "DELETE":
            self.sizes.pop(path, None)
            return web.Response(status=204)
        if m in ("GET", "HEAD") and "/" in path.rstrip("/"):
            return await self._get(request, path)
        if m == "GET":  # ListBuckets / ListObjects: empty
            return web.Response(content_type=XML, text="<ListBucketResult><IsTruncated>false"
                                "</IsTruncated></ListBucketResult>")
        return web.Response(status=200)  # CreateBucket, HeadBucket

    async def _get(self, request: web.Request, path: str) -> web.StreamResponse:
        size = self.sizes.get(path)
        if size is None:
            return web.Response(status=404, content_type=XML,
                                text="<Error><Code>NoSuchKey</Code></Error>")
        start, end, status = 0, size - 1, 200
        rng = re.fullmatch(r"bytes=(\d+)-(\d*)", request.headers.get("Range", ""))
        if rng:
            start = int(rng.group(1))
            end = min(int(rng.group(2)) if rng.group(2) else size - 1, size - 1)
            status = 206
        length = max(0, end - start + 1)
        headers = {"ETag": _etag(0), "Content-Length": str(length),
                   "Last-Modified": "Sun, 29 Nov 2026 00:00:00 GMT",
                   "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        resp = web.StreamResponse(status=status, headers=headers)
        await resp.prepare(request)
        if request.method == "GET":
            left = length
            while left:
                n = min(left, len(ZEROS))
                await resp.write(ZEROS[:n])
                left -= n
        await resp.write_eof()
        return resp


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.nullserver", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9900)
    args = p.parse_args(argv)
    app = web.Application(client_max_size=0)
    app.router.add_route("*", "/{tail:.*}", NullS3().handle)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
