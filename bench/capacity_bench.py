"""Capacity benchmark: how much of the drives ZoneGate can use, through S3, in one run.

Each workload starts its own `zonegate dev` (12 nodes x 2 emulated drives, ZNS-like limits of
12 open / 14 active zones, small zones so the drives fill in seconds; tests/support/devcluster.py) and
talks to it with boto3, as users do. Figures come from the S3 answers and from every node's
`/v1/stats` (summed over all 24 drives).

- fill: U multipart uploads in flight (3 parts of 5 MiB each, every upload under its own key
  prefix, so on every drive as many lifetime classes as uploads), their parts sent round by
  round, batch after batch, until the first refusal. Reported: the user bytes stored at that
  point / (raw sequential capacity x k/(k+m)). Target >= 0.95. `fill-shared`: the same with
  every key in one directory (`aws s3 cp --recursive`), one lifetime class.
- checkpoint: C checkpoints (F files of S MiB, boto3 multipart, plus a small `.metadata`
  object each), keeping the newest 4 (DeleteObjects on the older ones), on drives small enough
  that every zone is written >= 3 times over the run. Reported: refusals (target 0), the
  survivors read back byte-exact, device WA (sum of device_bytes_written / sum of
  user_bytes_written, all drives; target <= 1.02), reclaim's copied bytes, zone reuse (device
  bytes / raw capacity).
- churn: random overwrites and deletes of 1-64 MiB objects (boto3 upload_fileobj) holding the
  data on the drives (live objects, puts in flight, old copies being overwritten) at 40 %,
  then (same cluster) at 80 % of the usable capacity: WA of each churn phase
  and PUT throughput at 80 % / at 40 %. Target WA <= 1.5 at 80 %.

    python -m bench capacity [--workloads fill,checkpoint,churn] [--uploads 200]
        [--concurrency 8] [--checkpoints 40] [--src DIR] [--keep DIR] [--json F]

`--src DIR` runs the cluster (gateway and nodes) from another source tree, e.g. main's:
`git -C /work/main archive HEAD | tar -x -C DIR`. The benchmark's own client code is this one.
Throughputs are from one noisy shared machine: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MiB = 1 << 20
PART = 5 * MiB
POOL = 80 * MiB


class Data:
    """Deterministic object bodies: a header naming (seed, size), then bytes of a random pool."""

    def __init__(self) -> None:
        self.pool = os.urandom(POOL)

    def body(self, seed: int, size: int) -> bytes:
        head = struct.pack(">QQ", seed, size)[:size]
        rest = size - len(head)
        off = (seed * 1_048_583) % (POOL - rest) if rest < POOL else 0
        return head + self.pool[off:off + rest]


# ---------------------------------------------------------------------------- the cluster

@contextmanager
def dev_cluster(root: Path, name: str, *, zones: int, zone_size: str, src: Path | None):
    from tests.support.devcluster import DevCluster

    class Cluster(DevCluster):
        def env(self) -> dict[str, str]:
            env = super().env()
            if src is not None:
                env["PYTHONPATH"] = str(src)
            return env

    data = root / name / "data"
    cluster = Cluster(data, nodes=12, zones=zones, zone_size=zone_size, workers=2)
    here = os.getcwd()
    try:
        if src is not None:
            os.chdir(src)  # `python -m gateway.cli` finds that tree's packages first
        try:
            cluster.start()
        finally:
            os.chdir(here)
        yield cluster
    finally:
        cluster.stop()


def cluster_health(cluster: Any) -> dict[str, Any]:
    """The gateway's /health/cluster (which tree runs shows in its keys: `nodes_full`)."""
    import urllib.error
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(cluster.endpoint + "/health/cluster", timeout=30) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.loads(e.read())
    except OSError as e:
        return {"error": str(e)}


def s3_client(cluster: Any, pool: int = 16) -> Any:
    import boto3
    from botocore.config import Config

    from tests.support.devcluster import ACCESS_KEY, REGION, SECRET_KEY
    return boto3.client("s3", endpoint_url=cluster.endpoint, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, region_name=REGION,
                        config=Config(retries={"max_attempts": 1}, max_pool_connections=pool,
                                      read_timeout=120, connect_timeout=30))


