"""SSE benchmark: what server-side encryption costs the gateway, against plaintext in the
same run, and what a ranged GET of a large encrypted object reads from the nodes.

One small real cluster (tests/support/gwcluster.py: 6 node processes, 4+2, one `zonegate
serve` worker, an SSE-S3 master key file). boto3 in this process is the client.

- PUT and GET of `--mib` MiB, plaintext then SSE-S3 then plaintext again (the two plaintext
  runs bracket the machine's drift), each `--runs` times: MB/s and the gateway's CPU seconds
  (user+system of the serve process tree, from /proc) per GiB moved.
- One `--large-mib` MiB SSE-S3 object and `--ranges` ranged GETs of 1 MiB at random offsets:
  record payload bytes the nodes sent (their /metrics `zonegate_node_sent_bytes`, summed) per
  range, against the same ranged GETs of the plaintext object.

    python -m bench sse [--mib 256] [--large-mib 1024] [--runs 2] [--ranges 8] [--json F]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
GiB = 1024 * MiB
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_SENT = re.compile(r"^zonegate_node_sent_bytes_total(?:\{[^}]*\})?\s+([0-9.e+]+)$", re.M)


def node_sent(urls: list[str]) -> float:
    """Record bytes all nodes have sent (GET bodies), from their /metrics."""
    total = 0.0
    for url in urls:
        with _NO_PROXY.open(url + "/metrics", timeout=10) as r:
            total += sum(float(v) for v in _SENT.findall(r.read().decode()))
    return total


class Blob(io.RawIOBase):
    """`size` bytes of a repeated random block, read without holding the object."""

    def __init__(self, size: int, block: bytes) -> None:
        self.size, self.block, self.pos = size, block, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), self.size - self.pos)
        view, done = memoryview(b), 0
        while done < n:
            off = (self.pos + done) % len(self.block)
            take = min(n - done, len(self.block) - off)
            view[done:done + take] = self.block[off:off + take]
            done += take
        self.pos += n
        return n


def run(args: argparse.Namespace) -> dict[str, Any]:
    from boto3.s3.transfer import TransferConfig

    from bench.gateway_bench import tree_cpu
    from gateway.store.ssekeys import new_key_line
    from tests.support.gwcluster import Gateway
    from zonestore.emulated import Geometry

    root = Path(tempfile.mkdtemp(prefix="zg-sse-bench-"))
    keys = root / "master.keys"
    keys.write_text(new_key_line("k1"))
    os.chmod(keys, 0o600)
    zones = max(32, (2 * (args.mib * (2 * args.runs + 1) + 2 * args.large_mib)) // 64 // 4 + 8)
    g = Gateway(root, geometry=Geometry(nr_zones=zones, zone_size=64 * MiB,
                                        zone_capacity=64 * MiB),
                gateway_options={"sse_master_key_file": str(keys)})
    g.start()
    out: dict[str, Any] = {"mib": args.mib, "large_mib": args.large_mib, "rows": []}
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="bench")
        cfg = TransferConfig(multipart_threshold=64 * MiB, multipart_chunksize=64 * MiB,
                             max_concurrency=2)
        block = os.urandom(4 * MiB)
        size = args.mib * MiB
        pid = g.proc.pid

        def measure(label: str, fn: Any, nbytes: int) -> dict[str, Any]:
            c0, t0 = tree_cpu([pid]), time.perf_counter()
            fn()
            dt, cpu = time.perf_counter() - t0, tree_cpu([pid]) - c0
            row = {"case": label, "MB/s": nbytes / dt / 1e6, "cpu_s_per_gib": cpu / (nbytes / GiB)}
            print(f"  {label:<22} {row['MB/s']:8.1f} MB/s   gateway {row['cpu_s_per_gib']:.2f} "
                  "CPU-s/GiB", flush=True)
            out["rows"].append(row)
            return row

        class Sink(io.RawIOBase):
            def writable(self) -> bool:
                return True

            def write(self, b: Any) -> int:
                return len(b)

        print(f"PUT/GET of {args.mib} MiB, {args.runs} run(s) each:")
        order = ["plain", "sse-s3", "plain"] * args.runs
        for i, mode in enumerate(order):
            extra = {"ServerSideEncryption": "AES256"} if mode == "sse-s3" else {}
            key = f"obj-{i}"
            measure(f"PUT {mode}", lambda k=key, e=extra: s3.upload_fileobj(
                Blob(size, block), "bench", k, ExtraArgs=e, Config=cfg), size)
            measure(f"GET {mode}", lambda k=key: s3.download_fileobj(
                "bench", k, Sink(), Config=cfg), size)
            s3.delete_object(Bucket="bench", Key=key)

        print(f"ranged 1 MiB GETs of a {args.large_mib} MiB object:")
        large = args.large_mib * MiB
        rng = random.Random(1)
        for mode in ("plain", "sse-s3"):
            extra = {"ServerSideEncryption": "AES256"} if mode == "sse-s3" else {}
            s3.upload_fileobj(Blob(large, block), "bench", f"large-{mode}", ExtraArgs=extra,
                              Config=cfg)
            per = []
            for _ in range(args.ranges):
                a = rng.randrange(0, large - MiB)
                before = node_sent(g.nodes.urls)
                body = s3.get_object(Bucket="bench", Key=f"large-{mode}",
                                     Range=f"bytes={a}-{a + MiB - 1}")["Body"].read()
                assert len(body) == MiB
                per.append(node_sent(g.nodes.urls) - before)
            row = {"case": f"range {mode}", "node_bytes_per_range_mib":
                   statistics.mean(per) / MiB, "max_mib": max(per) / MiB}
            print(f"  {mode:<8} nodes sent {row['node_bytes_per_range_mib']:.2f} MiB per 1 MiB "
                  f"range (max {row['max_mib']:.2f})", flush=True)
            out["rows"].append(row)
            s3.delete_object(Bucket="bench", Key=f"large-{mode}")
    finally:
        g.stop()
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench sse", description=__doc__.split("\n")[0])
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--large-mib", type=int, default=1024)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--ranges", type=int, default=8)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    out = run(args)
    rows = [r for r in out["rows"] if "MB/s" in r]
    for op in ("PUT", "GET"):
        plain = [r for r in rows if r["case"] == f"{op} plain"]
        enc = [r for r in rows if r["case"] == f"{op} sse-s3"]
        if plain and enc:
            pm = statistics.median(r["MB/s"] for r in plain)
            em = statistics.median(r["MB/s"] for r in enc)
            pc = statistics.median(r["cpu_s_per_gib"] for r in plain)
            ec = statistics.median(r["cpu_s_per_gib"] for r in enc)
            print(f"{op}: SSE-S3 {em:.1f} MB/s vs plaintext {pm:.1f} (ratio {em / pm:.2f}); "
                  f"gateway CPU {ec:.2f} vs {pc:.2f} s/GiB (+{ec - pc:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
