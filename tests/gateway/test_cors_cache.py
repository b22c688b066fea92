"""The per-worker cache of buckets' CORS rules (gateway/ops/cors.py CorsCache) over a real
SQLite metadata store: concurrent requests of one bucket share one store read, a change made
here is seen at once after forget(), the memory is bounded, and a bucket without configuration
or without existence is told apart (the preflight answers differ)."""

from __future__ import annotations

import asyncio

from gateway.metadata import BucketRecord, open_store
from gateway.ops.cors import CorsCache
from gateway.s3 import corsrules as cors

RULES = [cors.CorsRule(("*",), ("GET",))]


async def _store(tmp_path):
    s = open_store(str(tmp_path / "meta.sqlite"))
    await s.start()
    for name in ("b0", "b1", "b2", "b3", "b4", "b5"):
        await s.create_bucket(BucketRecord(name, "alice", 1.0))
    await s.put_bucket_config("b0", "cors", cors.to_doc(RULES))
    return s


async def test_concurrent_lookups_share_one_store_read(tmp_path) -> None:
    s = await _store(tmp_path)
    try:
        cache = CorsCache(ttl=3600)
        got = await asyncio.gather(*[cache.get(s, "b0") for _ in range(50)])
        assert cache.loads == 1
        assert all(g.exists and g.rules == tuple(RULES) for g in got)
        for _ in range(20):
            await cache.get(s, "b0")
        assert cache.loads == 1
    finally:
        await s.close()


async def test_forget_makes_the_next_lookup_read_the_store(tmp_path) -> None:
    s = await _store(tmp_path)
    try:
        cache = CorsCache(ttl=3600)
        assert (await cache.get(s, "b0")).rules == tuple(RULES)
        await s.put_bucket_config("b0", "cors", None)
        assert (await cache.get(s, "b0")).rules == tuple(RULES)  # still remembered
        cache.forget("b0")
        assert (await cache.get(s, "b0")).rules is None
        assert cache.loads == 2
        zero = CorsCache(ttl=0)  # nothing kept: every lookup reads
        for _ in range(3):
            await zero.get(s, "b0")
        assert zero.loads == 3
    finally:
        await s.close()


async def test_missing_bucket_and_missing_configuration_differ(tmp_path) -> None:
    s = await _store(tmp_path)
    try:
        cache = CorsCache()
        assert await cache.get(s, "b1") == (await cache.get(s, "b1"))
        b1, none = await cache.get(s, "b1"), await cache.get(s, "nosuch")
        assert (b1.exists, b1.rules) == (True, None)
        assert (none.exists, none.rules) == (False, None)
    finally:
        await s.close()


async def test_the_cache_holds_at_most_max_entries(tmp_path) -> None:
    s = await _store(tmp_path)
    try:
        cache = CorsCache(ttl=3600, max_entries=3)
        for i in range(200):
            await cache.get(s, f"random-{i}")
        assert len(cache._entries) == 3
        assert not cache._loading
    finally:
        await s.close()
