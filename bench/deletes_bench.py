"""DeleteObjects of 1000 small keys through boto3 against a real test cluster
(tests/support/gwcluster.py: 6 nodes, 4+2, one gateway process), on an unversioned bucket (objects
removed) and a versioning-enabled one (a delete marker per key), then on that one the
markers by version id and the objects' versions by id; seconds per request.

Several source trees can be compared in one run, interleaved (each round runs every tree in
turn, the order alternating), so a loaded machine weighs on all of them alike: read ratios.

    python -m bench deletes [--trees /work/main,.] [--rounds 2] [--keys 1000] [--json out]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve()


def versions(s3, bucket: str) -> list[tuple[str, str, bool]]:
    out: list[tuple[str, str, bool]] = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        out += [(v["Key"], v["VersionId"], False) for v in page.get("Versions", [])]
        out += [(v["Key"], v["VersionId"], True) for v in page.get("DeleteMarkers", [])]
    return out


def worker(tree: Path, keys: int, reps: int, by_id: bool) -> dict[str, list[float]]:
    """One cluster from `tree`'s code; `reps` timed DeleteObjects per bucket kind."""
    sys.path.insert(0, str(tree))
    os.chdir(tree)
    from tests.support.gwcluster import Gateway
    out: dict[str, list[float]] = {"unversioned": [], "versioned": []}
    with tempfile.TemporaryDirectory(prefix="zg-deletes-") as d:
        g = Gateway(Path(d))
        g.start()
        try:
            s3 = g.client()
            s3.create_bucket(Bucket="plain")
            s3.create_bucket(Bucket="ver")
            s3.put_bucket_versioning(Bucket="ver",
                                     VersioningConfiguration={"Status": "Enabled"})
            names = [f"ckpt/step-{i:05d}/shard" for i in range(keys)]
            clients = [g.client() for _ in range(8)]
            for _ in range(reps):
                for bucket in ("plain", "ver"):
                    with ThreadPoolExecutor(8) as ex:
                        list(ex.map(lambda i, b=bucket: clients[i % 8].put_object(
                            Bucket=b, Key=names[i], Body=b"x" * 100), range(keys)))
                    t = time.perf_counter()
                    res = s3.delete_objects(Bucket=bucket, Delete={
                        "Objects": [{"Key": k} for k in names], "Quiet": True})
                    took = time.perf_counter() - t
                    assert not res.get("Errors"), res["Errors"][:3]
                    out["unversioned" if bucket == "plain" else "versioned"].append(took)
                if by_id:
                    # then the markers by version id (the objects come back), then the
                    # objects' versions by id (the bucket is empty again)
                    vs = versions(s3, "ver")
                    for kind, marker in (("markers by id", True), ("versions by id", False)):
                        objs = [{"Key": k, "VersionId": v} for k, v, m in vs if m == marker]
                        t = time.perf_counter()
                        res = s3.delete_objects(Bucket="ver", Delete={"Objects": objs,
                                                                      "Quiet": True})
                        took = time.perf_counter() - t
                        assert not res.get("Errors"), res["Errors"][:3]
                        out.setdefault(kind, []).append(took)
        finally:
            g.stop()
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench deletes")
    ap.add_argument("--trees", default=str(HERE.parent.parent),
                    help="comma-separated source trees, each with its .venv")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2, help="requests per bucket kind per round")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--no-by-id", action="store_true",
                    help="skip the versioned DeleteObjects naming version ids")
    ap.add_argument("--json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(Path(a.worker), a.keys, a.reps, not a.no_by_id)))
        return 0
    trees = [Path(t).resolve() for t in a.trees.split(",")]
    got: dict[str, dict[str, list[float]]] = {str(t): {"unversioned": [], "versioned": []}
                                              for t in trees}
    for r in range(a.rounds):
        for t in trees if r % 2 == 0 else trees[::-1]:
            py = t / ".venv" / "bin" / "python"
            p = subprocess.run([str(py), str(HERE), "--worker", str(t), "--keys", str(a.keys),
                                "--reps", str(a.reps)] + ["--no-by-id"] * a.no_by_id,
                               capture_output=True, text=True, cwd=t, timeout=900)
            if p.returncode != 0:
                print(p.stdout[-2000:], p.stderr[-4000:], file=sys.stderr)
                return 1
            for kind, xs in json.loads(p.stdout.strip().splitlines()[-1]).items():
                got[str(t)].setdefault(kind, []).extend(xs)
    print(f"DeleteObjects of {a.keys} keys of 100 B, seconds (median; every run)")
    for t, kinds in got.items():
        for kind, xs in kinds.items():
            print(f"  {t:<28} {kind:<15} {statistics.median(xs):7.3f}  "
                  + " ".join(f"{x:.2f}" for x in xs))
    if a.json:
        Path(a.json).write_text(json.dumps(got, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
