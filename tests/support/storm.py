"""The fault storm (issue 12): boto3 writers run while node daemons (<= m at a time), gateway
workers, the gateway's master alone (its workers must die with it), the gateway's whole process
group and the whole cluster are SIGKILLed and restarted;
afterwards every acknowledged write must read back byte-exact, acknowledged deletes must stay
deleted, every fragment on every node must have an owner (the audit), `zonegate repair` must
find nothing lost and `zonegate drive fsck` must be clean on every drive.

Used by tests/faults/test_fault_storm.py (short, in `make test`) and its `soak` variant.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from erasure.audit import AuditReport, audit
from erasure.cluster import ErasureCluster
from erasure.config import ClusterConfig
from gateway.metadata import SqliteStore
from tests.support.gwcluster import Gateway

MiB = 1 << 20
ZONEGATE = str(Path(sys.executable).parent / "zonegate")


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


@dataclass
class Tally:
    ops: Counter[str] = field(default_factory=Counter)      # acknowledged, by kind
    failed: Counter[str] = field(default_factory=Counter)   # not acknowledged, by kind
    status: Counter[int] = field(default_factory=Counter)   # 5xx answers seen
    codes: Counter[str] = field(default_factory=Counter)
    kills: Counter[str] = field(default_factory=Counter)      # kill events, by kind
    processes: int = 0                                         # processes SIGKILLed
    lock: threading.Lock = field(default_factory=threading.Lock)


class Writer(threading.Thread):
    """One boto3 client doing PUT, multipart, overwrite and delete on keys of its own. Each
    key's possible states: one once an operation on it was acknowledged, several while the
    last one was not (it may or may not have happened)."""

    def __init__(self, g: Gateway, n: int, stop: threading.Event, tally: Tally,
                 seed: int) -> None:
        super().__init__(daemon=True, name=f"writer{n}")
        self.g, self.n, self.stop, self.tally = g, n, stop, tally
        self.rnd = random.Random(seed)
        self.state: dict[str, set[tuple[int, int] | None]] = {}
        self.error: BaseException | None = None

    def client(self):
        return self.g.client(connect_timeout=5, read_timeout=60)

    def run(self) -> None:
        try:
            s3 = self.client()
            n = 0
            while not self.stop.is_set():
                n += 1
                self.step(s3, n)
        except BaseException as e:  # reported by the test
            self.error = e

    def step(self, s3, n: int) -> None:
        keys = list(self.state)
        r = self.rnd.random()
        if keys and r < 0.15:
            kind, key = "delete", self.rnd.choice(keys)
            new: tuple[int, int] | None = None
        else:
            kind = "multipart" if r > 0.9 else "put"
            if keys and r < 0.45:
                kind, key = ("overwrite" if kind == "put" else kind), self.rnd.choice(keys)
            else:
                key = f"w{self.n}/k{n:05d}"
            size = (5 * MiB + self.rnd.randrange(300_000) if kind == "multipart"
                    else self.rnd.choice((0, 1, 4096, 200_000, 1_100_000, 2_500_000)))
            new = (self.rnd.randrange(1 << 30), size)
        before = self.state.get(key, {None})
        try:
            if kind == "delete":
                s3.delete_object(Bucket="storm", Key=key)
            elif kind == "multipart":
                self.multipart(s3, key, payload(*new))
            else:
                s3.put_object(Bucket="storm", Key=key, Body=payload(*new))
        except (ClientError, BotoCoreError) as e:
            self.note_error(e)
            with self.tally.lock:
                self.tally.failed[kind] += 1
            self.state[key] = before | {new}
            time.sleep(0.2)
            return
        with self.tally.lock:
            self.tally.ops[kind] += 1
        self.state[key] = {new}

    def multipart(self, s3, key: str, data: bytes) -> None:
        up = s3.create_multipart_upload(Bucket="storm", Key=key)["UploadId"]
        try:
            parts = []
            for i, off in enumerate(range(0, len(data), 5 * MiB)):
                r = s3.upload_part(Bucket="storm", Key=key, UploadId=up, PartNumber=i + 1,
                                   Body=data[off:off + 5 * MiB])
                parts.append({"PartNumber": i + 1, "ETag": r["ETag"]})
            s3.complete_multipart_upload(Bucket="storm", Key=key, UploadId=up,
                                         MultipartUpload={"Parts": parts})
        except (ClientError, BotoCoreError):
            try:
                s3.abort_multipart_upload(Bucket="storm", Key=key, UploadId=up)
            except (ClientError, BotoCoreError):
                pass  # the upload's parts stay owned by it (swept when abandoned)
            raise

    def note_error(self, e: BaseException) -> None:
        if isinstance(e, ClientError):
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if status >= 500:
                with self.tally.lock:
                    self.tally.status[status] += 1
                    self.tally.codes[e.response.get("Error", {}).get("Code", "?")] += 1


def worker_pids(master: int) -> list[int]:
    """The uvicorn worker processes of a gateway master."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmd = (p / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == master and b"spawn_main" in cmd:
            out.append(int(p.name))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Chaos:
    def __init__(self, g: Gateway, tally: Tally, rnd: random.Random) -> None:
        self.g, self.tally, self.rnd = g, tally, rnd

    def kill_nodes(self, count: int, down_for: float) -> None:
        victims = self.rnd.sample(range(len(self.g.nodes.nodes)), count)
        for i in victims:
            self.g.nodes.kill(i)
        self.tally.kills["node"] += count
        self.tally.processes += count
        time.sleep(down_for)
        for i in victims:
            self.g.nodes.restart(i)

    def kill_worker(self) -> bool:
        pids = worker_pids(self.g.proc.pid)
        if not pids:
            return False
        os.kill(self.rnd.choice(pids), signal.SIGKILL)
        self.tally.kills["gateway worker"] += 1
        self.tally.processes += 1
        return True

    def kill_master(self) -> None:
        """SIGKILL of the gateway's master alone: its workers must die with it (none may keep
        serving the port), and a new master starts on the same port."""
        master = self.g.proc.pid
        workers = worker_pids(master)
        os.kill(master, signal.SIGKILL)
        self.g.proc.wait()
        deadline = time.monotonic() + 30
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [w for w in workers if _alive(w)]
        assert not left, f"workers {left} outlived their master {master}"
        self.tally.kills["gateway master"] += 1
        self.tally.processes += 1
        self.g.start_gateway()

    def kill_gateway(self) -> None:
        # The master and its workers at once (its process group).
        self.tally.processes += 1 + len(worker_pids(self.g.proc.pid))
        os.killpg(self.g.proc.pid, signal.SIGKILL)
        self.g.proc.wait()
        self.tally.kills["gateway (master + workers)"] += 1
        self.g.start_gateway()

    def kill_all(self) -> None:
        self.tally.processes += 1 + len(worker_pids(self.g.proc.pid)) + sum(
            n.running for n in self.g.nodes.nodes)
        os.killpg(self.g.proc.pid, signal.SIGKILL)
        for node in self.g.nodes.nodes:
            if node.running:
                node.proc.send_signal(signal.SIGKILL)
        self.g.proc.wait()
        for node in self.g.nodes.nodes:
            node.proc.wait()
        self.tally.kills["whole cluster"] += 1
        nc = self.g.nodes
        for node in nc.nodes:  # all at once, as a machine coming back would
            nc._spawn(node)
        for node in nc.nodes:
            nc._wait_ready(node)
        self.g.start_gateway()

    def event(self, what: str) -> None:
        if what == "node":
            self.kill_nodes(1, self.rnd.uniform(1, 4))
        elif what == "nodes":
            self.kill_nodes(self.g.m, self.rnd.uniform(1, 4))
        elif what == "worker":
            self.kill_worker()
        elif what == "gateway":
            self.kill_gateway()
        elif what == "master":
            self.kill_master()
        elif what == "all":
            self.kill_all()


