"""MD5 for ETags: CPU per GiB of hashlib's MD5 (OpenSSL) against md5lanes (several streams in
the lanes of one vector register), with 1 to N streams hashed at once in one process.

Each stream is a thread hashing `--part-mib` MiB parts in 256 KiB updates (what
checksums.ThreadedHashers hands the gateway's hashing threads); the same work runs through
both, alternating, `--runs` times, and the medians of CPU seconds per GiB (this process, from
/proc) are reported with the ratio lanes / hashlib, and how many streams a kernel call
advanced on average (`md5lanes.lanes_used`). The gateway's saving depends on how many
parts a worker receives at once: the CRT bench keeps ~2-4 in flight per worker.

    python -m bench md5 [--streams 1,2,4,8] [--part-mib 8] [--parts 4] [--runs 3] [--json F]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from gateway.s3 import md5lanes

BATCH = 256 * 1024


def one_run(make: Callable[[], Any], streams: int, part_mib: int, parts: int,
            data: bytes) -> tuple[float, float]:
    """(CPU-s per GiB, MB/s) of `streams` threads hashing `parts` parts each."""
    start = threading.Barrier(streams + 1)
    per_part = part_mib * (1 << 20) // BATCH

    def stream() -> None:
        start.wait()
        for _ in range(parts):
            h = make()
            for _ in range(per_part):
                h.update(data)
            h.digest()

    threads = [threading.Thread(target=stream) for _ in range(streams)]
    for t in threads:
        t.start()
    cpu, wall = time.process_time(), time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    nbytes = streams * parts * per_part * BATCH
    return cpu / (nbytes / (1 << 30)), nbytes / wall / 1e6


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench md5", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", default="1,2,4,8")
    p.add_argument("--part-mib", type=int, default=8)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    try:
        streams = [int(x) for x in a.streams.split(",")]
    except ValueError:
        p.error("--streams: comma-separated whole numbers")
    if min(streams) < 1 or min(a.part_mib, a.parts, a.runs) < 1:
        p.error("--streams, --part-mib, --parts and --runs: at least 1")
    isa = md5lanes.lanes_isa()
    if isa == "none":
        print("md5lanes is not built (no C compiler at install): nothing to compare")
        return 1
    data = os.urandom(BATCH)
    print(f"md5: {a.parts} parts of {a.part_mib} MiB per stream, 256 KiB updates, "
          f"lanes: {isa or 'scalar'}")
    print(f"{'streams':>7} {'hashlib CPU-s/GiB':>18} {'lanes CPU-s/GiB':>16} {'ratio':>6} "
          f"{'hashlib MB/s':>13} {'lanes MB/s':>11} {'streams a call':>15}")
    rows = []
    for n in streams:
        got: dict[str, list[tuple[float, float]]] = {"hashlib": [], "lanes": []}
        calls, lanes = md5lanes.lanes_used()
        for r in range(a.runs):
            order = [("hashlib", hashlib.md5), ("lanes", md5lanes.LaneMd5)]
            for name, make in order if r % 2 == 0 else order[::-1]:
                got[name].append(one_run(make, n, a.part_mib, a.parts, data))
        calls, lanes = (x - y for x, y in zip(md5lanes.lanes_used(), (calls, lanes),
                                               strict=True))
        med = {k: (statistics.median(c for c, _ in v), statistics.median(m for _, m in v))
               for k, v in got.items()}
        row = {"streams": n, "hashlib_cpu": med["hashlib"][0], "lanes_cpu": med["lanes"][0],
               "ratio": med["lanes"][0] / med["hashlib"][0], "hashlib_mbs": med["hashlib"][1],
               "lanes_mbs": med["lanes"][1], "width": lanes / calls if calls else 0.0}
        rows.append(row)
        print(f"{n:>7} {row['hashlib_cpu']:>18.3f} {row['lanes_cpu']:>16.3f} "
              f"{row['ratio']:>6.2f} {row['hashlib_mbs']:>13.0f} {row['lanes_mbs']:>11.0f} "
              f"{row['width']:>15.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"isa": isa, "rows": rows}, f, indent=1)
    return 0
