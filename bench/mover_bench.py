"""Data mover benchmark (issue 25): what moving data costs and how fast it goes, in one run.

A real cluster (tests/support/gwcluster.py: node processes + `zonegate serve`), 4+2 over
`--nodes` - 1 nodes with one spare node running, preloaded with `--mib` MiB of objects. Then,
each with the same boto3 foreground load (`--threads` clients doing 1 MiB PUTs and GETs of
random preloaded objects) for the same time:
  baseline   no move;
  rebalance  the spare node is added (`zonegate layout node add` + `apply`) and the gateway's
             mover rebalances onto it at the default throttle (`[erasure] move_rate`);
  drain      a node is drained (`zonegate layout node drain`) and emptied the same way;
  rebuild    a node is SIGKILLed and removed (`node remove`): its fragments rebuilt from parity.
Reported: moved MB/s (cluster and per receiving node), foreground PUT/GET MB/s and p99 latency
during each move as ratios to the baseline, and after the moves the receiving drives' write
amplification and the zones left open on them (zones the mover stranded: open zones beyond a
node's stream count). The drive-replacement prediction: hours to rebuild one 16 TB SMR drive
from the measured per-node rebuild rate.

    python -m bench mover [--nodes 8] [--mib 384] [--seconds 30] [--threads 4]
                          [--move-rate BYTES_PER_S] [--move-rate-busy BYTES_PER_S] [--json F]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MiB = 1 << 20
OBJ = MiB


def _zg(g: Any, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "gateway.cli", *args, "--config",
                        str(g.config_path)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"zonegate {' '.join(args)}: {r.stdout}{r.stderr}")
    return r.stdout


def _run_doc(g: Any) -> dict[str, Any]:
    import sqlite3
    with sqlite3.connect(g.meta_path) as c:
        row = c.execute("SELECT doc FROM move_leases WHERE name='run'").fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def _p99(xs: list[float]) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


class Load:
    """`threads` boto3 clients: PUT a 1 MiB object, GET a random preloaded one, repeat."""

    def __init__(self, g: Any, keys: list[str], threads: int) -> None:
        self.g, self.keys, self.threads = g, keys, threads
        self.put_s: list[float] = []
        self.get_s: list[float] = []
        self.errors = 0

    def run(self, seconds: float, until: Any = None) -> dict[str, float]:
        stop = threading.Event()
        self.put_s, self.get_s, self.errors = [], [], 0
        body = random.Random(1).randbytes(OBJ)

        def worker(n: int) -> None:
            s3 = self.g.client()
            rng = random.Random(n)
            i = 0
            while not stop.is_set():
                try:
                    t = time.perf_counter()
                    s3.put_object(Bucket="bench", Key=f"fg/{n}/{i % 8}", Body=body)
                    self.put_s.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    s3.get_object(Bucket="bench", Key=rng.choice(self.keys))["Body"].read()
                    self.get_s.append(time.perf_counter() - t)
                except Exception:
                    self.errors += 1
                i += 1

        ts = [threading.Thread(target=worker, args=(n,)) for n in range(self.threads)]
        start = time.monotonic()
        for t in ts:
            t.start()
        while time.monotonic() - start < seconds and not (until and until()):
            time.sleep(0.2)
        stop.set()
        for t in ts:
            t.join()
        took = time.monotonic() - start
        return {"seconds": took, "put_mbs": len(self.put_s) * OBJ / took / 1e6,
                "get_mbs": len(self.get_s) * OBJ / took / 1e6,
                "put_p99_ms": _p99(self.put_s) * 1000, "get_p99_ms": _p99(self.get_s) * 1000,
                "errors": self.errors}


def _move(g: Any, load: Load, seconds: float, version: int, *changes: list[str]
          ) -> dict[str, Any]:
    """Apply `changes` as layout `version`, run the load while the mover works; the mover's
    figures (MB/s from its own run document) and the load's."""
    for c in changes:
        _zg(g, "layout", *c)
    _zg(g, "layout", "apply")
    t0 = time.monotonic()

    def done() -> bool:  # the load runs while the mover does (at most `seconds`)
        d = _run_doc(g)
        return d.get("version") == version and d.get("phase") == "done"

    fg = load.run(seconds, until=done)
    deadline = time.monotonic() + 1800
    while True:
        doc = _run_doc(g)
        if doc.get("version") == version and doc.get("phase") == "done":
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"move to v{version} not done: {doc}")
        time.sleep(0.5)
    took = max(doc["finished"] - doc["started"], 1e-3)
    return {"fg": fg, "moved_bytes": doc["bytes_moved"], "fragments": doc["moves"],
            "rebuilt": doc["rebuilt"], "move_seconds": took,
            "moved_mbs": doc["bytes_moved"] / took / 1e6, "failed": doc["failed"],
            "wall": time.monotonic() - t0}


