"""Storage node benchmark: CPU cost per byte of one real node process's data path.

PUTs then GETs `--total` MiB of `--record` MiB records through one `zonegate node` process
(tests/support/nodeproc.py NodeCluster: 2 emulated zoned drives, fdatasync'd) with an aiohttp client,
`--concurrency` requests at a time, and reports MB/s and the node's CPU seconds (user + system,
from /proc/<pid>/stat) per GiB of record bytes. PUT bodies are sent chunked in `--piece` KiB
writes, like the gateway's node client sends erasure fragments. The client streams one preallocated buffer and
discards what it reads, so it costs little; the two share the machine's cores all the same.

`--baseline SRC` also runs the node from another source tree (e.g. a `git worktree` of an older
commit), interleaved with the current one run by run, so that before/after numbers come from
the same conditions. `--runs N` reports the median of N runs.

    python -m bench node [--total 512] [--record 16] [--runs 3] [--baseline /tmp/old] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.nodeproc import TEST_GEOMETRY, NodeCluster  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


async def _put(session: aiohttp.ClientSession, cluster: NodeCluster, rid: str, data: bytes,
               piece: int, chunked: bool, rate: float = 0.0) -> None:
    path = f"/v1/records/{rid}"
    query = {"nonce": secrets.token_hex(8)}
    headers = cluster.headers(0, "PUT", path, query, None)
    headers["X-ZG-Length"] = str(len(data))
    if not chunked:
        headers["Content-Length"] = str(len(data))
    view = memoryview(data)

    async def body():
        # Paced like the gateway's fan-out: piece n leaves at start + n * piece / rate.
        start = time.perf_counter()
        for p in range(0, len(view), piece):
            if rate:
                delay = start + p / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            yield view[p:p + piece]

    url = f"{cluster.urls[0]}{path}?nonce={query['nonce']}"
    async with session.put(url, data=body(), headers=headers) as resp:
        if resp.status != 201:
            raise RuntimeError(f"PUT {rid}: {resp.status} {await resp.text()}")


async def _get(session: aiohttp.ClientSession, cluster: NodeCluster, rid: str,
               size: int) -> None:
    path = f"/v1/records/{rid}"
    async with session.get(cluster.urls[0] + path,
                           headers=cluster.headers(0, "GET", path)) as resp:
        if resp.status != 200:
            raise RuntimeError(f"GET {rid}: {resp.status}")
        got = 0
        async for chunk in resp.content.iter_any():
            got += len(chunk)
        if got != size:
            raise RuntimeError(f"GET {rid}: {got} of {size} bytes")


async def _drive(cluster: NodeCluster, total: int, record: int, concurrency: int,
                 piece: int, chunked: bool, rate: float = 0.0) -> dict[str, dict[str, float]]:
    data = os.urandom(record)
    n = max(1, total // record)
    ids = [f"bench-{i:05d}" for i in range(n)]
    pid = cluster.pid(0)
    out: dict[str, dict[str, float]] = {}
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn, read_bufsize=4 * MiB) as session:
        for op in ("PUT", "GET"):
            queue = list(ids)

            async def worker(op: str = op, queue: list[str] = queue) -> None:
                while queue:
                    rid = queue.pop()
                    if op == "PUT":
                        await _put(session, cluster, rid, data, piece, chunked, rate)
                    else:
                        await _get(session, cluster, rid, record)

            c0, t0 = _cpu(pid), time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            secs, c1 = time.perf_counter() - t0, _cpu(pid)
            gib = n * record / GiB
            user, system = (c1[0] - c0[0]) / gib, (c1[1] - c0[1]) / gib
            out[op] = {"mb_s": n * record / secs / 1e6, "cpu_s_per_gib": user + system,
                       "user_s_per_gib": user, "sys_s_per_gib": system}
    return out


def run_once(src: Path | None, total: int, record: int, concurrency: int, piece: int,
             chunked: bool, rate: float = 0.0) -> dict[str, dict[str, float]]:
    env = {}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    with tempfile.TemporaryDirectory(prefix="zg-node-bench-") as tmp:
        # Zones large enough that the records fit the two drives without reclaim.
        zones = max(TEST_GEOMETRY.nr_zones, (total // 2) // TEST_GEOMETRY.zone_size + 8)
        geometry = type(TEST_GEOMETRY)(nr_zones=zones, zone_size=TEST_GEOMETRY.zone_size,
                                       zone_capacity=TEST_GEOMETRY.zone_capacity)
        # `python -m` puts the working directory first on sys.path: start the node away from
        # this checkout so that --baseline's tree is the one imported.
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            with NodeCluster(Path(tmp), 1, drives_per_node=2, geometry=geometry,
                             env=env) as cluster:
                return asyncio.run(_drive(cluster, total, record, concurrency, piece,
                                          chunked, rate))
        finally:
            os.chdir(cwd)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench node", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--total", type=int, default=512, help="MiB per direction (default 512)")
    ap.add_argument("--record", type=float, default=16, help="MiB per record (default 16)")
    ap.add_argument("--piece", type=int, default=128,
                    help="KiB per client body write (default 128: a gateway fragment write)")
    ap.add_argument("--content-length", action="store_true",
                    help="send Content-Length (default: chunked, as the gateway's node client)")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--rate", type=float, default=0.0,
                    help="MB/s per PUT connection (default 0: as fast as possible); the "
                    "gateway's fan-out reaches each node at ~20 MB/s in 128 KiB pieces")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--baseline", type=Path, help="source tree of the node to compare with")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    targets: list[tuple[str, Path | None]] = [("current", None)]
    if args.baseline is not None:
        targets.insert(0, ("baseline", args.baseline.resolve()))
    runs: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name, _ in targets}
    for _ in range(args.runs):
        for name, src in targets:
            runs[name].append(run_once(src, args.total * MiB, int(args.record * MiB),
                                       args.concurrency, args.piece * 1024,
                                       not args.content_length, args.rate * 1e6))
    result: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{args.total} MiB of {args.record:g} MiB records in {args.piece} KiB writes, "
          f"concurrency {args.concurrency}, "
          + (f"PUTs paced at {args.rate:g} MB/s per connection, " if args.rate else "")
          + f"median of {args.runs} run(s)")
    print(f"{'node':<10} {'op':<4} {'MB/s':>8} {'node CPU s/GiB':>15} {'user':>6} {'sys':>6}")
    for name, _ in targets:
        result[name] = {}
        for op in ("PUT", "GET"):
            med = {k: statistics.median(r[op][k] for r in runs[name]) for k in runs[name][0][op]}
            result[name][op] = med
            print(f"{name:<10} {op:<4} {med['mb_s']:>8.1f} {med['cpu_s_per_gib']:>15.2f} "
                  f"{med['user_s_per_gib']:>6.2f} {med['sys_s_per_gib']:>6.2f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
