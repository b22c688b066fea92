"""What an UploadPart costs per request and per byte: CPU per part, by role and thread.

A real `zonegate dev` (12 nodes, 2 gateway workers; tests/support/devcluster.py) takes
`--parts` UploadParts of each size in `--sizes` (KiB) from boto3 in `--threads` threads, each
size into its own multipart upload, after a warm-up of 30 parts. For each size: parts/s and the
microseconds of CPU per part of the gateway and of the nodes, each split into the event-loop
thread (user, system) and the other threads (hashing, disk I/O; /proc per thread). The
smallest size's cost is what a part costs whatever its bytes; the difference to the largest,
per MiB, is what its bytes cost.

    python -m bench parts [--sizes 16,8192] [--parts 1600,160] [--threads 4] [--rounds 2]
        [--src DIR] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.procstat import RoleClock, loadavg, thread_times

KiB = 1 << 10
MiB = 1 << 20
BUCKET = "bench-parts"
KEYS = ("gateway:loop", "gateway:threads", "node:loop", "node:threads")


def say(msg: str) -> None:
    print(msg, flush=True)


def one_round(s3: Any, roles: dict[int, str], key: str, size: int, parts: int,
              threads: int) -> dict[str, Any]:
    """`parts` UploadParts of `size` bytes into a new upload (aborted after): its figures."""
    body = os.urandom(size)
    up = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]

    def send(first: int, n: int) -> None:
        for number in range(first, first + n):
            s3.upload_part(Bucket=BUCKET, Key=key, UploadId=up, PartNumber=number, Body=body)

    try:
        send(parts + 1, 30)  # warm-up: connections, caches, the gateway's buffer pool
        each = parts // threads
        a, t0 = thread_times(roles), time.perf_counter()
        ts = [threading.Thread(target=send, args=(1 + k * each, each)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall, b = time.perf_counter() - t0, thread_times(roles)
    finally:
        s3.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up)
    n = each * threads
    per = {k: [(b.get(k, (0, 0))[i] - a.get(k, (0, 0))[i]) / n * 1e6 for i in (0, 1)]
           for k in KEYS}
    return {"size": size, "parts": n, "parts_per_s": n / wall, "load": loadavg(),
            "us_per_part": per,
            "gateway_us": sum(per["gateway:loop"]) + sum(per["gateway:threads"]),
            "nodes_us": sum(per["node:loop"]) + sum(per["node:threads"])}


def show(r: dict[str, Any]) -> None:
    p = r["us_per_part"]
    split = ", ".join(f"{k} {p[k][0]:.0f}+{p[k][1]:.0f}" for k in KEYS)
    say(f"  {r['size'] // KiB:>6} KiB: {r['parts_per_s']:6.1f} parts/s; CPU us per part: "
        f"gateway {r['gateway_us']:.0f}, nodes {r['nodes_us']:.0f} ({split}; user+sys) "
        f"load {r['load']:.1f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench parts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="16,8192", help="part sizes in KiB")
    p.add_argument("--parts", default="1600,160", help="parts per size (one per size, or one)")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2, help="rounds per size (the median is kept)")
    p.add_argument("--src", type=Path, help="run the cluster from this source tree")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    try:
        sizes = [int(x) * KiB for x in a.sizes.split(",")]
        counts = [int(x) for x in a.parts.split(",")]
    except ValueError:
        p.error("--sizes and --parts: comma-separated whole numbers")
    counts = counts * len(sizes) if len(counts) == 1 else counts
    if len(counts) != len(sizes) or min(counts) < a.threads or min(sizes) < 1:
        p.error("--parts: one count, or one per size, each at least --threads")
    if max(counts) + 30 > 10_000:
        p.error("--parts: at most 9,970 (S3's part numbers)")

    from bench.capacity_bench import dev_cluster, s3_client
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="zg-parts-") as tmp, \
            dev_cluster(Path(tmp), "parts", zones=60, zone_size="64M", src=a.src) as cluster:
        s3 = s3_client(cluster, pool=a.threads + 4)
        s3.create_bucket(Bucket=BUCKET)
        roles = {pid: role for pid, role in RoleClock(cluster.child_pids()).roles.items()
                 if role in ("gateway", "node")}
        say(f"parts: sizes {a.sizes} KiB, {a.threads} threads, {a.rounds} round(s) each")
        for size, n in zip(sizes, counts, strict=True):
            rounds = [one_round(s3, roles, f"p{size}-{r}", size, n, a.threads)
                      for r in range(a.rounds)]
            for r in rounds:
                show(r)
            results.append(sorted(rounds, key=lambda r: r["gateway_us"] + r["nodes_us"])
                           [len(rounds) // 2])
    if len(results) > 1:
        small, large = results[0], results[-1]
        mib = (large["size"] - small["size"]) / MiB
        if mib > 0:
            say(f"per request (the {small['size'] // KiB} KiB parts): gateway "
                f"{small['gateway_us'] / 1000:.2f} ms, nodes {small['nodes_us'] / 1000:.2f} ms; "
                f"per MiB beyond it: gateway "
                f"{(large['gateway_us'] - small['gateway_us']) / mib / 1000:.2f} ms, nodes "
                f"{(large['nodes_us'] - small['nodes_us']) / mib / 1000:.2f} ms")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
