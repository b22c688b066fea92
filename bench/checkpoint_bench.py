"""Checkpoint benchmark: torch.distributed.checkpoint (DCP) save and load of an LLM-shaped
training state through ZoneGate, against the local disk, in the same run.

The state (`--gib`, default 1): bf16 weights of a small transformer (embedding, attention,
MLP, norms, LM head) plus the optimizer's fp32 master copy and two fp32 Adam moments, 14 bytes
per parameter; CPU tensors (`--device cuda` when there is a GPU). Each target saves it and
loads it back into fresh tensors; every byte is compared after each load.

Targets (`--targets`, interleaved run by run, medians of `--runs`):
- fs: FileSystemWriter/Reader to a directory on the machine's disk (the cluster's disk too);
  the files are evicted from the page cache (POSIX_FADV_DONTNEED) before the load, as the
  nodes' writes are (zonestore drops what it wrote), so both loads come from the disk.
- s3tc: s3torchconnector's S3StorageWriter/S3StorageReader (its default DCP-optimised reader,
  a CRT client with `--part-mib` parts).
- s3fs: torch's fsspec DCP writer/reader (FsspecWriter/FsspecReader) over s3fs.

The cluster is a real `zonegate dev` (12 nodes, tests/support/devcluster.py). CPU seconds per
GiB of state are reported per role: the gateway processes (uvicorn and its workers), the node
processes, and the client (this process: DCP, torch, the S3 client's threads), from
/proc/<pid>/stat. `--trace` also runs one traced load per S3 target through a logging proxy
(bench/reqtrace.py) and prints the request pattern (count, sizes, concurrency).

    python -m bench checkpoint [--gib 1] [--runs 3] [--threads 4] [--targets fs,s3tc,s3fs]
        [--part-mib 8] [--trace] [--src DIR] [--json F]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.procstat import RoleClock, loadavg

GiB = 1 << 30
MiB = 1 << 20
BUCKET = "ckpt"
ROLES = ("gateway", "node", "client")


def say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------- the state

def shapes(nbytes: int) -> list[tuple[str, tuple[int, ...]]]:
    """Parameter names and shapes of a transformer whose training state (14 bytes/param) is
    about `nbytes`: width from the size, ~8 layers' worth of blocks, a vocabulary of ~10 %."""
    params = max(nbytes // 14, 1 << 16)
    d = max(64, int(math.sqrt(0.8 * params / 96)) // 64 * 64)
    vocab = max(256, int(0.05 * params / d) // 64 * 64)
    per_layer = 12 * d * d + 2 * d
    layers = max(1, round((params - 2 * vocab * d) / per_layer))
    out: list[tuple[str, tuple[int, ...]]] = [("embed.weight", (vocab, d))]
    for i in range(layers):
        p = f"layers.{i}."
        out += [(p + "attn_norm.weight", (d,)), (p + "attn.qkv.weight", (3 * d, d)),
                (p + "attn.out.weight", (d, d)), (p + "mlp_norm.weight", (d,)),
                (p + "mlp.up.weight", (4 * d, d)), (p + "mlp.down.weight", (d, 4 * d))]
    out += [("norm.weight", (d,)), ("lm_head.weight", (vocab, d))]
    return out


def make_state(nbytes: int, device: str) -> dict[str, Any]:
    """The training state, random values of about `nbytes`."""
    import torch
    gen = torch.Generator().manual_seed(1234)
    model: dict[str, Any] = {}
    optim: dict[str, dict[str, Any]] = {"master": {}, "exp_avg": {}, "exp_avg_sq": {}}
    for name, shape in shapes(nbytes):
        master = torch.randn(shape, generator=gen, dtype=torch.float32)
        model[name] = master.to(torch.bfloat16).to(device)
        optim["master"][name] = master.to(device)
        optim["exp_avg"][name] = (torch.randn(shape, generator=gen) * 1e-3).to(device)
        optim["exp_avg_sq"][name] = torch.rand(shape, generator=gen).to(device) * 1e-6
    return {"model": model, "optim": optim}


def zeros_like_state(state: Any) -> Any:
    """A load's target: zeros of the saved state's shapes (sizing it again from the byte count
    rounds to other shapes, which DCP refuses)."""
    import torch
    if isinstance(state, dict):
        return {k: zeros_like_state(v) for k, v in state.items()}
    return torch.zeros_like(state)


def state_bytes(state: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(state))


def _tensors(state: Any) -> list[Any]:
    if isinstance(state, dict):
        return [t for k in sorted(state) for t in _tensors(state[k])]
    return [state]


def same_bytes(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Every byte of every tensor equal (bitwise, not by value)."""
    import torch
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(
        x.dtype == y.dtype and x.shape == y.shape
        and torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8))
        for x, y in zip(ta, tb, strict=True))


# ---------------------------------------------------------------------------- targets

class Target:
    name = ""

    def __init__(self, endpoint: str, threads: int, root: Path, part_mib: int) -> None:
        self.endpoint, self.threads, self.root, self.part_mib = endpoint, threads, root, part_mib

    def writer(self, ckpt: str) -> Any:
        raise NotImplementedError

    def reader(self, ckpt: str) -> Any:
        raise NotImplementedError

    def before_load(self, ckpt: str) -> None:
        pass

    def remove(self, ckpt: str) -> None:
        pass


class FsTarget(Target):
    name = "fs"

    def path(self, ckpt: str) -> Path:
        return self.root / "fs" / ckpt

    def writer(self, ckpt: str) -> Any:
        from torch.distributed.checkpoint import FileSystemWriter
        return FileSystemWriter(self.path(ckpt), thread_count=self.threads)

    def reader(self, ckpt: str) -> Any:
        from torch.distributed.checkpoint import FileSystemReader
        return FileSystemReader(self.path(ckpt))

    def before_load(self, ckpt: str) -> None:
        for f in self.path(ckpt).iterdir():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    def remove(self, ckpt: str) -> None:
        shutil.rmtree(self.path(ckpt), ignore_errors=True)


class S3tcTarget(Target):
    name = "s3tc"

    def _fs(self, reader_constructor: Any = None) -> Any:
        from s3torchconnector import S3ClientConfig
        from s3torchconnector._s3client import S3Client
        from s3torchconnector.dcp import S3FileSystem

        from tests.support.devcluster import REGION
        cfg = S3ClientConfig(force_path_style=True, part_size=self.part_mib * MiB)
        client = S3Client(REGION, endpoint=self.endpoint, s3client_config=cfg)
        return S3FileSystem(REGION, s3_client=client, reader_constructor=reader_constructor)

    def writer(self, ckpt: str) -> Any:
        from s3torchconnector.dcp import S3StorageWriter

        from tests.support.devcluster import REGION
        w = S3StorageWriter(REGION, f"s3://{BUCKET}/{ckpt}", thread_count=self.threads)
        w.fs = self._fs()  # the same writer, its client pointed at the cluster
        return w

    def reader(self, ckpt: str) -> Any:
        from s3torchconnector.dcp import S3StorageReader

        from tests.support.devcluster import REGION
        r = S3StorageReader(REGION, f"s3://{BUCKET}/{ckpt}")
        r.fs = self._fs(r._reader_constructor)
        return r


class S3fsTarget(Target):
    name = "s3fs"
    cache_type = ""  # s3fs's default_cache_type ("" = s3fs's own default, readahead)

    def options(self) -> dict[str, Any]:
        from tests.support.devcluster import ACCESS_KEY, REGION, SECRET_KEY
        opts: dict[str, Any] = {
            "key": ACCESS_KEY, "secret": SECRET_KEY,
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": REGION}}
        if self.cache_type:
            opts["default_cache_type"] = self.cache_type
        return opts

    def writer(self, ckpt: str) -> Any:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter
        return FsspecWriter(f"s3://{BUCKET}/{ckpt}", thread_count=self.threads,
                            sync_files=False, **self.options())

    def reader(self, ckpt: str) -> Any:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
        return FsspecReader(f"s3://{BUCKET}/{ckpt}", **self.options())


TARGETS = {t.name: t for t in (FsTarget, S3tcTarget, S3fsTarget)}


def fsspec_available() -> bool:
    try:
        import torch.distributed.checkpoint._fsspec_filesystem  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------- running

def timed(clock: RoleClock, fn: Any) -> tuple[float, dict[str, float]]:
    c0, t0 = clock.sample(), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    return wall, RoleClock.delta(c0, clock.sample())


def idle_rate(clock: RoleClock, seconds: float = 5.0) -> dict[str, float]:
    """CPU seconds per second the cluster's roles spend with no request (heartbeats, sweeps):
    subtracted from each phase's figures, which are of the requests alone."""
    a = clock.sample()
    time.sleep(seconds)
    d = RoleClock.delta(a, clock.sample())
    return {k: v / seconds for k, v in d.items() if k in ("gateway", "node")}


def one(target: Target, state: dict[str, Any], clock: RoleClock, device: str, run: int,
        s3: Any, idle: dict[str, float]) -> dict[str, Any]:
    import torch.distributed.checkpoint as dcp
    nbytes = state_bytes(state)
    ckpt = f"{target.name}-{run}-{int(time.time() * 1000)}"
    save_s, save_cpu = timed(clock, lambda: dcp.save(state, storage_writer=target.writer(ckpt)))
    target.before_load(ckpt)
    fresh = zeros_like_state(state)
    load_s, load_cpu = timed(clock, lambda: dcp.load(fresh, storage_reader=target.reader(ckpt)))
    exact = same_bytes(state, fresh)
    target.remove(ckpt)
    if target.name != "fs":
        delete_prefix(s3, ckpt)
    gib = nbytes / GiB
    row = {"target": target.name, "run": run, "bytes": nbytes, "save_s": save_s,
           "load_s": load_s, "save_mbps": nbytes / save_s / 1e6,
           "load_mbps": nbytes / load_s / 1e6, "exact": exact, "loadavg": loadavg()}
    for phase, cpu, wall in (("save", save_cpu, save_s), ("load", load_cpu, load_s)):
        for role in ROLES:
            net = cpu.get(role, 0.0) - idle.get(role, 0.0) * wall
            row[f"{phase}_cpu_{role}"] = max(net, 0.0) / gib
    say(f"  {target.name:5s} run {run}: save {row['save_mbps']:7.1f} MB/s, load "
        f"{row['load_mbps']:7.1f} MB/s, bytes {'exact' if exact else 'DIFFER'}; CPU-s/GiB "
        f"save gw {row['save_cpu_gateway']:.2f} nodes {row['save_cpu_node']:.2f} client "
        f"{row['save_cpu_client']:.2f}, load gw {row['load_cpu_gateway']:.2f} nodes "
        f"{row['load_cpu_node']:.2f} client {row['load_cpu_client']:.2f} (load avg "
        f"{row['loadavg']:.1f})")
    return row


def delete_prefix(s3: Any, prefix: str) -> None:
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=prefix + "/") for o in page.get("Contents", [])]
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k}
                                                             for k in keys[i:i + 1000]]})