def _node_stats(g: Any, i: int) -> dict[str, Any]:
    import urllib.request
    req = urllib.request.Request(f"{g.nodes.urls[i]}/v1/stats",
                                 headers=g.nodes.headers(i, "GET", "/v1/stats", {}))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=10) as r:
        return json.load(r)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench mover", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=8, help="node processes (one starts spare)")
    p.add_argument("--mib", type=int, default=384, help="MiB of objects preloaded")
    p.add_argument("--seconds", type=float, default=30.0,
                   help="foreground load: the baseline's length, the most during a move")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--move-rate", type=float, default=None,
                   help="[erasure] move_rate, bytes/s per node (default: the config default)")
    p.add_argument("--move-rate-busy", type=float, default=None,
                   help="[erasure] move_rate_busy, bytes/s per node while the gateway handles "
                        "S3 requests (0: no slow-down; default: the config default)")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support
    from tests.support.gwcluster import Gateway

    root = Path(tempfile.mkdtemp(prefix="zonegate-mover-bench-"))
    g = Gateway(root, nodes=a.nodes, config_nodes=a.nodes - 1, segment_size=MiB,
                gateway_options={"layout_poll_seconds": 1, "mover_interval_seconds": 1},
                erasure_options={k: v for k, v in (("move_rate", a.move_rate),
                                                   ("move_rate_busy", a.move_rate_busy))
                                 if v is not None})
    out: dict[str, Any] = {"nodes": a.nodes, "mib": a.mib, "threads": a.threads,
                           "move_rate": a.move_rate, "move_rate_busy": a.move_rate_busy}
    g.start()
    try:
        s3 = g.client()
        s3.create_bucket(Bucket="bench")
        keys = [f"pre/{i:05d}" for i in range(a.mib)]
        body = random.Random(2).randbytes(OBJ)
        for k in keys:
            s3.put_object(Bucket="bench", Key=k, Body=body)
        load = Load(g, keys, a.threads)
        print(f"preloaded {a.mib} MiB; baseline load {a.seconds:g} s ...", flush=True)
        out["baseline"] = base = load.run(a.seconds)
        spare, nid = a.nodes - 1, g.nodes.ids[a.nodes - 1]
        print(f"rebalance onto {nid} ...", flush=True)
        out["rebalance"] = _move(g, load, a.seconds, 2,
                                 ["node", "add", nid, g.nodes.urls[spare], *sum(
                                     (["--drive", str(d)] for d in g.nodes.drive_paths(spare)),
                                     [])])
        st = _node_stats(g, spare)
        drives = st.get("drives", [])
        user = sum(d.get("user_bytes_written") or 0 for d in drives)
        dev = sum(d.get("device_bytes_written") or 0 for d in drives)
        out["receiver"] = {"node": nid, "write_amplification": dev / user if user else None,
                           "open_zones": sum(d.get("open_zones") or 0 for d in drives),
                           "stranded_bytes": sum(d.get("stranded_bytes") or 0 for d in drives),
                           "user_bytes": user}
        print("drain node00 ...", flush=True)
        out["drain"] = _move(g, load, a.seconds, 3, ["node", "drain", g.nodes.ids[0]])
        print("kill and remove node01 (rebuild from parity) ...", flush=True)
        g.nodes.nodes[1].proc.send_signal(signal.SIGKILL)
        g.nodes.nodes[1].proc.wait()
        out["rebuild"] = _move(g, load, a.seconds, 4, ["node", "remove", g.nodes.ids[1]])
    finally:
        g.stop()
        shutil.rmtree(root, ignore_errors=True)  # ~1 GB of drives a run
    for phase in ("rebalance", "drain", "rebuild"):
        r = out[phase]
        fg = r["fg"]
        r["put_ratio"] = fg["put_mbs"] / base["put_mbs"] if base["put_mbs"] else None
        r["get_ratio"] = fg["get_mbs"] / base["get_mbs"] if base["get_mbs"] else None
        r["put_p99_ratio"] = fg["put_p99_ms"] / base["put_p99_ms"]
        r["get_p99_ratio"] = fg["get_p99_ms"] / base["get_p99_ms"]
    # rebuild: every fragment lands on one of the remaining writable nodes
    receivers = a.nodes - 2 - 1  # node00 drained, node01 gone
    per_node = out["rebuild"]["moved_mbs"] / max(receivers, 1)
    out["rebuild"]["per_node_mbs"] = per_node
    out["drive_16tb_hours"] = 16e12 / (per_node * 1e6) / 3600 if per_node else None
    print(f"{'phase':<10} {'moved MB/s':>10} {'frags':>6} {'PUT x':>6} {'GET x':>6} "
          f"{'PUT p99 x':>9} {'GET p99 x':>9}")
    b = out["baseline"]
    print(f"{'baseline':<10} {'-':>10} {'-':>6} {b['put_mbs']:>5.1f}M {b['get_mbs']:>5.1f}M "
          f"{b['put_p99_ms']:>7.0f}ms {b['get_p99_ms']:>7.0f}ms")
    for phase in ("rebalance", "drain", "rebuild"):
        r = out[phase]
        print(f"{phase:<10} {r['moved_mbs']:>10.1f} {r['fragments']:>6} {r['put_ratio']:>6.2f} "
              f"{r['get_ratio']:>6.2f} {r['put_p99_ratio']:>9.2f} {r['get_p99_ratio']:>9.2f}")
    rc = out["receiver"]
    print(f"receiving node {rc['node']}: WA {rc['write_amplification']}, open zones "
          f"{rc['open_zones']}, stranded {rc['stranded_bytes']} bytes")
    print(f"rebuild {per_node:.1f} MB/s per receiving node: a 16 TB drive in "
          f"{out['drive_16tb_hours'] or float('nan'):.1f} h")
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
