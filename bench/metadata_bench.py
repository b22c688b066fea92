"""Metadata benchmark: the embedded SQLite store against PostgreSQL, in one run.

1. Store-level commit rate: a bucket filled with `--list-objects` objects by 32 concurrent
   `put_object` writers on the store API (no HTTP): commits/s for each backend (PostgreSQL
   with a pool of 32 connections, SQLite with its one writer thread).
2. Listing that bucket, pages of 1000: the whole bucket without a delimiter, with delimiter "/"
   under a prefix of 100 common prefixes, under a deep prefix, and a delimiter that rolls up
   every key: p50/p99 per page of the store's list_objects, of boto3 ListObjectsV2 against one
   gateway on the store, and of the same request signed and sent raw (no boto3 parsing).
3. Small objects, the dataset-loader shape: 64 KiB objects, 8 boto3 threads, PUT `--objects`
   objects then GET them in random order: ops/s, p50/p99 per request, for one gateway on SQLite,
   one on PostgreSQL, and two on PostgreSQL behind HAProxy (loopback).

The cluster is the tests' (tests/support/multigwcluster.py): 6 node processes, 4+2, one gateway worker
each; PostgreSQL is a throwaway server (tests/support/pgserver.py: Debian's binaries, initdb into a
temporary directory, fsync on). Numbers from one noisy shared 2-core machine: read the ratios.

    python -m bench metadata [--objects 2000] [--list-objects 1000000] [--skip haproxy]
                             [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.procstat import task_stats

KiB = 1024
WRITERS = 32
CLIENT_THREADS = 8
SMALL = 64 * KiB
BUCKET_LIST = "listing"
BUCKET_SMALL = "small"
BUCKET_COMMIT = "commits"
OWNER = "alice"


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def ms(v: float) -> str:
    return f"{v * 1000:.1f}"


def list_key(i: int) -> str:
    """10 top prefixes x 100 second-level prefixes, objects 5 levels deep."""
    return f"d{i % 10}/s{(i // 10) % 100:02d}/train/shard/x/obj-{i:07d}"


# ------------------------------------------------------------------------ store level

LIST_MODES: dict[str, dict[str, str]] = {
    "flat": {},                                               # the whole bucket
    "delimiter": {"prefix": "d3/", "delimiter": "/"},         # 100 common prefixes
    "deep_prefix": {"prefix": "d3/s07/train/shard/x/"},       # a deep prefix, objects only
    "deep_delimiter": {"prefix": "d3/", "delimiter": "x"},    # rolls every key up: skipping
}

async def fill(target: str, n: int, password_file: str | None, max_pages: int,
               commits: int) -> dict[str, Any]:
    """Fill the listing bucket with n objects in bulk (bench/metadata_fill.py: the store's own
    tables, batched); time the store's listing pages; then the commit rate of `commits`
    put_object calls by WRITERS concurrent writers into another bucket."""
    from bench.metadata_fill import bulk_fill, records
    from gateway.metadata import BucketRecord, open_store
    kw: dict[str, Any] = {}
    if target.startswith("postgresql://"):
        kw = {"password_file": password_file, "pool_size": WRITERS}
    store = open_store(target, **kw)
    await store.start()
    await store.create_bucket(BucketRecord(BUCKET_LIST, OWNER, time.time()))
    await store.create_bucket(BucketRecord(BUCKET_COMMIT, OWNER, time.time()))
    secs = await bulk_fill(store, BUCKET_LIST, OWNER, n, list_key)
    print(f"  bulk fill of {n} objects: {secs:.1f} s", flush=True)
    listing = {name: await store_pages(store, max_pages, **kw)
               for name, kw in LIST_MODES.items()}
    counter = iter(records(BUCKET_COMMIT, OWNER, commits, list_key))
    lat: list[float] = []

    async def writer() -> None:
        for rec in counter:
            t = time.perf_counter()
            await store.put_object(rec)
            lat.append(time.perf_counter() - t)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(WRITERS)))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    commit = {"objects": commits, "seconds": round(wall, 1),
              "commits_per_s": round(commits / wall),
              "client_cpu_ms_per_commit": round(cpu / commits * 1000, 3),
              "p50_ms": round(pct(lat, 50) * 1000, 2), "p99_ms": round(pct(lat, 99) * 1000, 2)}
    await store.close()
    return {"fill_seconds": round(secs, 1), "commit": commit, "store_listing": listing}


async def store_pages(store: Any, max_pages: int, prefix: str = "",
                      delimiter: str = "") -> dict[str, Any]:
    """The store's own list_objects pages of 1000 (what one ListObjectsV2 page asks it)."""
    lat: list[float] = []
    cpu: list[float] = []
    after = ""
    while len(lat) < max_pages:
        t, c = time.perf_counter(), time.process_time()
        page = await store.list_objects(BUCKET_LIST, prefix, delimiter, after, 1000)
        lat.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        if not page.truncated:
            break
        after = page.next_marker or ""
    return {"pages": len(lat), "p50_ms": round(pct(lat, 50) * 1000, 1),
            "p99_ms": round(pct(lat, 99) * 1000, 1),
            "cpu_p50_ms": round(pct(cpu, 50) * 1000, 2)}


