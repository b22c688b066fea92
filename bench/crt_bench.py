"""CPU per byte of the data path with the CRT client s3torchconnector uses, no torch needed.

A real `zonegate dev` (12 nodes, 2 gateway workers); `--threads` client threads PUT and then
GET `--mib` MiB as objects of `--obj-mib` MiB through s3torchconnectorclient's
MountpointS3Client (the CRT, `--part-mib` parts; what DCP's S3StorageWriter/Reader send), then
delete them (DeleteObjects; the phase lasts until the sweeper has freed every fragment). Each
run writes new keys, as checkpoints do; `--overwrite` PUTs the same keys every run, so a PUT
phase also pays for freeing the objects it replaces.
Reported per phase: MB/s, CPU seconds per GiB of the gateway processes, the node processes
and the client (this process), from /proc. With `--src DIR` a second cluster runs from another
source tree (the "before" of a change), phases interleaved run by run, the trees taking turns
to go first: compare the ratios. The second of a pair costs the nodes more (0.1-0.3 CPU-s/GiB:
the first's writeback), so the summary's order-balanced difference averages current - before
over the runs each tree went first, then between the two orders (`paired`).
`--warm MIB` first PUTs that much through each cluster: the steady state (a fresh gateway
worker's heap grows over its first GiBs, a page fault per 4 KiB).
`--spy ROLE:PHASE` also records that role's processes with py-spy (if installed) during that
phase's first run and prints the functions with the most samples.

    python -m bench crt [--mib 1024] [--obj-mib 128] [--part-mib 8] [--threads 4] [--runs 2]
        [--warm MIB] [--overwrite] [--cold] [--src DIR] [--spy gateway:put] [--phases put,get,delete]
        [--json F]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.procstat import RoleClock, loadavg

MiB = 1 << 20
GiB = 1 << 30
BUCKET = "crtbench"


def _spy(pids: list[int], out: Path) -> list[subprocess.Popen[bytes]]:
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(exe).exists():
        print("py-spy not installed: no profile")
        return []
    return [subprocess.Popen([exe, "record", "-r", "50", "-f", "raw", "--nonblocking", "-o",
                              str(out / f"{p}.txt"), "-p", str(p)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for p in pids]


def _top(out: Path, n: int = 25) -> None:
    """The functions with the most samples (own time), from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for f in out.glob("*.txt"):
        for line in f.read_text().splitlines():
            if not line.strip():
                continue
            stack, count = line.rsplit(" ", 1)
            own[stack.split(";")[-1].rsplit(":", 1)[0]] += int(count)
            total += int(count)
    for name, c in own.most_common(n):
        print(f"  {100 * c / max(total, 1):5.1f}%  {name}")


