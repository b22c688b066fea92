"""The metadata benchmark's bulk fill writes rows the stores read back as put_object's: a
schema change that the fill misses breaks here, not in a half-hour benchmark run."""

from __future__ import annotations

from bench.metadata_fill import bulk_fill
from gateway.metadata import BucketRecord
from tests.support import storebackends

pg_server, stores = storebackends.pg_server, storebackends.stores


async def test_bulk_filled_objects_list_and_read_like_put_ones(stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("fill", "alice", 1.0))
    await bulk_fill(s, "fill", "alice", 120, lambda i: f"d{i % 3}/k{i:04d}")
    page = await s.list_objects("fill", "d1/", "", "", 1000)
    keys = [o.key for o in page.items]
    assert keys == sorted(f"d1/k{i:04d}" for i in range(120) if i % 3 == 1)
    got = await s.get_object("fill", "d2/k0005")
    assert got is not None and got.size == 1024 and got.version_id == "null"