# ------------------------------------------------------------------------ over HTTP

def s3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, proxies={},
                                      max_pool_connections=CLIENT_THREADS * 2,
                                      retries={"max_attempts": 3, "mode": "standard"}))


def tree_pids(roots: list[int]) -> list[int]:
    """These processes and all their live descendants."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def sched_ns(pids: list[int]) -> tuple[int, int, int]:
    """(ns on a CPU, ns runnable but waiting for one, times scheduled in) summed over every
    thread of pids (/proc/<pid>/task/<tid>/schedstat): a page's server CPU, how long the
    scheduler kept the server's threads from running while they had work (other processes'
    load), and how many wake-ups / hand-offs it took (each one a wait on a loaded machine)."""
    run = wait = n = 0
    for pid in pids:
        for _tid, text in task_stats(pid, "schedstat"):
            try:
                a, b, c = text.split()
            except ValueError:
                continue
            run += int(a)
            wait += int(b)
            n += int(c)
    return run, wait, n


def raw_pages(gw: Any, mode: dict[str, str], max_pages: int,
              server_pids: list[int] | None = None) -> dict[str, list[float]]:
    """ListObjectsV2 pages as raw HTTP requests on one kept-alive connection, SigV4-signed by
    botocore's signer before the clock starts: the gateway's answer time (request, listing,
    XML, transfer) without boto3's XML parsing, which costs more than the gateway here.
    Per page: latency, this client thread's CPU, and (server_pids: the gateway's process tree,
    plus PostgreSQL's) the servers' CPU and run-queue wait, from schedstat read outside the
    timed window."""
    import http.client
    from urllib.parse import urlencode

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY
    signer = S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1")
    host = f"127.0.0.1:{gw.port}"
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    out: dict[str, list[float]] = {"lat": [], "client_cpu": [], "server_cpu": [],
                                   "server_wait": [], "server_slices": []}
    pids = server_pids or []
    token = ""
    try:
        while len(out["lat"]) < max_pages:
            q = {"list-type": "2", "max-keys": "1000", "prefix": mode.get("prefix", "")}
            if mode.get("delimiter"):
                q["delimiter"] = mode["delimiter"]
            if token:
                q["continuation-token"] = token
            path = f"/{BUCKET_LIST}?{urlencode(sorted(q.items()))}"
            areq = AWSRequest(method="GET", url=f"http://{host}{path}", data=b"",
                              headers={"Host": host,
                                       "x-amz-content-sha256": hashlib.sha256(b"").hexdigest()})
            signer.add_auth(areq)
            headers = dict(areq.headers.items())
            run0, wait0, n0 = sched_ns(pids)
            t, c = time.perf_counter(), time.thread_time()
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            lat = time.perf_counter() - t
            cpu = time.thread_time() - c
            run1, wait1, n1 = sched_ns(pids)
            out["lat"].append(lat)
            out["client_cpu"].append(cpu)
            out["server_cpu"].append((run1 - run0) / 1e9)
            out["server_wait"].append((wait1 - wait0) / 1e9)
            out["server_slices"].append((n1 - n0) / 1000)  # pct() reports x 1000
            assert resp.status == 200, body[:300]
            m = re.search(rb"<NextContinuationToken>([^<]+)</NextContinuationToken>", body)
            if m is None:
                break
            token = m.group(1).decode()
    finally:
        conn.close()
    return out


def raw_summary(raw: dict[str, list[float]]) -> dict[str, Any]:
    """Percentiles (ms) of a raw_pages run (`server_slices`: times the servers' threads were
    scheduled in, a count; `server_wait` sums over threads, so it can exceed the latency
    when two wait at once)."""
    out: dict[str, Any] = {"pages": len(raw["lat"])}
    for name, vals in (("lat", raw["lat"]), ("server_cpu", raw["server_cpu"]),
                       ("server_wait", raw["server_wait"]),
                       ("server_slices", raw["server_slices"]),
                       ("client_cpu", raw["client_cpu"])):
        for p in (50, 90, 99):
            out[f"{name}_p{p}_ms"] = round(pct(vals, p) * 1000, 2)
        out[f"{name}_max_ms"] = round(max(vals, default=float("nan")) * 1000, 2)
    # the slice counts are counts, not ms
    out = {(k[:-3] if k.startswith("server_slices") else k): v for k, v in out.items()}
    return out


def list_pages(endpoint: str, max_pages: int, gw: Any = None,
               boto3_pages: int = 20, raw_flat_pages: int | None = None,
               server_pids: list[int] | None = None) -> dict[str, Any]:
    cl = s3_client(endpoint)
    out: dict[str, Any] = {}
    for name, mode in LIST_MODES.items():
        args = {"Prefix": mode.get("prefix", "")}
        if mode.get("delimiter"):
            args["Delimiter"] = mode["delimiter"]
        lat: list[float] = []
        token: str | None = None
        items = 0
        while len(lat) < min(max_pages, boto3_pages):
            kw = dict(args, Bucket=BUCKET_LIST, MaxKeys=1000)
            if token:
                kw["ContinuationToken"] = token
            t = time.perf_counter()
            r = cl.list_objects_v2(**kw)
            lat.append(time.perf_counter() - t)
            items += len(r.get("Contents", [])) + len(r.get("CommonPrefixes", []))
            if not r.get("IsTruncated"):
                break
            token = r["NextContinuationToken"]
        # entries: keys + common prefixes
        out[name] = {"pages": len(lat), "entries": items, "p50_ms": round(pct(lat, 50) * 1000, 1),
                     "p99_ms": round(pct(lat, 99) * 1000, 1)}
        if gw is not None:
            n = raw_flat_pages if name == "flat" and raw_flat_pages else max_pages
            raw = raw_pages(gw, mode, n, server_pids)
            out[name]["raw_http_p50_ms"] = round(pct(raw["lat"], 50) * 1000, 1)
            out[name]["raw_http_p99_ms"] = round(pct(raw["lat"], 99) * 1000, 1)
            if name == "flat":
                out[name]["raw_http"] = raw_summary(raw)
    return out


class TreeGateways:
    """Gateways on one store from several source trees (each its own venv's python, run in
    its own directory so `-m gateway.cli` imports that tree): this tree's and a baseline's,
    listed in turns in the same minutes."""

    def __init__(self, root: Path, target: str, trees: dict[str, Path],
                 password_file: str | None) -> None:
        from tests.support.multigwcluster import MultiGateway
        self.names = list(trees)
        self.trees = trees
        self.mg = MultiGateway(root, target, gateways=len(trees), password_file=password_file)
        self.mg.start_gateway = self._start  # type: ignore[method-assign]

    def _start(self, i: int, timeout: float = 60.0) -> None:
        from tests.support.multigwcluster import ready
        from tests.support.nodeproc import MALLOC_ENV
        gw, tree = self.mg.gws[i], self.trees[self.names[i]]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(MALLOC_ENV, PYTHONUNBUFFERED="1")
        with open(gw.log_path, "ab") as logf:
            gw.proc = subprocess.Popen(
                [str(tree / ".venv" / "bin" / "python"), "-m", "gateway.cli", "serve",
                 "--config", str(gw.config_path), "--workers", "1", "--log-level", "info"],
                cwd=tree, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if gw.proc.poll() is not None:
                raise RuntimeError(f"gateway {i} exited {gw.proc.returncode}:\n{gw.log_tail()}")
            if ready(gw.endpoint):
                return
            time.sleep(0.1)
        raise RuntimeError(f"gateway {i} not ready after {timeout:g} s")

    def __enter__(self) -> TreeGateways:
        self.mg.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.mg.stop()


def compare_trees(name: str, target: str, root: Path, args: argparse.Namespace,
                  password_file: str | None, pg_pid: int | None) -> dict[str, Any]:
    """Flat raw pages from this tree's gateway and the baseline tree's, on the same store,
    taking turns for --rounds rounds (order alternating)."""
    trees = {"this": Path(__file__).resolve().parent.parent,
             "base": Path(args.base_tree).resolve()}
    got: dict[str, dict[str, list[float]]] = {t: {} for t in trees}
    with TreeGateways(root / f"trees-{name}", target, trees, password_file) as tg:
        gws = dict(zip(tg.names, tg.mg.gws, strict=True))
        for r in range(args.rounds):
            order = tg.names if r % 2 == 0 else tg.names[::-1]
            for t in order:
                pids = tree_pids([gws[t].proc.pid] + ([pg_pid] if pg_pid else []))
                raw = raw_pages(gws[t], LIST_MODES["flat"], args.raw_pages or args.max_pages,
                                pids)
                for k, v in raw.items():
                    got[t].setdefault(k, []).extend(v)
                print(f"[{name}] round {r + 1} {t}: {raw_summary(raw)}", flush=True)
    out = {t: raw_summary(v) for t, v in got.items()}
    print(f"[{name}] this tree vs base, flat raw pages: {out}", flush=True)
    return out


def small_objects(endpoint: str, n: int,
                  cpu_of: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """PUT n 64 KiB objects with CLIENT_THREADS threads, then GET them in random order;
    `cpu_of`: process trees (name -> root pids) whose CPU ms per request are reported."""
    from bench.gateway_bench import tree_cpu
    cl = s3_client(endpoint)
    try:
        cl.create_bucket(Bucket=BUCKET_SMALL)
    except cl.exceptions.BucketAlreadyOwnedByYou:
        pass
    data = random.Random(1).randbytes(SMALL)
    prefix = uuid.uuid4().hex[:8]
    keys = [f"{prefix}/sample-{i:06d}" for i in range(n)]
    out: dict[str, Any] = {}
    for phase in ("put", "get"):
        order = keys if phase == "put" else random.Random(2).sample(keys, len(keys))
        before = {k: tree_cpu(v) for k, v in (cpu_of or {}).items()}
        out[phase] = timed_phase(cl, phase, order, data)
        for k, v in (cpu_of or {}).items():
            out[phase][f"{k}_cpu_ms_per_op"] = round((tree_cpu(v) - before[k]) / n * 1000, 2)
    return out


def timed_phase(cl: Any, phase: str, order: list[str], data: bytes) -> dict[str, Any]:
    lat: list[float] = []
    lock = threading.Lock()
    it = iter(order)  # shared by the threads: next() on a list iterator is atomic

    def work() -> None:
        for key in it:
            t = time.perf_counter()
            if phase == "put":
                cl.put_object(Bucket=BUCKET_SMALL, Key=key, Body=data)
            else:
                body = cl.get_object(Bucket=BUCKET_SMALL, Key=key)["Body"].read()
                assert len(body) == SMALL
            dt = time.perf_counter() - t
            with lock:
                lat.append(dt)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(CLIENT_THREADS) as ex:
        for f in [ex.submit(work) for _ in range(CLIENT_THREADS)]:
            f.result()
    wall = time.perf_counter() - t0
    return {"ops_per_s": round(len(order) / wall, 1), "p50_ms": round(pct(lat, 50) * 1000, 1),
            "p99_ms": round(pct(lat, 99) * 1000, 1)}


HAPROXY_CFG = """\
global
    maxconn 512
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch
frontend s3
    bind 127.0.0.1:{port}
    default_backend gateways