def node_stats(cluster: Any) -> list[dict[str, Any]]:
    """Every node's /v1/stats answer."""
    from erasure.config import ClusterConfig
    from erasure.nodeclient import NodeClient, make_session

    cfg = ClusterConfig.load(cluster.config_path)

    async def run() -> list[dict[str, Any]]:
        session = make_session()
        try:
            return list(await asyncio.gather(*(NodeClient(n, cfg.secret, session).stats()
                                               for n in cfg.nodes)))
        finally:
            await session.close()
    return asyncio.run(run())


def drive_totals(cluster: Any) -> dict[str, float]:
    """Sums over every drive of the cluster (the keys the nodes report, missing ones as 0)."""
    keys = ("user_bytes_written", "device_bytes_written", "gc_bytes_copied", "live_bytes",
            "free_bytes", "writable_bytes", "stranded_bytes", "garbage_bytes", "used_bytes",
            "empty_zones")
    out = dict.fromkeys(keys, 0.0)
    zones: dict[str, int] = {}
    docs = node_stats(cluster)
    for doc in docs:
        for d in doc.get("drives", []):
            for k in keys:
                v = d.get(k)
                if isinstance(v, int | float):
                    out[k] += v
            for cond, n in (d.get("zones_by_condition") or {}).items():
                zones[str(cond)] = zones.get(str(cond), 0) + int(n)
    out["zones"] = zones  # type: ignore[assignment]
    out["has_writable"] = any(  # type: ignore[assignment]
        "writable_bytes" in d for doc in docs for d in doc.get("drives", []))
    return out


def live_spread(cluster: Any, zones: int, zone_size: int) -> dict[str, float]:
    """How evenly the data sits: the least and most live fraction of a drive and of a node
    (live bytes / sequential capacity)."""
    cap = (zones - 2) * zone_size
    drives, nodes = [], []
    for doc in node_stats(cluster):
        lives = [d.get("live_bytes", 0) / cap for d in doc.get("drives", [])]
        if lives:
            drives += lives
            nodes.append(sum(lives) / len(lives))
    if not drives:
        return {}
    return {"drive_mean": sum(drives) / len(drives), "drive_min": min(drives),
            "drive_max": max(drives), "node_min": min(nodes), "node_max": max(nodes)}


def raw_capacity(cluster: Any, zones: int, zone_size: int) -> int:
    """Bytes of all sequential zones of all drives (the emulated drives keep 2 conventional)."""
    from erasure.config import ClusterConfig
    cfg = ClusterConfig.load(cluster.config_path)
    drives = sum(len(n.drives) for n in cfg.nodes)
    return drives * (zones - 2) * zone_size


def ec_fraction(cluster: Any) -> float:
    from erasure.config import ClusterConfig
    s = ClusterConfig.load(cluster.config_path).erasure.scheme
    return s.k / (s.k + s.m)


def delta(a: dict[str, float], b: dict[str, float], key: str) -> float:
    return float(b.get(key, 0.0)) - float(a.get(key, 0.0))


def wa(a: dict[str, float], b: dict[str, float]) -> float:
    user = delta(a, b, "user_bytes_written")
    return delta(a, b, "device_bytes_written") / user if user else 0.0


def say(msg: str) -> None:
    print(msg, flush=True)


def error_text(e: BaseException) -> str:
    resp = getattr(e, "response", None)
    if isinstance(resp, dict):
        err = resp.get("Error", {})
        status = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"{status} {err.get('Code')}: {err.get('Message')}"
    return f"{type(e).__name__}: {e}"


# ---------------------------------------------------------------------------- fill