def summarize(rows: list[dict[str, Any]], names: list[str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name in names:
        mine = [r for r in rows if r["target"] == name]
        if not mine:
            continue
        keys = [k for k, v in mine[0].items()
                if isinstance(v, float) and k not in ("run",)]
        out[name] = {k: statistics.median(r[k] for r in mine) for k in keys}
        out[name]["exact"] = all(r["exact"] for r in mine)  # type: ignore[assignment]
    if "fs" in out:
        for m in out.values():
            m["save_ratio"] = m["save_mbps"] / out["fs"]["save_mbps"]
            m["load_ratio"] = m["load_mbps"] / out["fs"]["load_mbps"]
    return out


def table(summary: dict[str, dict[str, float]]) -> str:
    lines = ["| target | save MB/s (× fs) | load MB/s (× fs) | bytes | save CPU-s/GiB gw / nodes "
             "/ client | load CPU-s/GiB gw / nodes / client |", "|---|---|---|---|---|---|"]
    for name, m in summary.items():
        lines.append(
            f"| {name} | {m['save_mbps']:.0f} ({m.get('save_ratio', 1):.2f}) | "
            f"{m['load_mbps']:.0f} ({m.get('load_ratio', 1):.2f}) | "
            f"{'exact' if m['exact'] else 'DIFFER'} | {m['save_cpu_gateway']:.2f} / "
            f"{m['save_cpu_node']:.2f} / {m['save_cpu_client']:.2f} | "
            f"{m['load_cpu_gateway']:.2f} / {m['load_cpu_node']:.2f} / "
            f"{m['load_cpu_client']:.2f} |")
    return "\n".join(lines)


@contextmanager
def cluster_up(root: Path, gib: float, src: Path | None):
    """`zonegate dev` (12 nodes, 2 gateway workers) with room for a few checkpoints at once:
    2 sparse drives of 64 MiB zones per node."""
    from bench.capacity_bench import dev_cluster
    zones = max(48, int(gib * 3 * 1.25 * 1024 / 64 / 24) + 8)
    with dev_cluster(root, "ckpt", zones=zones, zone_size="64M", src=src) as c:
        yield c


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench checkpoint", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gib", type=float, default=1.0, help="size of the training state")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=4, help="DCP writer threads (thread_count)")
    p.add_argument("--targets", default="fs,s3tc,s3fs")
    p.add_argument("--part-mib", type=int, default=8, help="s3torchconnector part size")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op threads (their spin-waits bill idle CPU to the client "
                   "on a loaded 2-core machine)")
    p.add_argument("--s3fs-cache", default="",
                   help="s3fs default_cache_type for the s3fs target (e.g. all, none; default: "
                   "s3fs's readahead)")
    p.add_argument("--device", default="", help="cpu or cuda (default: cuda when present)")
    p.add_argument("--trace", action="store_true",
                   help="also one traced load per S3 target: the request pattern")
    p.add_argument("--src", type=Path, help="run the cluster from this source tree")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support
    try:
        import torch
    except ImportError:
        say("checkpoint: torch is not installed (pip install -e '.[bench]'); skipped")
        return 0
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    S3fsTarget.cache_type = a.s3fs_cache
    torch.set_num_threads(a.torch_threads)
    names = [n for n in a.targets.split(",") if n]
    if "s3fs" in names and not fsspec_available():
        say("checkpoint: this torch has no fsspec DCP writer/reader: s3fs skipped")
        names.remove("s3fs")
    root = Path(tempfile.mkdtemp(prefix="zonegate-ckpt-"))
    state = make_state(int(a.gib * GiB), device)
    nbytes = state_bytes(state)
    say(f"checkpoint: {nbytes / GiB:.2f} GiB state ({len(_tensors(state))} tensors) on "
        f"{device}, {a.threads} writer threads, targets {names}, {a.runs} runs")
    rows: list[dict[str, Any]] = []
    traces: dict[str, Any] = {}
    try:
        with cluster_up(root, a.gib, a.src.resolve() if a.src else None) as cluster:
            from bench.capacity_bench import s3_client
            from tests.support.devcluster import ACCESS_KEY, SECRET_KEY
            os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
            s3 = s3_client(cluster)
            s3.create_bucket(Bucket=BUCKET)
            clock = RoleClock(cluster.child_pids())
            idle = idle_rate(clock)
            say(f"cluster processes: {sorted(set(clock.roles.values()))}; idle CPU-s/s: "
                + ", ".join(f"{k} {v:.3f}" for k, v in sorted(idle.items())))
            targets = [TARGETS[n](cluster.endpoint, a.threads, root, a.part_mib) for n in names]
            for run in range(a.runs):
                for t in targets:
                    rows.append(one(t, state, clock, device, run, s3, idle))
            if a.trace:
                from bench.reqtrace import traced_load
                for t in targets:
                    if t.name != "fs":
                        traces[t.name] = traced_load(t, state, cluster.endpoint, s3)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = summarize(rows, names)
    say(f"\ncheckpoint: medians of {a.runs} runs, {nbytes / GiB:.2f} GiB, load average "
        f"{statistics.median(r['loadavg'] for r in rows):.1f}\n" + table(summary))
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "summary": summary, "traces": traces,
                                      "bytes": nbytes, "threads": a.threads}, indent=1))
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
