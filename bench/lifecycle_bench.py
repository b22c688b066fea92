"""Lifecycle benchmark: checkpoint retention by an S3 lifecycle rule, end to end.

A `zonegate dev` cluster (12 nodes x 2 emulated drives, small zones; tests/support/devcluster.py) with
a short lifecycle day (`[gateway] lifecycle_day_seconds`). The client writes C checkpoints as
torch.distributed.checkpoint lays them out (F shard files of S MiB each, boto3 multipart, plus
a small `.metadata` object per `run1/step-N/` directory); the bucket's lifecycle rule
(`Expiration` by prefix and age, and `AbortIncompleteMultipartUpload`) deletes the old ones.
The drives are small enough that every zone is written several times over the run.

Reported (sums over all 24 drives, from every node's /v1/stats and /metrics): device write
amplification (device bytes / zone-log user bytes; target <= 1.02), bytes copied by reclaim,
zones reclaimed (reset or evacuated), zone reuse (device bytes / raw capacity), write
failures (target 0), and the surviving objects read back byte-exact.

    python -m bench lifecycle [--checkpoints 40] [--files 4] [--file-mib 16] [--zones 20]
        [--zone-mib 2] [--day 1] [--keep-days 2] [--json F] [--keep DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MiB = 1 << 20


@contextmanager
def lifecycle_cluster(root: Path, *, zones: int, zone_mib: int, day: float):
    """A dev cluster whose config (written before its first start, which `zonegate dev`
    then reuses) shortens the lifecycle day."""
    from erasure.config import write_config
    from gateway.cli.devconfig import new_config
    from tests.support.devcluster import DevCluster
    data = root / "lifecycle" / "data"
    cluster = DevCluster(data, nodes=12, zones=zones, zone_size=f"{zone_mib}M", workers=2)
    data.mkdir(parents=True, exist_ok=True)
    cfg = new_config(data, 12, "127.0.0.1", cluster.port)
    cfg["gateway"].update(lifecycle_day_seconds=day,
                          lifecycle_interval_seconds=max(0.2, day / 8),
                          lifecycle_rate=2000)
    write_config(cluster.config_path, cfg)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def reclaimed_zones(cluster: Any) -> float:
    """Sum of every node's zonegate_node_drive_reclaimed_zones counter (unsigned /metrics
    from loopback)."""
    from erasure.config import ClusterConfig
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    total = 0.0
    for n in ClusterConfig.load(cluster.config_path).nodes:
        try:
            with opener.open(n.url + "/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError:
            continue
        for m in re.finditer(r"^zonegate_node_drive_reclaimed_zones_total\{[^}]*\} (\S+)$",
                             text, re.M):
            total += float(m.group(1))
    return total


def run(root: Path, *, checkpoints: int, files: int, file_mib: int, zones: int,
        zone_mib: int, day: float, keep_days: int) -> dict[str, Any]:
    from boto3.s3.transfer import TransferConfig

    from bench.capacity_bench import (
        Data,
        delta,
        drive_totals,
        error_text,
        raw_capacity,
        s3_client,
        say,
        wa,
    )
    data = Data()
    tc = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB,
                        max_concurrency=4)
    with lifecycle_cluster(root, zones=zones, zone_mib=zone_mib, day=day) as cl:
        s3 = s3_client(cl)
        s3.create_bucket(Bucket="ckpt")
        s3.put_bucket_lifecycle_configuration(Bucket="ckpt", LifecycleConfiguration={"Rules": [
            {"ID": "old-checkpoints", "Filter": {"Prefix": "run1/"}, "Status": "Enabled",
             "Expiration": {"Days": keep_days}},
            {"ID": "crashed-uploads", "Filter": {}, "Status": "Enabled",
             "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 10}}]})
        raw = raw_capacity(cl, zones, zone_mib * MiB)
        before, zones_before = drive_totals(cl), reclaimed_zones(cl)
        failures: list[str] = []
        written: dict[str, tuple[int, int]] = {}
        user = 0
        started = time.monotonic()

        def layout(step: int) -> list[tuple[str, int, int]]:
            base = f"run1/step-{step:05d}/"
            out = [(base + f"__{j}_0.distcp", step * 100 + j, file_mib * MiB)
                   for j in range(files)]
            return out + [(base + ".metadata", step * 100 + 99, 4096)]

        for step in range(checkpoints):
            for key, seed, size in layout(step):
                try:
                    s3.upload_fileobj(io.BytesIO(data.body(seed, size)), "ckpt", key,
                                      Config=tc)
                    user += size
                    written[key] = (seed, size)
                except Exception as e:
                    failures.append(f"step {step} {key}: {error_text(e)}")
            if step % 10 == 9:
                say(f"  lifecycle: {step + 1} checkpoints written, {len(failures)} failures")
        seconds = time.monotonic() - started
        # Stop the rule so nothing expires while the survivors (the newest checkpoints, not
        # yet old enough) are read back.
        s3.delete_bucket_lifecycle(Bucket="ckpt")
        listed = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(
            Bucket="ckpt") for o in p.get("Contents", [])]
        bad = [k for k in listed if k not in written or
               s3.get_object(Bucket="ckpt", Key=k)["Body"].read() != data.body(*written[k])]
        steps = {k.split("/")[1] for k in listed}
        whole = sum(all(k in listed for k, _, _ in layout(int(s.split("-")[1])))
                    for s in steps)
        # the sweeper frees the expired fragments; wait until the nodes' live bytes settle
        prev, settled = -1.0, time.monotonic() + 120
        while time.monotonic() < settled:
            live = drive_totals(cl)["live_bytes"]
            if live == prev:
                break
            prev = live
            time.sleep(3)
        after, zones_after = drive_totals(cl), reclaimed_zones(cl)
        return {
            "checkpoints": checkpoints, "files": files, "file_mib": file_mib,
            "drives": f"24 x {zones} zones of {zone_mib} MiB", "raw_bytes": raw,
            "lifecycle_day_seconds": day, "expire_after_days": keep_days,
            "user_bytes": user, "failures": len(failures), "failure_examples": failures[:5],
            "surviving_objects": len(listed), "surviving_checkpoints": len(steps),
            "whole_checkpoints": whole, "survivors_bad": bad,
            "expired_objects": len(written) - len(listed),
            "device_wa": wa(before, after),
            "gc_bytes_copied": delta(before, after, "gc_bytes_copied"),
            "zones_reclaimed": zones_after - zones_before,
            "zone_reuse": delta(before, after, "device_bytes_written") / raw,
            "seconds": seconds, "MBps": user / seconds / 1e6,
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench lifecycle", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoints", type=int, default=40)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--file-mib", type=int, default=16)
    p.add_argument("--zones", type=int, default=20)
    p.add_argument("--zone-mib", type=int, default=2)
    # What the drives hold is (keep-days x day) seconds of writes: a 3-second day suited the
    # 10 MB/s of 2026-12-02; at today's 130 MB/s it kept more checkpoints alive than the
    # drives hold, and the run failed on full drives (bench/README.md, lifecycle).
    p.add_argument("--day", type=float, default=1.0, help="lifecycle day, seconds")
    p.add_argument("--keep-days", type=int, default=2, help="the rule's Expiration Days")
    p.add_argument("--keep", type=Path, help="keep the cluster's data here")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support.devcluster
    root = a.keep or Path(tempfile.mkdtemp(prefix="zonegate-lifecycle-"))
    try:
        r = run(root, checkpoints=a.checkpoints, files=a.files, file_mib=a.file_mib,
                zones=a.zones, zone_mib=a.zone_mib, day=a.day, keep_days=a.keep_days)
        print(f"lifecycle: {r['failures']} failures (target 0); {r['expired_objects']} objects "
              f"expired by the rule, {r['surviving_objects']} survive "
              f"({r['whole_checkpoints']}/{r['surviving_checkpoints']} checkpoints whole), "
              f"{len(r['survivors_bad'])} bad; WA {r['device_wa']:.4f} (target <= 1.02), "
              f"reclaim copied {r['gc_bytes_copied'] / MiB:.1f} MiB, "
              f"{r['zones_reclaimed']:.0f} zones reclaimed, zones reused "
              f"{r['zone_reuse']:.2f} x; {r['MBps']:.1f} MB/s; {r['failure_examples'][:2]}",
              flush=True)
        if a.json:
            a.json.write_text(json.dumps(r, indent=2, default=str))
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