def run_fill(root: Path, src: Path | None, *, uploads: int, concurrency: int,
             zones: int, zone_mib: int, shared: bool = False) -> dict[str, Any]:
    zone_size = zone_mib * MiB
    data = Data()
    name = "fill-shared" if shared else "fill"
    with dev_cluster(root, name, zones=zones, zone_size=f"{zone_mib}M", src=src) as cl:
        s3 = s3_client(cl, concurrency + 4)
        s3.create_bucket(Bucket="fill")
        raw = raw_capacity(cl, zones, zone_size)
        usable = raw * ec_fraction(cl)
        before = drive_totals(cl)
        stop = threading.Event()
        lock = threading.Lock()
        stored = {"parts": 0, "bytes": 0, "objects": 0}
        first_error: list[str] = []
        started = time.monotonic()
        batch = 0
        while not stop.is_set() and batch < 1000:
            ups = []
            for i in range(uploads):
                # own prefix: as many lifetime classes as uploads; shared: one directory
                key = (f"dir/u{batch:03d}-{i:04d}.bin" if shared
                       else f"u{batch:03d}-{i:04d}/data.bin")
                ups.append((key, s3.create_multipart_upload(Bucket="fill", Key=key)["UploadId"],
                            []))

            def part(up: tuple[str, str, list], n: int) -> None:
                if stop.is_set():
                    return
                key, uid, etags = up
                try:
                    r = s3.upload_part(Bucket="fill", Key=key, UploadId=uid, PartNumber=n,
                                       Body=data.body(hash((key, n)) & 0xFFFFFFFF, PART))
                    etags.append({"PartNumber": n, "ETag": r["ETag"]})
                    with lock:
                        stored["parts"] += 1
                        stored["bytes"] += PART
                    if n == 3:
                        s3.complete_multipart_upload(Bucket="fill", Key=key, UploadId=uid,
                                                     MultipartUpload={"Parts": etags})
                        with lock:
                            stored["objects"] += 1
                except Exception as e:  # the first refusal ends the fill
                    with lock:
                        if not first_error:
                            first_error.append(f"part {n} of {key}: {error_text(e)}")
                    stop.set()

            with ThreadPoolExecutor(concurrency) as ex:
                for n in (1, 2, 3):  # round by round: every upload of the batch stays open
                    list(ex.map(lambda up, n=n: part(up, n), ups))
                    if stop.is_set():
                        break
            batch += 1
            say(f"  fill: batch {batch}: {stored['bytes'] / MiB:.0f} MiB stored "
                f"({stored['bytes'] / usable:.3f} of usable)")
        seconds = time.monotonic() - started
        at_refusal = drive_totals(cl)
        time.sleep(12)  # does it recover on its own (reclaim), or does it stay refused?
        retry = "ok"
        try:
            key = "retry/after.bin"
            up = s3.create_multipart_upload(Bucket="fill", Key=key)["UploadId"]
            s3.upload_part(Bucket="fill", Key=key, UploadId=up, PartNumber=1,
                           Body=data.body(7, PART))
        except Exception as e:
            retry = error_text(e)
        return {
            "uploads_in_flight": uploads, "client_concurrency": concurrency,
            "keys": "one directory" if shared else "a directory per upload",
            "drives": f"24 x {zones} zones of {zone_mib} MiB",
            "raw_bytes": raw, "usable_bytes": usable, "stored_user_bytes": stored["bytes"],
            "parts_stored": stored["parts"], "objects_completed": stored["objects"],
            "fill_fraction": stored["bytes"] / usable,
            "live_fraction_of_raw": delta(before, at_refusal, "live_bytes") / raw,
            "first_refusal": first_error[0] if first_error else None,
            "retry_12s_later": retry, "seconds": seconds,
            "MBps": stored["bytes"] / seconds / 1e6,
            "at_refusal": at_refusal, "health": cluster_health(cl),
        }


# ---------------------------------------------------------------------------- checkpoints

