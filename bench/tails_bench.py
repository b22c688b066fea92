"""Tail latency benchmark: UploadPart and ranged GET latency p50/p99 with C concurrent clients.

A real `zonegate dev` (12 nodes, 2 gateway workers; tests/support/devcluster.py), boto3
clients, one thread each:
- upload: C multipart uploads at once, each sending `--parts` parts of `--part-mib` MiB one
  after the other (the issue's case: 16 concurrent 8 MiB UploadParts);
- get: C clients reading `--part-mib` MiB ranges (aligned to the parts, as s3torchconnector
  reads) of the uploaded objects, `--gets` each.
For each phase and each C of `--concurrency`: the client's view (p50, p99, max, and the
requests over 1 s) of the request, from its first byte sent (botocore's before-send: what a
client's first-response timeout, the CRT's, counts) to its response (the whole answer of an
UploadPart, the headers of a GET), and of the call (also boto3's own work before it sends:
the payload's SHA-256 and CRC32, signing, a turn at the GIL among C threads); the gateway's
view (its Prometheus time-to-first-byte histograms between two scrapes, bucket-interpolated),
with CPU seconds per GiB of the gateway and node processes (/proc). The default 8 parts give
128 UploadParts at C=16: p99 is then the second slowest, not the slowest.

    python -m bench tails [--concurrency 8,16,32] [--part-mib 8] [--parts 8] [--gets 8]
        [--src DIR] [--json F]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.procstat import RoleClock, loadavg

MiB = 1 << 20
GiB = 1 << 30
BUCKET = "tails"


def say(msg: str) -> None:
    print(msg, flush=True)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def stats(lat: list[float]) -> dict[str, float]:
    return {"n": len(lat), "p50": statistics.median(lat), "p99": pct(lat, 0.99),
            "max": max(lat), "over_1s": sum(1 for x in lat if x > 1.0)}


class SendClock:
    """When botocore began to send each thread's current request (its before-send event)."""

    def __init__(self, s3: Any, ops: tuple[str, ...]) -> None:
        self._local = threading.local()
        for op in ops:
            s3.meta.events.register(f"before-send.s3.{op}", self._sent)

    def _sent(self, **_: Any) -> None:
        self._local.t = time.perf_counter()

    def timed(self, call: Any) -> tuple[Any, float, float]:
        """`call()`'s result, its call time and its request time (from its send)."""
        t0 = time.perf_counter()
        result = call()
        t1 = time.perf_counter()
        return result, t1 - t0, t1 - self._local.t


def phase(cluster: Any, clock: RoleClock, name: str, op: str, conc: int, nbytes: int,
          work: Any) -> dict[str, Any]:
    """Run `work(i)` in `conc` threads (each returns its (call, request) latencies); figures
    of the phase."""
    from bench.promhist import quantiles, scrape
    before, c0, t0 = scrape(cluster.endpoint), clock.sample(), time.perf_counter()
    with ThreadPoolExecutor(conc) as ex:
        lat = [x for part in ex.map(work, range(conc)) for x in part]
    wall = time.perf_counter() - t0
    cpu = RoleClock.delta(c0, clock.sample())
    after = scrape(cluster.endpoint)
    out: dict[str, Any] = {"phase": name, "concurrency": conc,
                           "request": stats([r for _, r in lat]),
                           "call": stats([c for c, _ in lat]),
                           "mbps": nbytes / wall / 1e6, "loadavg": loadavg()}
    out["gateway_ttfb"] = quantiles(before, after, "zonegate_gateway_time_to_first_byte_seconds",
                                    op)
    for role in ("gateway", "node"):
        out[f"cpu_{role}"] = cpu.get(role, 0.0) / (nbytes / GiB)
    c, k, g = out["request"], out["call"], out["gateway_ttfb"]
    say(f"  {name:6s} C={conc:2d}: request p50 {c['p50'] * 1000:5.0f} ms p99 "
        f"{c['p99'] * 1000:5.0f} ms max {c['max'] * 1000:5.0f} ms, {c['over_1s']} of "
        f"{c['n']} over 1 s; call p50 {k['p50'] * 1000:5.0f} p99 {k['p99'] * 1000:5.0f} max "
        f"{k['max'] * 1000:5.0f} ms, {k['over_1s']} over 1 s; "
        f"gateway ttfb p50 {(g['p50'] or 0) * 1000:5.0f} ms p99 {(g['p99'] or 0) * 1000:5.0f} "
        f"ms, {g['over_1s']} over 1 s; {out['mbps']:6.1f} MB/s; CPU-s/GiB gw "
        f"{out['cpu_gateway']:.2f} nodes {out['cpu_node']:.2f} (load {out['loadavg']:.1f})")
    return out