def run_audit(g: Gateway) -> AuditReport:
    cfg = ClusterConfig.load(g.config_path)

    async def go() -> AuditReport:
        store = SqliteStore(g.meta_path)
        try:
            from gateway.store.erasurequeues import shared_queues  # the gateway's deletion records
            async with ErasureCluster(cfg, health_interval=0, auto_repair=False,
                                      **shared_queues(store)) as c:
                return await audit(c, store.part_owners)
        finally:
            await store.close()
    return asyncio.run(go())


def nothing_due(g: Gateway) -> bool:
    async def go() -> bool:
        store = SqliteStore(g.meta_path)
        try:
            due = await store.next_due()
            return due is None or due > time.time()
        finally:
            await store.close()
    return asyncio.run(go())


@dataclass
class StormResult:
    tally: Tally
    verified: int
    deleted_verified: int
    audit: AuditReport
    repair_out: str
    phases: dict[str, float]


def storm(g: Gateway, *, seconds: float, events: list[str], writers: int = 3,
          seed: int = 12) -> StormResult:
    rnd = random.Random(seed)
    tally = Tally()
    phases = {"start": time.monotonic()}
    s3 = g.client()
    s3.create_bucket(Bucket="storm")
    stop = threading.Event()
    ws = [Writer(g, n, stop, tally, seed * 100 + n) for n in range(writers)]
    for w in ws:
        w.start()
    chaos = Chaos(g, tally, rnd)
    gap = seconds / (len(events) + 1)
    try:
        for what in events:
            time.sleep(gap)
            chaos.event(what)
        time.sleep(gap)
    finally:
        stop.set()
        for w in ws:
            w.join(120)
    for w in ws:
        assert w.error is None, f"{w.name} died: {w.error!r}"
    phases["storm"] = time.monotonic()
    # let the gateway's healer and sweeper settle, then the operator's repair
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not nothing_due(g):
        time.sleep(0.5)
    phases["settle"] = time.monotonic()
    rep = subprocess.run([ZONEGATE, "repair", "--config", str(g.config_path), "--audit"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "COLUMNS": "200"})
    assert rep.returncode == 0, rep.stdout + rep.stderr
    phases["repair"] = time.monotonic()
    report = run_audit(g)
    phases["audit"] = time.monotonic()
    # every acknowledged state reads back exactly
    s3 = g.client()
    verified = deleted = 0
    for w in ws:
        for key, possible in w.state.items():
            try:
                got = s3.get_object(Bucket="storm", Key=key)["Body"].read()
            except ClientError as e:
                assert e.response["Error"]["Code"] == "NoSuchKey", (key, e)
                got = None
            want = {None if p is None else payload(*p) for p in possible}
            assert got in want, (key, possible, None if got is None else len(got))
            if len(possible) == 1:
                if got is None:
                    deleted += 1
                else:
                    verified += 1
    phases["verify"] = time.monotonic()
    return StormResult(tally, verified, deleted, report, rep.stdout, phases)


def fsck_all(g: Gateway) -> int:
    """`zonegate drive fsck` on every drive (nodes stopped), all at once; returns how many
    were checked."""
    procs = [(d, subprocess.Popen([ZONEGATE, "drive", "fsck", str(d), "--quiet"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
             for i in range(len(g.nodes.nodes)) for d in g.nodes.drive_paths(i)]
    for d, p in procs:
        out = p.communicate(timeout=300)[0]
        assert p.returncode == 0, f"{d}: {out}"
    return len(procs)