backend gateways
    balance roundrobin
    option httpchk GET /health/ready
    http-check expect status 200
    default-server inter 1s fall 2 rise 2
{servers}
"""


# ------------------------------------------------------------------------ the run

def run_backend(name: str, target: str, root: Path, args: argparse.Namespace,
                password_file: str | None, pg_pid: int | None = None) -> dict[str, Any]:
    from tests.support.multigwcluster import MultiGateway
    res: dict[str, Any] = {}
    print(f"[{name}] filling {args.list_objects} objects in bulk ...", flush=True)
    res.update(asyncio.run(fill(target, args.list_objects, password_file, args.max_pages,
                               args.commits)))
    print(f"[{name}] commit rate: {res['commit']}", flush=True)
    print(f"[{name}] store listing: {res['store_listing']}", flush=True)
    if args.base_tree:
        res["trees"] = compare_trees(name, target, root, args, password_file, pg_pid)
    with MultiGateway(root / name, target, gateways=1, password_file=password_file) as mg:
        endpoint = mg.gws[0].endpoint
        pids = tree_pids([mg.gws[0].proc.pid] + ([pg_pid] if pg_pid else []))
        res["listing"] = list_pages(endpoint, args.max_pages, mg.gws[0], args.boto3_pages,
                                    args.raw_pages, pids)
        print(f"[{name}] listing: {res['listing']}", flush=True)
        if args.interleave or "small" in args.skip.split(","):
            return res  # small objects: small_interleaved, both backends up at once
        cpu_of = {"gateway": [mg.gws[0].proc.pid]}
        if pg_pid is not None:
            cpu_of["postgres"] = [pg_pid]
        res["small"] = small_objects(endpoint, args.objects, cpu_of)
        print(f"[{name}] small objects, one gateway: {res['small']}", flush=True)
    return res


def small_interleaved(targets: dict[str, str], root: Path, args: argparse.Namespace,
                      password_file: str, pg_pid: int) -> dict[str, Any]:
    """Small objects on one SQLite and one PostgreSQL gateway, both clusters up at once, the
    two taking turns round by round (order alternating): on a shared machine whose load moves
    by the minute, a ratio of measurements taken minutes apart says little."""
    import contextlib

    from tests.support.multigwcluster import MultiGateway
    rounds: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        mgs = {name: stack.enter_context(MultiGateway(
            root / f"small-{name}", target, gateways=1,
            password_file=password_file if name == "postgres" else None))
            for name, target in targets.items()}
        for r in range(args.interleave):
            order = list(mgs) if r % 2 == 0 else list(mgs)[::-1]
            got: dict[str, Any] = {}
            for name in order:
                cpu_of = {"gateway": [mgs[name].gws[0].proc.pid]}
                if name == "postgres":
                    cpu_of["postgres"] = [pg_pid]
                got[name] = small_objects(mgs[name].gws[0].endpoint, args.objects, cpu_of)
            for phase in ("put", "get"):
                got[f"pg_vs_sqlite_{phase}"] = round(got["postgres"][phase]["ops_per_s"] /
                                                     got["sqlite"][phase]["ops_per_s"], 2)
            print(f"[interleaved] round {r + 1}: {got}", flush=True)
            rounds.append(got)
    out: dict[str, Any] = {"rounds": rounds}
    for phase in ("put", "get"):
        out[f"pg_vs_sqlite_{phase}_median"] = pct([g[f"pg_vs_sqlite_{phase}"] for g in rounds], 50)
    return out


def run_haproxy(target: str, root: Path, args: argparse.Namespace,
                password_file: str | None) -> dict[str, Any] | None:
    from tests.support.gwcluster import free_port
    from tests.support.multigwcluster import MultiGateway
    if shutil.which("haproxy") is None:
        print("[haproxy] skipped: haproxy is not installed", flush=True)
        return None
    with MultiGateway(root / "haproxy", target, gateways=2, password_file=password_file) as mg:
        port = free_port()
        cfg = root / "haproxy.cfg"
        cfg.write_text(HAPROXY_CFG.format(port=port, servers="\n".join(
            f"    server gw{g.index} {g.host}:{g.port} check" for g in mg.gws)))
        proc = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(2.5)  # the health checks mark both gateways up
            res = small_objects(f"http://127.0.0.1:{port}", args.objects)
        finally:
            proc.kill()
            proc.wait()
    print(f"[haproxy] small objects, two gateways on PostgreSQL: {res}", flush=True)
    return res


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench metadata", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=2000, help="64 KiB objects per PUT/GET run")
    ap.add_argument("--list-objects", type=int, default=1_000_000,
                    help="objects in the listing bucket (inserted through the store API)")
    ap.add_argument("--commits", type=int, default=5000,
                    help="put_object commits timed with 32 writers (a bucket of their own)")
    ap.add_argument("--max-pages", type=int, default=200, help="pages timed per listing mode")
    ap.add_argument("--boto3-pages", type=int, default=20,
                    help="pages timed per listing mode through boto3 (slow to parse)")
    ap.add_argument("--raw-pages", type=int, default=0,
                    help="flat pages timed as raw HTTP requests (default: --max-pages)")
    ap.add_argument("--base-tree", default=None, metavar="DIR",
                    help="also run a gateway from this source tree (its own .venv) on the same "
                         "store: flat raw pages from both, taking turns for --rounds rounds")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of --base-tree")
    ap.add_argument("--interleave", type=int, default=0, metavar="ROUNDS",
                    help="small objects on both backends at once, taking turns for ROUNDS "
                         "rounds (instead of once each after its listing)")
    ap.add_argument("--skip", default="", help="comma list of sqlite,postgres,haproxy,small (small: "
                                           "no small-object phase)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.pgserver import PgServer
    root = Path(tempfile.mkdtemp(prefix="zonegate-metabench-"))
    results: dict[str, Any] = {"objects": args.objects, "list_objects": args.list_objects}
    pg = None
    try:
        if "sqlite" not in skip:
            results["sqlite"] = run_backend("sqlite", str(root / "meta.sqlite"), root, args, None)
        if "postgres" not in skip or "haproxy" not in skip:
            pg = PgServer()
            pg.start()
            pf = str(pg.password_file)
        if "postgres" not in skip:
            pg_pid = int((Path(pg.data) / "postmaster.pid").read_text().split()[0])
            results["postgres"] = run_backend("postgres", pg.new_database("bench"), root, args,
                                              pf, pg_pid)
        if args.interleave and "sqlite" in results and "postgres" in results:
            results["small_interleaved"] = small_interleaved(
                {"sqlite": str(root / "small.sqlite"), "postgres": pg.new_database("small")},
                root, args, pf, pg_pid)
        if "haproxy" not in skip:
            results["haproxy"] = run_haproxy(pg.new_database("benchha"), root, args, pf)
    finally:
        if pg is not None:
            pg.destroy()
        shutil.rmtree(root, ignore_errors=True)
    if all("small" in results.get(b, {}) for b in ("sqlite", "postgres")):
        for phase in ("put", "get"):
            results[f"pg_vs_sqlite_{phase}"] = round(
                results["postgres"]["small"][phase]["ops_per_s"] /
                results["sqlite"]["small"][phase]["ops_per_s"], 2)
    print(json.dumps(results, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