def run(cluster: Any, conc_list: list[int], part: int, parts: int, gets: int
        ) -> list[dict[str, Any]]:
    from bench.capacity_bench import Data, s3_client
    s3 = s3_client(cluster, pool=max(conc_list) + 4)
    s3.create_bucket(Bucket=BUCKET)
    clock = RoleClock(cluster.child_pids())
    sends = SendClock(s3, ("UploadPart", "GetObject"))
    data = Data()
    rows = []
    for conc in conc_list:
        keys = [f"c{conc}/obj{i}" for i in range(conc)]

        def upload(i: int, keys: list[str] = keys) -> list[tuple[float, float]]:
            key = keys[i]
            uid = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
            lat, done = [], []
            for n in range(1, parts + 1):
                body = data.body(i * 1000 + n, part)
                r, call, req = sends.timed(lambda n=n, body=body: s3.upload_part(
                    Bucket=BUCKET, Key=key, UploadId=uid, PartNumber=n, Body=body))
                lat.append((call, req))
                done.append({"PartNumber": n, "ETag": r["ETag"]})
            s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=uid,
                                         MultipartUpload={"Parts": done})
            return lat

        rows.append(phase(cluster, clock, "upload", "UploadPart", conc, conc * parts * part,
                          upload))

        def get(i: int, keys: list[str] = keys) -> list[tuple[float, float]]:
            rng = random.Random(i)
            lat = []
            for _ in range(gets):
                k = rng.randrange(len(keys))
                n = rng.randrange(parts)
                r, call, req = sends.timed(lambda k=k, n=n: s3.get_object(
                    Bucket=BUCKET, Key=keys[k], Range=f"bytes={n * part}-{(n + 1) * part - 1}"))
                lat.append((call, req))
                body = r["Body"].read()
                if body != data.body(k * 1000 + n + 1, part):
                    raise AssertionError(f"{keys[k]} part {n + 1}: wrong bytes")
            return lat

        rows.append(phase(cluster, clock, "get", "GetObject", conc, conc * gets * part, get))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench tails", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="8,16,32")
    p.add_argument("--part-mib", type=int, default=8)
    p.add_argument("--parts", type=int, default=8, help="parts per upload")
    p.add_argument("--gets", type=int, default=8, help="ranged GETs per client")
    p.add_argument("--src", type=Path, help="run the cluster from this source tree")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support
    from bench.capacity_bench import dev_cluster
    conc = [int(c) for c in a.concurrency.split(",")]
    need = sum(conc) * a.parts * a.part_mib * MiB * 1.25
    zones = max(48, int(need / (64 * MiB) / 24 * 1.5) + 8)
    root = Path(tempfile.mkdtemp(prefix="zonegate-tails-"))
    say(f"tails: concurrency {conc}, {a.parts} parts of {a.part_mib} MiB per upload, "
        f"{a.gets} ranged GETs per client; cluster from {a.src or 'this tree'}")
    try:
        with dev_cluster(root, "tails", zones=zones, zone_size="64M",
                         src=a.src.resolve() if a.src else None) as cluster:
            rows = run(cluster, conc, a.part_mib * MiB, a.parts, a.gets)
    finally:
        import shutil
        shutil.rmtree(root, ignore_errors=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
