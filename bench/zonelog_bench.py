"""Zone log benchmark: a ZoneLog on an emulated zoned drive against plain file writes, in one run.

  seq         sequential puts of 8 MiB records (2 GiB), each durable before the next starts,
              vs. the same bytes written to a plain file in 8 MiB writes + fdatasync each
              (+ POSIX_FADV_DONTNEED, as the emulated drive does). Target: ratio >= 0.9.
  small       4 KiB records from 64 concurrent writers, each put durable (group commit), all
              in one stream (one open zone), and again spread over 8 streams (8 open zones
              syncing in parallel). Target: >= 20,000 records/s. For scale: fdatasync'd 4 KiB
              appends/s to a plain file.
  checkpoint  20 checkpoints of 256 MiB (8 records each, one stream per checkpoint), delete
              the oldest 15, reclaim: device write amplification (device bytes, headers,
              padding and GC copies included / user bytes). Target: <= 1.02.
  fill        1000 streams (multipart-part-like 5 MiB records, 16 writers) into a drive of
              small zones (ZNS-like limits: 12 open / 14 active) until the first NoSpace:
              fraction of the capacity holding live records then. Target: >= 0.9.
  churn       random overwrites and deletes of 1-16 MiB records holding the drive at 80 % live,
              and again at 40 %: write amplification and put throughput of each, and their
              ratio (reclaim runs in the background, rate-limited, and for puts that wait).

Runs of seq are interleaved with the baseline and the median of --runs is reported;
MB/s = 10^6 bytes/s. `--scale` shrinks every size for a quick run (zone sizes too).

    python -m bench zonelog [--scale 1.0] [--runs 3] [--dir DIR] [--json out.json]
                            [--workloads seq,small,checkpoint,fill,churn]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import uvloop

from zonestore.emulated import EmulatedZonedDevice, Geometry, create_emulated_drive
from zonestore.errors import NoSpace
from zonestore.zonelog import ZoneLog

MiB = 1 << 20
KiB = 1 << 10
WORKLOADS = ("seq", "small", "checkpoint", "fill", "churn")


def _blocks(n: int, unit: int = 4 * KiB) -> int:
    return max(unit, n // unit * unit)


def make_drive(root: Path, name: str, zone_size: int, zones: int) -> EmulatedZonedDevice:
    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    create_emulated_drive(path, Geometry(nr_zones=zones, zone_size=zone_size,
                                         zone_capacity=zone_size))
    return EmulatedZonedDevice(path)


def baseline_seq(root: Path, total: int, rec: int, buf: bytes) -> float:
    """Plain file: write + fdatasync + drop from the page cache per record. Returns MB/s."""
    path = root / "baseline.dat"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        off = 0
        while off < total:
            view = memoryview(buf)[: min(rec, total - off)]
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], off + done)
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            off += len(view)
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()
    return total / dt / 1e6


async def zonelog_seq(root: Path, total: int, rec: int, buf: bytes, zone_size: int) -> dict:
    dev = make_drive(root, "seq", zone_size, total // zone_size + 6)
    log = await ZoneLog.open(dev, root / "seq" / "index.sqlite", background_reclaim=False)
    try:
        t0 = time.perf_counter()
        n = 0
        off = 0
        while off < total:
            size = min(rec, total - off)
            await log.put(f"seq.{n:06d}", memoryview(buf)[:size], stream="seq")
            off += size
            n += 1
        dt = time.perf_counter() - t0
        st = log.stats()
    finally:
        await log.close()
        dev.close()
        shutil.rmtree(root / "seq", ignore_errors=True)
    return {"mbps": total / dt / 1e6, "wa": st.write_amplification}


def baseline_syncs(root: Path, count: int) -> float:
    path = root / "syncs.dat"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(4 * KiB)
    try:
        t0 = time.perf_counter()
        for i in range(count):
            os.pwrite(fd, block, i * len(block))
            os.fdatasync(fd)
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()
    return count / dt


async def zonelog_small(root: Path, count: int, writers: int, zone_size: int,
                        streams: int = 1) -> dict:
    dev = make_drive(root, "small", zone_size, (count * 5 * KiB) // zone_size + 2 * streams + 6)
    log = await ZoneLog.open(dev, root / "small" / "index.sqlite", background_reclaim=False)
    body = os.urandom(4 * KiB)
    per = count // writers

    async def writer(w: int) -> None:
        for i in range(per):
            await log.put(f"w{w:02d}.{i:07d}", body, stream=f"small{w % streams}")

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(writer(w) for w in range(writers)))
        dt = time.perf_counter() - t0
        st = log.stats()
    finally:
        await log.close()
        dev.close()
        shutil.rmtree(root / "small", ignore_errors=True)
    return {"records_per_s": per * writers / dt, "flushes": st.flushes,
            "records_per_flush": per * writers / max(1, st.flushes),
            "wa": st.write_amplification}


async def zonelog_checkpoints(root: Path, ckpt: int, zone_size: int, n: int = 20,
                              keep: int = 5, shards: int = 8) -> dict:
    zones = n * (-(-ckpt // zone_size) + 1) + 8
    dev = make_drive(root, "ckpt", zone_size, zones)
    log = await ZoneLog.open(dev, root / "ckpt" / "index.sqlite", background_reclaim=False)
    shard = ckpt // shards
    buf = os.urandom(shard)
    try:
        t0 = time.perf_counter()
        for c in range(n):
            for s in range(shards):
                await log.put(f"ckpt{c:02d}.shard{s}", buf, stream=f"ckpt{c:02d}")
        write_s = time.perf_counter() - t0
        free_before = log.free_bytes()
        for c in range(n - keep):
            for s in range(shards):
                await log.delete(f"ckpt{c:02d}.shard{s}")
        t1 = time.perf_counter()
        res = await log.reclaim()
        reclaim_s = time.perf_counter() - t1
        st = log.stats()
        for c in range(n - keep, n):  # the survivors are intact
            for s in range(shards):
                got = b"".join([x async for x in await log.get(f"ckpt{c:02d}.shard{s}")])
                assert got == buf
    finally:
        await log.close()
        dev.close()
        shutil.rmtree(root / "ckpt", ignore_errors=True)
    return {"wa": st.write_amplification, "user_bytes": st.user_bytes_written,
            "device_bytes": st.device_bytes_written, "gc_bytes_copied": st.gc_bytes_copied,
            "zones_reset": res.zones_reset, "zones_evacuated": res.zones_evacuated,
            "freed_bytes": log.free_bytes() - free_before, "write_mbps": n * ckpt / write_s / 1e6,
            "reclaim_s": reclaim_s}


def _space_drive(root: Path, name: str, zone_size: int, zones: int) -> Path:
    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    create_emulated_drive(path, Geometry(nr_zones=zones, zone_size=zone_size,
                                         zone_capacity=zone_size, max_open_zones=12,
                                         max_active_zones=14))
    return path


async def zonelog_fill(root: Path, zone_size: int, zones: int, rec: int, streams: int = 1000,
                       writers: int = 16) -> dict:
    path = _space_drive(root, "fill", zone_size, zones)
    log = await ZoneLog.open_path(path, background_reclaim=True, reclaim_interval=1.0,
                                  space_wait=5.0)
    buf = os.urandom(rec)
    n = 0
    stored = 0
    try:
        t0 = time.perf_counter()

        async def writer() -> None:
            nonlocal n, stored
            while True:
                n += 1
                try:
                    await log.put(f"part{n}", buf, stream=f"upload{n % streams}")
                except NoSpace:
                    return
                stored += rec
        await asyncio.gather(*(writer() for _ in range(writers)))
        dt = time.perf_counter() - t0
        st = log.stats()
        cap = log.zone_capacity * len(log.seq_zones)
    finally:
        await log.close()
        shutil.rmtree(path, ignore_errors=True)
    return {"live_fraction": stored / cap, "capacity": cap, "wa": st.write_amplification,
            "stranded_bytes": st.stranded_bytes, "gc_bytes_copied": st.gc_bytes_copied,
            "mbps": stored / dt / 1e6}


async def zonelog_churn(root: Path, zone_size: int, zones: int, target: float,
                        sizes: list[int], writers: int = 8, rounds: float = 2.0) -> dict:
    """Fill to `target` of the capacity, then overwrite/delete at random (keeping live bytes
    at the target) until `rounds` x capacity more were put: WA and MB/s of that phase."""
    import random

    path = _space_drive(root, f"churn{int(target * 100)}", zone_size, zones)
    log = await ZoneLog.open_path(path, background_reclaim=True, reclaim_interval=0.5)
    rnd = random.Random(1)
    bufs = {sz: os.urandom(sz) for sz in sizes}
    cap = log.zone_capacity * len(log.seq_zones)
    limit = int(target * cap)
    live: dict[str, int] = {}
    held = 0
    n = 0
    put = 0
    busy: set[str] = set()

    async def writer(until: int, churn: bool) -> None:
        nonlocal held, n, put
        while put < until:
            size = rnd.choice(sizes)
            ids = [r for r in live if r not in busy]
            if held + size > limit:
                if not ids:
                    await asyncio.sleep(0.001)
                    continue
                rid = rnd.choice(ids)
                busy.add(rid)
                await log.delete(rid)
                held -= live.pop(rid)
                busy.discard(rid)
                continue
            if churn and ids and rnd.random() < 0.5:
                rid = rnd.choice(ids)  # overwrite
            else:
                n += 1
                rid = f"obj{n}"
            busy.add(rid)
            held += size
            await log.put(rid, bufs[size], stream=f"s{rnd.randrange(64)}")
            held -= live.get(rid, 0)
            live[rid] = size
            busy.discard(rid)
            put += size

    try:
        await asyncio.gather(*(writer(limit, False) for _ in range(writers)))
        st0 = log.stats()
        t0 = time.perf_counter()
        start = put
        await asyncio.gather(*(writer(start + int(rounds * cap), True) for _ in range(writers)))
        dt = time.perf_counter() - t0
        st = log.stats()
        for rid in list(live)[:50]:  # spot check
            got = b"".join([x async for x in await log.get(rid)])
            assert len(got) == live[rid]
    finally:
        await log.close()
        shutil.rmtree(path, ignore_errors=True)
    user = st.user_bytes_written - st0.user_bytes_written
    dev = st.device_bytes_written - st0.device_bytes_written
    return {"target": target, "wa": dev / user if user else 0.0, "mbps": user / dt / 1e6,
            "gc_bytes_copied": st.gc_bytes_copied - st0.gc_bytes_copied,
            "live_fraction": st.live_bytes / cap}


async def run(args: argparse.Namespace) -> dict:
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="zonelog-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    s = args.scale
    zone = _blocks(int(256 * MiB * min(1.0, s)), MiB) if s < 1 else 256 * MiB
    total = _blocks(int(2048 * MiB * s), 8 * MiB)
    rec = 8 * MiB
    buf = os.urandom(rec)
    out: dict = {"scale": s, "zone_size": zone}
    want = set(args.workloads)
    try:
        if "seq" in want:
            base, ours = [], []
            for _ in range(args.runs):
                base.append(baseline_seq(root, total, rec, buf))
                ours.append((await zonelog_seq(root, total, rec, buf, zone))["mbps"])
            out["seq"] = {"bytes": total, "baseline_mbps": statistics.median(base),
                          "zonelog_mbps": statistics.median(ours),
                          "ratios": [o / b for b, o in zip(base, ours, strict=True)]}
            out["seq"]["ratio"] = out["seq"]["zonelog_mbps"] / out["seq"]["baseline_mbps"]
        if "small" in want:
            count = max(6400, int(64_000 * s) // 64 * 64)
            out["small"] = await zonelog_small(root, count, 64, zone)
            out["small"]["records"] = count
            out["small_streams"] = await zonelog_small(root, count, 64, zone, streams=8)
            out["small"]["baseline_fdatasyncs_per_s"] = baseline_syncs(
                root, max(200, int(2000 * s)))
        if "checkpoint" in want:
            out["checkpoint"] = await zonelog_checkpoints(
                root, _blocks(int(256 * MiB * s), MiB), zone)
        small_zone = _blocks(int(32 * MiB * min(1.0, s * 4)), MiB)
        if "fill" in want:
            out["fill"] = await zonelog_fill(root, small_zone, 40, _blocks(int(5 * MiB * min(
                1.0, s * 4)), 64 * KiB))
        if "churn" in want:
            sizes = [_blocks(int(x * MiB * min(1.0, s * 4)), 64 * KiB) for x in (1, 4, 16)]
            out["churn80"] = await zonelog_churn(root, small_zone, 40, 0.8, sizes)
            out["churn40"] = await zonelog_churn(root, small_zone, 40, 0.4, sizes)
            out["churn_ratio"] = out["churn80"]["mbps"] / out["churn40"]["mbps"]
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    return out


def report(r: dict) -> None:
    rows = []
    if "seq" in r:
        seq = r["seq"]
        rows.append(("seq puts, 8 MiB records", f"{seq['zonelog_mbps']:,.0f} MB/s",
                     f"raw {seq['baseline_mbps']:,.0f} MB/s",
                     f"ratio {seq['ratio']:.2f} ("
                     + " ".join(f"{x:.2f}" for x in seq["ratios"]) + ")", ">= 0.9"))
    if "small" in r:
        small, sm8 = r["small"], r["small_streams"]
        rows += [
            ("4 KiB puts, 64 writers", f"{small['records_per_s']:,.0f} rec/s",
             f"raw fdatasync {small['baseline_fdatasyncs_per_s']:,.0f}/s",
             f"{small['records_per_flush']:.0f} rec/flush", ">= 20,000"),
            ("4 KiB puts, 64 writers, 8 streams", f"{sm8['records_per_s']:,.0f} rec/s",
             "(8 open zones flush in parallel)", f"{sm8['records_per_flush']:.0f} rec/flush",
             ">= 20,000"),
        ]
    if "checkpoint" in r:
        ck = r["checkpoint"]
        rows.append(("checkpoints 20, keep 5", f"WA {ck['wa']:.4f}",
                     f"GC copied {ck['gc_bytes_copied'] / MiB:.2f} MiB",
                     f"{ck['zones_reset']} zones reset, {ck['zones_evacuated']} evacuated",
                     "<= 1.02"))
    if "fill" in r:
        f = r["fill"]
        rows.append(("fill, 1000 streams, to first NoSpace", f"{f['live_fraction']:.3f} live",
                     f"WA {f['wa']:.3f}, stranded {f['stranded_bytes'] / MiB:.1f} MiB",
                     f"{f['mbps']:,.0f} MB/s", ">= 0.9"))
    if "churn80" in r:
        c8, c4 = r["churn80"], r["churn40"]
        rows += [
            ("churn at 80 % live", f"WA {c8['wa']:.3f}", f"{c8['mbps']:,.0f} MB/s",
             f"GC copied {c8['gc_bytes_copied'] / MiB:,.0f} MiB", "WA <= 1.5"),
            ("churn at 40 % live", f"WA {c4['wa']:.3f}", f"{c4['mbps']:,.0f} MB/s",
             f"GC copied {c4['gc_bytes_copied'] / MiB:,.0f} MiB",
             f"80/40 MB/s {r['churn_ratio']:.2f}"),
        ]
    try:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"zone log (scale {r['scale']}, zones of {r['zone_size'] // MiB} MiB)")
        for col in ("workload", "zone log", "baseline / detail", "", "target"):
            t.add_column(col)
        for row in rows:
            t.add_row(*row)
        Console().print(t)
    except ImportError:  # pragma: no cover - rich is a dependency
        for row in rows:
            print(" | ".join(row))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench zonelog", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="shrink sizes (e.g. 0.1)")
    p.add_argument("--runs", type=int, default=3, help="interleaved runs of seq (median)")
    p.add_argument("--dir", default=None, help="where to put the drives (default: a temp dir)")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   type=lambda v: [w for w in v.split(",") if w],
                   help=f"comma-separated subset of {','.join(WORKLOADS)} (default: all)")
    args = p.parse_args(argv)
    if bad := [w for w in args.workloads if w not in WORKLOADS]:
        p.error(f"unknown workload(s): {', '.join(bad)}")
    # On uvloop, as the node runs its zone logs.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        r = runner.run(run(args))
    report(r)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2) + "\n")
    return 0
