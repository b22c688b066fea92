"""`zonegate dev` says in one line when its sparse emulated drives promise more space than the
disk under the data directory has free (writes would fail with ENOSPC long before the drives
look full), and starts all the same."""

from __future__ import annotations

import json
import shutil

import pytest

from gateway.cli.devconfig import drive_promise
from tests.support.devcluster import DevCluster
from zonestore.emulated import Geometry, create_emulated_drive

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
MiB = 1 << 20


def test_drive_promise_counts_what_sparse_zone_files_do_not_hold_yet(tmp_path):
    g = Geometry(nr_zones=6, zone_size=4 * MiB, zone_capacity=4 * MiB, nr_conventional=1)
    drive = create_emulated_drive(tmp_path / "d0", g)
    cfg = {"nodes": [{"drives": [str(drive), str(tmp_path / "not-a-drive")]}]}
    assert drive_promise(cfg) == 6 * 4 * MiB
    zone = drive / "zones" / "000003"
    with open(zone, "r+b") as f:
        f.write(b"z" * MiB)  # a zone that holds 1 MiB now may take 3 MiB more
    assert json.loads((drive / "zoned.json").read_text())["zone_size"] == 4 * MiB
    assert drive_promise(cfg) == 6 * 4 * MiB - MiB


def test_dev_warns_when_its_drives_promise_more_than_the_disk_has(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    zone_size = 1 << 40  # 20 drives x 4 zones of 1 TiB: far more than any test machine's disk
    assert 20 * 4 * zone_size > free
    cluster = DevCluster(tmp_path / "data", nodes=10, zones=4, zone_size="1T")
    cluster.start()
    try:
        lines = [ln for ln in cluster.output().splitlines() if "warning: the emulated drives" in ln]
        assert len(lines) == 1, cluster.output()[-2000:]
        assert "GiB free" in lines[0]
        s3 = cluster.client()
        s3.create_bucket(Bucket="still-works")  # a warning, not a refusal
    finally:
        cluster.stop()