def _run_phase(client: Any, phase: str, n: int, blob: bytes, threads: int,
               prefix: str = "o") -> None:
    todo = list(range(n))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def one(i: int) -> None:
        key = f"{prefix}{i:05d}"
        if phase == "put":
            stream = client.put_object(BUCKET, key)
            for j in range(0, len(blob), 8 * MiB):
                stream.write(blob[j:j + 8 * MiB])
            stream.close()
        else:
            got = sum(len(c) for c in client.get_object(BUCKET, key))
            if got != len(blob):
                raise AssertionError(f"{key}: {got} bytes, not {len(blob)}")

    def worker() -> None:
        while True:
            with lock:
                if not todo or errors:
                    return
                i = todo.pop()
            try:
                one(i)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def _evict(data: Path) -> None:
    """Drop a cluster's files from the page cache (its drives, after a sync): its GETs then
    read from the disk, as a restore of a checkpoint written hours before does."""
    for f in data.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _delete_phase(cluster: Any, n: int, prefix: str, timeout: float = 600.0) -> None:
    """DeleteObjects of a run's objects, then wait for the gateways' sweeper to have freed
    every fragment (the orphan queue empty): deleting is mostly that background work."""
    import sqlite3

    from bench.capacity_bench import s3_client
    s3_client(cluster).delete_objects(Bucket=BUCKET, Delete={
        "Objects": [{"Key": f"{prefix}{i:05d}"} for i in range(n)], "Quiet": True})
    deadline = time.monotonic() + timeout
    with sqlite3.connect(cluster.data / "gateway" / "meta.sqlite", timeout=30) as db:
        while db.execute("SELECT COUNT(*) FROM orphans").fetchone()[0]:
            if time.monotonic() > deadline:
                raise TimeoutError("the deleted objects' fragments were not freed in time")
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench crt", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, default=1024)
    p.add_argument("--obj-mib", type=int, default=128)
    p.add_argument("--part-mib", type=int, default=8)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--warm", type=int, default=0, metavar="MIB",
                   help="PUT this many MiB (other keys) before measuring: a fresh gateway "
                        "worker's heap grows over its first GiBs, page faults included")
    p.add_argument("--cold", action="store_true",
                   help="GETs read from the disk: each cluster's files leave the page cache "
                        "first (else GET figures follow what the other tree's writes evicted)")
    p.add_argument("--overwrite", action="store_true",
                   help="every run PUTs the same keys: each PUT also frees the object it "
                        "replaces (the sweeper's work lands in the PUT phase)")
    p.add_argument("--src", type=Path, help="a second source tree to compare against")
    p.add_argument("--spy", default="", help="ROLE:PHASE, e.g. gateway:put or node:get")
    p.add_argument("--phases", default="put,get,delete",
                   help="which phases, e.g. put (a PUT change); delete frees each run's "
                        "objects (DeleteObjects, then the sweeper until the orphan queue is "
                        "empty)")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    phases = [x for x in ("put", "get", "delete") if x in a.phases.split(",")]
    unknown = set(a.phases.split(",")) - set(phases)
    if unknown or not phases:
        p.error(f"--phases: {','.join(sorted(unknown)) or 'none'}: use put, get, delete")
    try:
        from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client
    except ImportError:
        print("s3torchconnectorclient is not installed (pip install -e '.[test]')")
        return 2
    from bench.capacity_bench import dev_cluster, s3_client
    from tests.support.devcluster import ACCESS_KEY, SECRET_KEY
    os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    blob = os.urandom(a.obj_mib * MiB)
    n = max(1, a.mib // a.obj_mib)
    gib = n * len(blob) / GiB
    root = Path(tempfile.mkdtemp(prefix="zonegate-crt-"))
    # GiB the drives hold at once: one run's objects (twice: a replaced or deleted object
    # waits for the sweeper and reclaim), or every run's when none is deleted
    kept = gib * (1 if a.overwrite or "delete" in phases else a.runs) * 2
    zones = max(48, int((kept + a.warm / 1024) * 1.25 * 1024 / 64 / 24) + 8)
    trees: dict[str, Path | None] = {"current": None}
    if a.src is not None:
        trees["before"] = a.src.resolve()
    rows: list[dict[str, Any]] = []
    spy_role, _, spy_phase = a.spy.partition(":")
    try:
        with ExitStack() as stack:
            setups = {}
            for name, src in trees.items():
                c = stack.enter_context(dev_cluster(root, name, zones=zones, zone_size="64M",
                                                    src=src))
                s3_client(c).create_bucket(Bucket=BUCKET)
                client = MountpointS3Client("us-east-1", endpoint=c.endpoint,
                                            force_path_style=True, part_size=a.part_mib * MiB)
                setups[name] = (c, client, RoleClock(c.child_pids()))
            for w in range(-(-a.warm // (n * a.obj_mib)) if a.warm else 0):
                for _c, client, _clock in setups.values():
                    _run_phase(client, "put", n, blob, a.threads, f"w{w}-")
            print(f"crt: {n} objects of {a.obj_mib} MiB ({gib:.2f} GiB), {a.part_mib} MiB "
                  f"parts, {a.threads} threads, trees {list(trees)}, load {loadavg():.1f}")
            for run in range(a.runs):
                for phase in phases:
                    # the trees take turns going first: the second meets the first's writeback
                    order = list(setups.items())[::-1 if run % 2 else 1]
                    for name, (cluster, client, clock) in order:
                        prefix = "o" if a.overwrite else f"r{run}-"
                        spies: list[subprocess.Popen[bytes]] = []
                        out = root / f"spy-{name}-{phase}"
                        if run == 0 and phase == spy_phase and name == "current":
                            out.mkdir(exist_ok=True)
                            spies = _spy([pid for pid, r in clock.roles.items()
                                          if r == spy_role], out)
                            time.sleep(1.0)
                        os.sync()  # the last phase's writeback is not this one's
                        if a.cold and phase == "get":
                            _evict(cluster.data)
                        c0 = clock.sample()
                        t0 = time.monotonic()
                        if phase == "delete":
                            _delete_phase(cluster, n, prefix)
                        else:
                            _run_phase(client, phase, n, blob, a.threads, prefix)
                        wall = time.monotonic() - t0
                        d = RoleClock.delta(c0, clock.sample())
                        for s in spies:
                            s.send_signal(2)
                            s.wait()
                        row = {"tree": name, "run": run, "phase": phase,
                               "first": name == order[0][0],
                               "mb_s": n * len(blob) / wall / 1e6,
                               **{f"cpu_{k}": v / gib for k, v in d.items()}}
                        rows.append(row)
                        print(f"run {run} {phase:3} {name:7}: {row['mb_s']:6.0f} MB/s; CPU-s/"
                              "GiB " + ", ".join(f"{k} {v / gib:.2f}" for k, v in
                                                 sorted(d.items())), flush=True)
                        if spies:
                            print(f"py-spy, {spy_role} during {phase} (own samples):")
                            _top(out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("medians:")
    for phase in phases:
        for name in trees:
            sel = [r for r in rows if r["tree"] == name and r["phase"] == phase]
            keys = sorted(k for k in sel[0] if k.startswith("cpu_"))
            server = statistics.median(r.get("cpu_gateway", 0) + r.get("cpu_node", 0)
                                       for r in sel)
            print(f"  {phase} {name:7}: {statistics.median(r['mb_s'] for r in sel):6.0f} MB/s, "
                  + ", ".join(f"{k[4:]} {statistics.median(r[k] for r in sel):.2f}"
                              for k in keys) + f"; server {server:.2f} CPU-s/GiB")
    if len(trees) == 2:
        for phase in phases:
            print(f"  {phase} current - before, order-balanced: " + ", ".join(
                f"{role} {d:+.2f} (second of a pair {o:+.2f})"
                for role in ("gateway", "node", "server")
                for d, o in [paired(rows, phase, role)] if d is not None))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


def paired(rows: list[dict[str, Any]], phase: str, role: str) -> tuple[float | None, float]:
    """The current tree's CPU-s/GiB minus the before tree's in the same run, averaged over the
    runs it went first and those it went second, then between the two (so that an odd number
    of runs does not favour the tree that went first more often); and how much more the second
    of a pair costs. None without runs in both orders."""
    def cpu(r: dict[str, Any]) -> float:
        if role == "server":
            return r.get("cpu_gateway", 0.0) + r.get("cpu_node", 0.0)
        return r.get(f"cpu_{role}", 0.0)
    by_run: dict[int, dict[str, float]] = {}
    current_first: dict[int, bool] = {}
    for r in rows:
        if r["phase"] == phase:
            by_run.setdefault(r["run"], {})[r["tree"]] = cpu(r)
            if r["tree"] == "current":
                current_first[r["run"]] = r["first"]
    diffs = {run: v["current"] - v["before"] for run, v in by_run.items() if len(v) == 2}
    first = [d for run, d in diffs.items() if current_first[run]]
    second = [d for run, d in diffs.items() if not current_first[run]]
    if not first or not second:
        return None, 0.0
    f, s = statistics.fmean(first), statistics.fmean(second)
    return (f + s) / 2, (s - f) / 2


if __name__ == "__main__":
    raise SystemExit(main())