def run_checkpoint(root: Path, src: Path | None, *, checkpoints: int, files: int,
                   file_mib: int, zones: int, zone_mib: int) -> dict[str, Any]:
    from boto3.s3.transfer import TransferConfig
    zone_size = zone_mib * MiB
    data = Data()
    tc = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB,
                        max_concurrency=4)
    with dev_cluster(root, "checkpoint", zones=zones, zone_size=f"{zone_mib}M", src=src) as cl:
        s3 = s3_client(cl)
        s3.create_bucket(Bucket="ckpt")
        raw = raw_capacity(cl, zones, zone_size)
        before = drive_totals(cl)
        failures: list[str] = []
        kept: list[int] = []
        written: set[str] = set()
        started = time.monotonic()
        user = 0

        def keys(step: int) -> list[tuple[str, int, int]]:
            base = f"run1/step-{step:05d}/"
            out = [(base + f"shard-{j}.pt", step * 100 + j, file_mib * MiB)
                   for j in range(files)]
            return out + [(base + ".metadata", step * 100 + 99, 4096)]

        for step in range(checkpoints):
            for key, seed, size in keys(step):
                try:
                    s3.upload_fileobj(io.BytesIO(data.body(seed, size)), "ckpt", key,
                                      Config=tc)
                    user += size
                    written.add(key)
                except Exception as e:
                    failures.append(f"step {step} {key}: {error_text(e)}")
            kept.append(step)
            if len(kept) > 4:
                old = kept.pop(0)
                r = s3.delete_objects(Bucket="ckpt", Delete={
                    "Objects": [{"Key": k} for k, _, _ in keys(old)], "Quiet": True})
                failures += [f"delete {e['Key']}: {e['Code']}" for e in r.get("Errors", [])]
            if step % 10 == 9:
                say(f"  checkpoint: {step + 1} written, {len(failures)} failures")
        seconds = time.monotonic() - started
        bad = []
        for step in kept:
            for key, seed, size in keys(step):
                if key not in written:
                    continue  # its upload failed (counted in failures)
                try:
                    got = s3.get_object(Bucket="ckpt", Key=key)["Body"].read()
                except Exception as e:
                    got = repr(e).encode()
                if got != data.body(seed, size):
                    bad.append(key)
        after = drive_totals(cl)
        return {
            "checkpoints": checkpoints, "files": files, "file_mib": file_mib,
            "drives": f"24 x {zones} zones of {zone_mib} MiB", "raw_bytes": raw,
            "user_bytes": user, "failures": len(failures), "failure_examples": failures[:5],
            "survivors_checked": sum(k in written for st in kept for k, _, _ in keys(st)),
            "survivors_bad": bad,
            "device_wa": wa(before, after),
            "gc_bytes_copied": delta(before, after, "gc_bytes_copied"),
            "zone_reuse": delta(before, after, "device_bytes_written") / raw,
            "seconds": seconds, "MBps": user / seconds / 1e6, "end": after,
            "health": cluster_health(cl),
        }


# ---------------------------------------------------------------------------- churn

