"""The fault storm (tests/support/storm.py): a short one in `make test`, a long one behind `make soak`
(ZG_STORM_SECONDS, default 600)."""

from __future__ import annotations

import os
import time

import pytest

from tests.support.gwcluster import Gateway
from tests.support.storm import fsck_all, storm
from zonestore.emulated import Geometry

pytest.importorskip("zonestore.pool", reason="the node daemon needs the drive pool")
GEOMETRY = Geometry(nr_zones=160, zone_size=16 << 20, zone_capacity=16 << 20)
# the long storm writes some GB per node, most of it overwritten or deleted: sparse 8 GiB drives
LONG_GEOMETRY = Geometry(nr_zones=512, zone_size=16 << 20, zone_capacity=16 << 20)


def _run(tmp_path, seconds: float, events: list[str], writers: int,
         geometry: Geometry = GEOMETRY) -> None:
    # 7 nodes for 4+2: a node down leaves a handoff; pending marks of writes a kill cut off
    # are resolved 15 s later (longer than any write here takes)
    # more, smaller zones than the default test drive: one zone per upload stream fills a
    # 32-zone drive long before its bytes do
    g = Gateway(tmp_path, nodes=7, workers=2, geometry=geometry,
                gateway_options={"pending_grace_seconds": 15})
    g.start()
    try:
        res = storm(g, seconds=seconds, events=events, writers=writers)
    finally:
        g.stop()
    t0 = time.monotonic()
    drives = fsck_all(g)
    p = res.phases
    steps = list(p.items())
    took = ", ".join(f"{b[0]} {b[1] - a[1]:.0f} s" for a, b in zip(steps, steps[1:], strict=False))
    t = res.tally
    print(f"\nstorm: kill events {dict(t.kills)} ({t.processes} processes); acknowledged "
          f"{dict(t.ops)}, not acknowledged {dict(t.failed)}; {res.verified} objects verified "
          f"byte-exact, {res.deleted_verified} deletes verified; 5xx {dict(t.status)} "
          f"{dict(t.codes)}; audit: {res.audit.summary()}; fsck clean on {drives} drives; took: {took}, fsck {time.monotonic() - t0:.0f} s")
    assert res.audit.unowned == {}, res.audit.unowned
    assert res.audit.unreachable == []
    assert t.codes.get("InternalError", 0) == 0, t.codes
    assert sum(t.ops.values()) > 0 and res.verified > 0


@pytest.mark.timeout(420)
def test_fault_storm_short(tmp_path) -> None:
    # the gateway's process group dies in "all"; "master" kills the master alone
    _run(tmp_path, 18, ["node", "worker", "master", "nodes", "all"], writers=2)


@pytest.mark.soak
@pytest.mark.timeout(7200)
def test_fault_storm_long(tmp_path) -> None:
    seconds = float(os.environ.get("ZG_STORM_SECONDS", "600"))
    events = ["node", "worker", "nodes", "master", "node", "gateway", "worker", "nodes", "all"]
    n = max(1, int(seconds // 80))
    _run(tmp_path, seconds, events * n, writers=4, geometry=LONG_GEOMETRY)
