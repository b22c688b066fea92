"""Gateway benchmark: 1 GiB up and down with boto3 against the gateway and its peers, in one run.

Targets (each a real server process on 127.0.0.1):
  gateway  `zonegate dev` with 12 nodes (2 emulated zoned drives each) and the gateway
  null     bench/nullserver.py: accepts and discards, serves zeros - the client's ceiling here
  moto     moto's server mode (in memory; slow on GET, so it gets a smaller object)
  s3rver   s3rver from npm (files on disk), when npm can install it
Clients: boto3 upload_file/download_file with default transfer settings, with max_concurrency=2,
and with 64 MiB parts (what checkpoint writers use); and curl --aws-sigv4 (one streamed PUT and
one GET, a client that costs almost nothing) against the gateway and the null server. A
single-process pipeline (MD5 + pyeclib 8+2 encode + ten local files + fdatasync) is measured in
the same run as the cheap client's baseline.

MB/s are 10^6 bytes per second. CPU is user+system seconds per GiB moved, read from
/proc/<pid>/stat for each server process and all its descendants, and from getrusage for the
clients. Numbers from one noisy shared machine: read the ratios, not the absolutes.

    python -m bench gateway [--scale 0.25] [--skip moto,s3rver] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.erasure_bench import encode_to_files

MiB = 1024 * 1024
GiB = 1024 * MiB
TICK = os.sysconf("SC_CLK_TCK")
ACCESS_KEY = "BENCHACCESSKEY000001"
SECRET_KEY = "benchSecretKey0123456789abcdefghijklmnop"
REGION = "us-east-1"
BUCKET = "bench"
S3RVER_DIR = Path.home() / ".cache" / "zonegate-bench" / "s3rver"


# ---------------------------------------------------------------------------- measuring

def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, own + reaped children's CPU seconds) of a process, None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # fields[0] is state (field 3): utime, stime, cutime, cstime are fields 14-17.
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / TICK


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds of these processes and all their live descendants."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st:
                table[int(entry)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, seen, todo = 0.0, set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        total += table[pid][1]
        todo += children.get(pid, [])
    return total


def client_cpu() -> float:
    """This process (boto3's threads) plus reaped child processes (curl)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listening on {port} after {timeout:g}s")


def spawn(argv: list[str], **kw) -> subprocess.Popen:
    """Start a server that gets SIGTERM should the benchmark die (no servers left behind)."""
    from gateway.cli.devchild import child_preexec

    parent = os.getpid()
    return subprocess.Popen(argv, preexec_fn=lambda: child_preexec(parent), **kw)


def server_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    from gateway.server.serve import MALLOC_ENV
    for k, v in MALLOC_ENV.items():
        env.setdefault(k, v)
    return env


# ------------------------------------------------------------------------------ targets

@dataclass
class Target:
    name: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    port: int = 0
    proc: subprocess.Popen | None = None
    workdir: Path | None = None
    note: str = ""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def roles(self) -> dict[str, list[int]]:
        return {self.name: [self.proc.pid]} if self.proc else {}

    def start(self, work: Path) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Gateway(Target):
    def start(self, work: Path) -> None:
        self.port = free_port()
        self.workdir = work / "gateway-data"
        log = open(work / "gateway-dev.log", "ab")  # noqa: SIM115 - lives as long as the process
        env = {**server_env(), "ZONEGATE_ACCESS_KEY": ACCESS_KEY, "ZONEGATE_SECRET_KEY": SECRET_KEY}
        self.proc = spawn(
            [sys.executable, "-m", "gateway.cli", "dev", "--data", str(self.workdir), "--port",
             str(self.port), "--nodes", "12", "--zones", "96", "--zone-size", "64M"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 300
        while "ZoneGate is ready" not in (work / "gateway-dev.log").read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("zonegate dev did not start:\n" +
                                   (work / "gateway-dev.log").read_text(errors="replace")[-3000:])
            time.sleep(0.3)

    def roles(self) -> dict[str, list[int]]:
        cfg = str(self.workdir / "zonegate.toml").encode()
        roles: dict[str, list[int]] = {"gateway": [], "nodes": []}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cfg in argv:
                if b"serve" in argv:
                    roles["gateway"].append(int(entry))
                elif b"node" in argv:
                    roles["nodes"].append(int(entry))
        return roles

    def stop(self) -> None:
        super().stop()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


class NullServer(Target):
    def start(self, work: Path) -> None:
        self.port = free_port()
        self.proc = spawn([sys.executable, "-m", "bench.nullserver", "--port",
                                      str(self.port)], env=server_env(), stdin=subprocess.DEVNULL)
        wait_port(self.port, self.proc)


class Moto(Target):
    def start(self, work: Path) -> None:
        exe = Path(sys.executable).with_name("moto_server")
        if not exe.exists():
            raise RuntimeError("moto_server not installed (pip install -e '.[bench]')")
        self.port = free_port()
        self.proc = spawn([str(exe), "-H", "127.0.0.1", "-p", str(self.port)],
                                     env=server_env(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc)


class S3rver(Target):
    def start(self, work: Path) -> None:
        script = S3RVER_DIR / "node_modules" / "s3rver" / "bin" / "s3rver.js"
        if not script.exists():
            if not shutil.which("npm"):
                raise RuntimeError("npm is not installed")
            S3RVER_DIR.mkdir(parents=True, exist_ok=True)
            r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix",
                                str(S3RVER_DIR), "s3rver@3"], capture_output=True, text=True,
                               timeout=300)
            if r.returncode or not script.exists():
                raise RuntimeError(f"npm install s3rver failed: {r.stderr[-500:]}")
        self.access_key = self.secret_key = "S3RVER"
        self.port = free_port()
        self.workdir = work / "s3rver-data"
        self.proc = spawn(["node", str(script), "-d", str(self.workdir), "-a",
                                      "127.0.0.1", "-p", str(self.port), "--silent"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        wait_port(self.port, self.proc)

    def stop(self) -> None:
        super().stop()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


# ------------------------------------------------------------------------------ clients

@dataclass
class Row:
    target: str
    client: str
    op: str
    nbytes: int
    seconds: float
    client_cpu: float
    server_cpu: dict[str, float] = field(default_factory=dict)
    error: str = ""

    @property
    def mbps(self) -> float:
        return self.nbytes / self.seconds / 1e6 if self.seconds and not self.error else 0.0

    def per_gib(self, cpu: float) -> float:
        return cpu / (self.nbytes / GiB) if self.nbytes else 0.0


def settle(targets: list[Target], quiet: float = 0.05, timeout: float = 30.0) -> None:
    """Wait until every server is idle: the gateway frees deleted objects' fragments and its
    nodes reclaim zones in the background, work that would otherwise be billed to whichever
    measurement runs next (quiet: CPU cores in use, summed over all servers)."""
    roots = [pid for t in targets for pids in t.roles().values() for pid in pids]
    deadline = time.monotonic() + timeout
    prev = tree_cpu(roots)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        cur = tree_cpu(roots)
        if (cur - prev) / 0.5 < quiet:
            return
        prev = cur


def measure(target: Target, client: str, op: str, nbytes: int, fn: Callable[[], None]) -> Row:
    roles = target.roles()
    before = {r: tree_cpu(p) for r, p in roles.items()}
    c0, t0 = client_cpu(), time.perf_counter()
    err = ""
    try:
        fn()
    except subprocess.CalledProcessError as e:
        err = f"{e.cmd[0]} exit {e.returncode}: {(e.stderr or b'').decode(errors='replace')[:150]}"
    except Exception as e:  # a failing peer is reported, not fatal
        err = f"{type(e).__name__}: {e}"[:200]
    seconds, ccpu = time.perf_counter() - t0, client_cpu() - c0
    after = {r: tree_cpu(p) for r, p in roles.items()}
    return Row(target.name, client, op, nbytes, seconds, ccpu,
               {r: after[r] - before[r] for r in roles}, err)


def boto3_client(target: Target):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=target.endpoint, aws_access_key_id=target.access_key,
                        aws_secret_access_key=target.secret_key, region_name=REGION,
                        config=Config(retries={"max_attempts": 1}, max_pool_connections=16))


def transfer_configs():
    from boto3.s3.transfer import TransferConfig

    return {
        "boto3 default": TransferConfig(),
        "boto3 max_concurrency=2": TransferConfig(max_concurrency=2),
        "boto3 64 MiB parts": TransferConfig(multipart_chunksize=64 * MiB),
    }


def run_boto3(target: Target, src: Path, size: int, scratch: Path, name: str, cfg) -> list[Row]:
    """One upload and one download of `src` with one transfer configuration."""
    s3 = boto3_client(target)
    try:
        s3.create_bucket(Bucket=BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    except Exception:
        pass  # peers that answer CreateBucket differently: the PUT will tell
    key = f"obj-{name.replace(' ', '-')}"
    dst = scratch / "download.bin"
    rows = [measure(target, name, "PUT", size,
                    lambda: s3.upload_file(str(src), BUCKET, key, Config=cfg))]
    settle([target])
    rows.append(measure(target, name, "GET", size,
                        lambda: s3.download_file(BUCKET, key, str(dst), Config=cfg)))
    dst.unlink(missing_ok=True)
    try:
        s3.delete_object(Bucket=BUCKET, Key=key)
    except Exception:
        pass
    s3.close()
    print(f"  {target.name:8s} {name:26s} PUT {rows[0].mbps:7.1f} MB/s  "
          f"GET {rows[1].mbps:7.1f} MB/s {rows[0].error or rows[1].error}", flush=True)
    return rows


def run_curl(target: Target, src: Path, size: int) -> list[Row]:
    url = f"{target.endpoint}/{BUCKET}/curl-object"
    # S3 (and the gateway) require x-amz-content-sha256 with SigV4; curl 7.x does not add it.
    base = ["curl", "-sS", "--fail", "--aws-sigv4", f"aws:amz:{REGION}:s3", "--user",
            f"{target.access_key}:{target.secret_key}", "-o", "/dev/null",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]

    def put() -> None:
        subprocess.run(base + ["-H", "Content-Type: application/octet-stream",
                               "-T", str(src), url], check=True, capture_output=True)

    def get() -> None:
        subprocess.run(base + [url], check=True, capture_output=True)

    rows = [measure(target, "curl", "PUT", size, put), measure(target, "curl", "GET", size, get)]
    print(f"  {target.name:8s} {'curl':26s} PUT {rows[0].mbps:7.1f} MB/s  "
          f"GET {rows[1].mbps:7.1f} MB/s {rows[0].error or rows[1].error}", flush=True)
    return rows


def run_pipeline(src: Path, size: int, scratch: Path) -> Row:
    """MD5 + 8+2 erasure coding (1 MiB segments) + ten local files + fdatasync, one process."""
    from pyeclib.ec_iface import ECDriver

    driver = ECDriver(k=8, m=2, ec_type="isa_l_rs_vand")
    driver.encode(b"\0" * MiB)  # the first call is slow: warm up outside the timing
    outdir = scratch / "pipeline"
    outdir.mkdir(exist_ok=True)

    def pipeline() -> None:
        with open(src, "rb") as f:
            encode_to_files(iter(lambda: f.read(MiB), b""), driver.encode, outdir)

    target = Target("pipeline")
    row = measure(target, "in-process", "PUT", size, pipeline)
    shutil.rmtree(outdir, ignore_errors=True)
    print(f"  pipeline (MD5 + EC 8+2 + 10 files + fdatasync): {row.mbps:7.1f} MB/s", flush=True)
    return row


def make_source(path: Path, size: int) -> None:
    block = hashlib.shake_256(b"zonegate-bench").digest(MiB)
    with open(path, "wb") as f:
        for i in range(0, size, MiB):
            f.write((struct.pack(">Q", i) + block[8:])[:size - i])


# ------------------------------------------------------------------------------ report

def report(rows: list[Row], size: int, small: int) -> str:
    out = ["| target | client | op | size | MB/s | client CPU s/GiB | server CPU s/GiB |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        server = ", ".join(f"{k} {r.per_gib(v):.2f}" for k, v in r.server_cpu.items()) or "-"
        total = sum(r.server_cpu.values())
        if len(r.server_cpu) > 1:
            server += f" (total {r.per_gib(total):.2f})"
        rate = f"{r.mbps:.1f}" if not r.error else f"failed: {r.error}"
        out.append(f"| {r.target} | {r.client} | {r.op} | {r.nbytes / MiB:.0f} MiB | {rate} | "
                   f"{r.per_gib(r.client_cpu):.2f} | {server} |")
    rate = {(r.target, r.client, r.op): r.mbps for r in rows if not r.error}
    lines = ["", "Ratios (same run):", ""]
    for (t, c, op), v in sorted(rate.items()):
        if t != "gateway":
            continue
        parts = []
        if rate.get(("null", c, op)):
            parts.append(f"{v / rate[('null', c, op)]:.2f}x null")
        peers = [rate.get((p, c, op), 0) for p in ("moto", "s3rver")]
        if max(peers):
            parts.append(f"{v / max(peers):.2f}x best of moto/s3rver")
        if c == "curl" and op == "PUT" and rate.get(("pipeline", "in-process", "PUT")):
            parts.append(f"{v / rate[('pipeline', 'in-process', 'PUT')]:.2f}x pipeline baseline")
        if parts:
            lines.append(f"- gateway, {c}, {op}: " + ", ".join(parts))
    if small != size and any(r.target == "moto" for r in rows):
        lines.append(f"\nmoto moved {small / MiB:.0f} MiB objects, the others {size / MiB:.0f} MiB: "
                     "moto keeps objects in memory and its GET of 1 GiB ran at ~10 MB/s here "
                     "(shared/notes/performance.md). Smaller objects flatter it.")
    return "\n".join(out + lines)


def medians(rows: list[Row]) -> list[Row]:
    """Per (target, client, op): the run with the median time (failed runs count as slowest)."""
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.target, r.client, r.op), []).append(r)
    out = []
    for group in groups.values():
        group.sort(key=lambda r: (bool(r.error), r.seconds))
        out.append(group[(len(group) - 1) // 2])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench gateway", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="object size = scale x 1 GiB")
    p.add_argument("--moto-scale", type=float, default=0.125,
                   help="moto's object size relative to the others (default 1/8)")
    p.add_argument("--skip", default="", help="comma-separated targets to skip "
                   "(gateway,null,moto,s3rver,curl,pipeline)")
    p.add_argument("--runs", type=int, default=1,
                   help="interleaved runs; the median run is reported (default 1)")
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir)")
    args = p.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    size = max(MiB, int(GiB * args.scale) // MiB * MiB)
    small = max(MiB, int(size * args.moto_scale) // MiB * MiB)
    work = Path(tempfile.mkdtemp(prefix="zg-bench-", dir=args.workdir))
    scratch = Path("/dev/shm") if Path("/dev/shm").is_dir() else work
    scratch = Path(tempfile.mkdtemp(prefix="zg-bench-", dir=scratch))
    src, small_src = work / "source.bin", work / "small.bin"
    print(f"gateway bench: {size / MiB:.0f} MiB objects, work dir {work}", flush=True)
    make_source(src, size)
    make_source(small_src, small)
    rows: list[Row] = []
    try:
        # Every server runs for the whole benchmark and the clients take turns, so that the
        # ratios compare measurements taken close together on this noisy machine.
        plan: list[tuple[Target, Path, int]] = []
        try:
            for name, cls in (("null", NullServer), ("gateway", Gateway), ("moto", Moto),
                              ("s3rver", S3rver)):
                if name in skip:
                    continue
                target = cls(name)
                try:
                    target.start(work)
                except Exception as e:
                    print(f"  {name}: skipped ({e})", flush=True)
                    target.stop()
                    continue
                plan.append((target, small_src if name == "moto" else src,
                             small if name == "moto" else size))
            for run in range(args.runs):
                if args.runs > 1:
                    print(f"run {run + 1} of {args.runs}", flush=True)
                if "pipeline" not in skip:
                    rows.append(run_pipeline(src, size, work))
                everyone = [t for t, _, _ in plan]
                for cname, cfg in transfer_configs().items():
                    for target, path, n in plan:
                        settle(everyone)
                        rows += run_boto3(target, path, n, scratch, cname, cfg)
                if "curl" not in skip and not shutil.which("curl"):
                    print("  curl: skipped (not installed)")
                elif "curl" not in skip:
                    for target, path, n in plan:
                        if target.name in ("gateway", "null"):
                            settle(everyone)
                            rows += run_curl(target, path, n)
        finally:
            for target, _, _ in plan:
                target.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    text = report(medians(rows), size, small)
    if args.runs > 1:
        text += f"\nMedians of {args.runs} interleaved runs."
    print("\n" + text)
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