class Churn:
    """Objects of 1-64 MiB under 16 prefixes, put (boto3 upload_fileobj) and deleted at random
    so that the user bytes the drives hold stay at a target: live objects, the puts in flight
    and the old copies of objects being overwritten (they are live on the drives until the
    new copy commits); `held_in_target=False` counts the live objects only (the bench's
    accounting before 2026-12-02, which let the drives hold up to workers x 2 x 64 MiB
    more)."""

    def __init__(self, s3: Any, data: Data, rng: random.Random) -> None:
        from boto3.s3.transfer import TransferConfig
        self.s3, self.data, self.rng = s3, data, rng
        self.tc = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB,
                                 max_concurrency=2)
        self.live: dict[str, int] = {}
        self.busy: set[str] = set()
        self.lock = threading.Lock()
        self.next_id = 0
        self.refusals: list[str] = []
        self.put_bytes = 0
        self.put_seconds = 0.0
        self.inflight = 0  # bytes of puts in flight and of the old copies they overwrite
        self.held_in_target = True

    def _size(self) -> int:
        return self.rng.randint(1 * MiB, 64 * MiB)

    def step(self, target: int, churn: bool) -> int:
        """One put (after deletes that keep live <= target); bytes put."""
        with self.lock:
            size = self._size()
            victims = []
            held = self.inflight if self.held_in_target else 0
            while self.live and sum(self.live.values()) + held + size > target:
                k = self.rng.choice([k for k in self.live if k not in self.busy] or [None])
                if k is None:
                    break
                victims.append(k)
                self.live.pop(k)
            idle = [k for k in self.live if k not in self.busy]
            old = 0
            if churn and idle and self.rng.random() < 0.5:
                key = self.rng.choice(idle)  # an overwrite
                old = self.live.pop(key)
            else:
                key = f"ds/d{self.rng.randrange(16):02d}/obj-{self.next_id:06d}"
                self.next_id += 1
            self.busy.add(key)
            self.inflight += size + old
            seed = self.next_id * 7919 + size
            self.next_id += 1
        for k in victims:
            self.s3.delete_object(Bucket="churn", Key=k)
        t = time.monotonic()
        try:
            self.s3.upload_fileobj(io.BytesIO(self.data.body(seed, size)), "churn", key,
                                   Config=self.tc)
            ok = True
        except Exception as e:
            ok = False
            with self.lock:
                self.refusals.append(f"{key}: {error_text(e)}")
        dt = time.monotonic() - t
        with self.lock:
            self.busy.discard(key)
            self.inflight -= size + old
            if ok:
                self.live[key] = size
                self.put_bytes += size
                self.put_seconds += dt
        return size if ok else 0

    def run(self, target: int, volume: int, churn: bool, workers: int,
            until: Callable[[], bool] | None = None) -> float:
        """Put until `volume` bytes (churn) or until live >= target (fill); wall seconds."""
        done = {"bytes": 0}
        stop = threading.Event()
        started = time.monotonic()
        refused = len(self.refusals)

        def worker() -> None:
            while not stop.is_set():
                n = self.step(target, churn)
                with self.lock:
                    done["bytes"] += n
                    live = sum(self.live.values())
                    if (churn and done["bytes"] >= volume) or (
                            not churn and live + 32 * MiB >= target):
                        stop.set()
                    if len(self.refusals) - refused > 20:  # it is not going to work
                        stop.set()

        threads = [threading.Thread(target=worker) for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.monotonic() - started


def run_churn(root: Path, src: Path | None, *, zones: int, zone_mib: int, volume: float,
              workers: int, live_only: bool = False) -> dict[str, Any]:
    zone_size = zone_mib * MiB
    data = Data()
    with dev_cluster(root, "churn", zones=zones, zone_size=f"{zone_mib}M", src=src) as cl:
        s3 = s3_client(cl)
        s3.create_bucket(Bucket="churn")
        raw = raw_capacity(cl, zones, zone_size)
        usable = raw * ec_fraction(cl)
        churn = Churn(s3, data, random.Random(11))
        churn.held_in_target = not live_only
        out: dict[str, Any] = {"drives": f"24 x {zones} zones of {zone_mib} MiB",
                               "raw_bytes": raw, "usable_bytes": usable}
        for frac in (0.4, 0.8):
            target = int(usable * frac)
            churn.run(target, 0, False, workers)
            before = drive_totals(cl)
            churn.put_bytes, churn.put_seconds = 0, 0.0
            refused = len(churn.refusals)
            wall = churn.run(target, int(usable * volume), True, workers)
            after = drive_totals(cl)
            out[f"live_{int(frac * 100)}"] = {
                "target_live_bytes": target, "live_bytes_user": sum(churn.live.values()),
                "put_bytes": churn.put_bytes, "wall_seconds": wall,
                "put_MBps": churn.put_bytes / wall / 1e6 if wall else 0.0,
                "wa": wa(before, after),
                "gc_bytes_copied": delta(before, after, "gc_bytes_copied"),
                "refusals": len(churn.refusals) - refused,
                "refusal_examples": churn.refusals[refused:refused + 3],
                "live_spread": live_spread(cl, zones, zone_size),
            }
            say(f"  churn at {frac:.0%}: WA {out[f'live_{int(frac * 100)}']['wa']:.3f}, "
                f"{out[f'live_{int(frac * 100)}']['put_MBps']:.1f} MB/s, "
                f"{len(churn.refusals) - refused} refusals; live per drive / node "
                f"{out[f'live_{int(frac * 100)}']['live_spread']}")
        out["health"] = cluster_health(cl)
        lo, hi = out["live_40"], out["live_80"]
        out["put_throughput_ratio_80_vs_40"] = (hi["put_MBps"] / lo["put_MBps"]
                                                if lo["put_MBps"] else 0.0)
        return out


# ---------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench capacity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="fill,fill-shared,checkpoint,churn")
    p.add_argument("--uploads", type=int, default=200,
                   help="multipart uploads in flight in the fill (the issue's 1000 needs more "
                   "than 2 cores; see bench/README.md)")
    p.add_argument("--concurrency", type=int, default=8, help="client threads")
    p.add_argument("--fill-zones", type=int, default=64)
    p.add_argument("--fill-zone-mib", type=int, default=2)
    p.add_argument("--checkpoints", type=int, default=40)
    p.add_argument("--ckpt-files", type=int, default=4)
    p.add_argument("--ckpt-file-mib", type=int, default=16)
    p.add_argument("--ckpt-zones", type=int, default=20)
    p.add_argument("--ckpt-zone-mib", type=int, default=2)
    p.add_argument("--churn-zones", type=int, default=48)
    p.add_argument("--churn-zone-mib", type=int, default=2)
    p.add_argument("--churn-volume", type=float, default=0.6,
                   help="bytes put per churn phase, as a fraction of the usable capacity")
    p.add_argument("--churn-workers", type=int, default=3)
    p.add_argument("--churn-live-only", action="store_true",
                   help="hold only the live objects at the target, not the puts in flight and "
                   "the copies they overwrite (the accounting before 2026-12-02)")
    p.add_argument("--src", type=Path, help="run the cluster from this source tree")
    p.add_argument("--keep", type=Path, help="keep the clusters' data here (default: a "
                   "temporary directory, removed)")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support.devcluster
    root = a.keep or Path(tempfile.mkdtemp(prefix="zonegate-capacity-"))
    src = a.src.resolve() if a.src else None
    results: dict[str, Any] = {"src": str(src) if src else "this tree"}
    try:
        for w in a.workloads.split(","):
            say(f"== capacity: {w}")
            if w in ("fill", "fill-shared"):
                results[w] = r = run_fill(root, src, uploads=a.uploads,
                                          concurrency=a.concurrency, zones=a.fill_zones,
                                          zone_mib=a.fill_zone_mib, shared=w == "fill-shared")
                say(f"{w}: {r['fill_fraction']:.3f} of usable capacity stored at the first "
                    f"refusal (target >= 0.95); {r['parts_stored']} parts, "
                    f"{r['objects_completed']} objects; refusal: {r['first_refusal']}; "
                    f"12 s later: {r['retry_12s_later']}")
            elif w == "checkpoint":
                results["checkpoint"] = r = run_checkpoint(
                    root, src, checkpoints=a.checkpoints, files=a.ckpt_files,
                    file_mib=a.ckpt_file_mib, zones=a.ckpt_zones, zone_mib=a.ckpt_zone_mib)
                say(f"checkpoint: {r['failures']} failures (target 0), "
                    f"{r['survivors_checked']} survivors read, {len(r['survivors_bad'])} bad; "
                    f"WA {r['device_wa']:.4f} (target <= 1.02), reclaim copied "
                    f"{r['gc_bytes_copied'] / MiB:.1f} MiB, zones reused "
                    f"{r['zone_reuse']:.2f} x; {r['failure_examples'][:2]}")
            elif w == "churn":
                results["churn"] = r = run_churn(root, src, zones=a.churn_zones,
                                                 zone_mib=a.churn_zone_mib,
                                                 volume=a.churn_volume,
                                                 workers=a.churn_workers,
                                                 live_only=a.churn_live_only)
                say(f"churn: WA {r['live_40']['wa']:.3f} at 40 %, {r['live_80']['wa']:.3f} "
                    f"at 80 % (target <= 1.5); PUT throughput 80 %/40 % "
                    f"{r['put_throughput_ratio_80_vs_40']:.2f}; refusals "
                    f"{r['live_40']['refusals']} / {r['live_80']['refusals']}")
            else:
                say(f"unknown workload {w!r}")
                return 2
    finally:
        if a.json:
            a.json.write_text(json.dumps(results, indent=2, default=str))
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
