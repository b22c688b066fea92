"""The listing walk that both stores share (gateway/metadata/keys.py) against a naive model of
S3's ListObjects: keys in UTF-8 byte order, common prefixes rolled up at the first delimiter
after the prefix, a marker inside a returned prefix skipping it, max-keys counting keys and
prefixes. The walk fetches rows in batches of varying size (one past the page first, a few
right after a jump over a common prefix), so pages must not depend on where a batch ends."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.metadata import BucketRecord, ObjectRecord, SqliteStore
from gateway.metadata import keys as walk_keys

CHARS = st.sampled_from(["a", "b", "/", "é", "x"])
KEYS = st.text(CHARS, min_size=1, max_size=6)


def model(keys: set[str], prefix: str, delim: str, after: str, limit: int):
    entries: list[tuple[str, str]] = []
    for k in sorted(keys, key=lambda s: s.encode()):
        if not k.startswith(prefix):
            continue
        i = k.find(delim, len(prefix)) if delim else -1
        e = ("P", k[:i + len(delim)]) if i >= 0 else ("K", k)
        if entries and entries[-1] == e:
            continue
        entries.append(e)
    ab = after.encode()
    entries = [e for e in entries if e[1].encode() > ab and
               not (e[0] == "P" and after.startswith(e[1]))]
    page = entries[:limit]
    truncated = len(entries) > limit and limit > 0
    return ([v for t, v in page if t == "K"], [v for t, v in page if t == "P"], truncated,
            page[-1][1] if truncated else None)


_n = itertools.count()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.sets(KEYS, max_size=40), prefix=st.text(CHARS, max_size=2),
       delim=st.sampled_from(["", "/", "é", "ab"]), after=st.just("") | KEYS,
       limit=st.integers(0, 6), jump=st.integers(1, 3), batch=st.integers(2, 5))
def test_walk_pages_match_the_model(keys, prefix, delim, after, limit, jump, batch) -> None:
    # small batches so that a page spans several queries and jumps land everywhere
    saved = walk_keys.BATCH, walk_keys.JUMP_BATCH
    walk_keys.BATCH, walk_keys.JUMP_BATCH = batch, jump
    try:
        asyncio.run(_check(keys, prefix, delim, after, limit))
    finally:
        walk_keys.BATCH, walk_keys.JUMP_BATCH = saved


async def _check(keys, prefix, delim, after, limit) -> None:
    with tempfile.TemporaryDirectory() as d:
        store = SqliteStore(str(Path(d) / f"m{next(_n)}.sqlite"))
        await store.start()
        try:
            await store.create_bucket(BucketRecord("b", "o", 0.0))
            for k in keys:
                await store.put_object(ObjectRecord("b", k, 1, "e", 0.0, "o", "v"))
            page = await store.list_objects("b", prefix, delim, after, limit)
            got = ([o.key for o in page.items], page.prefixes, page.truncated, page.next_marker)
            assert got == model(keys, prefix, delim, after, limit)
            # and walking every page of 2 gives the same entries as one big page
            whole = model(keys, prefix, delim, "", 10_000)
            seen_k, seen_p, marker = [], [], ""
            for _ in range(100):
                p = await store.list_objects("b", prefix, delim, marker, 2)
                seen_k += [o.key for o in p.items]
                seen_p += p.prefixes
                if not p.truncated:
                    break
                marker = p.next_marker
            assert (seen_k, seen_p) == (whole[0], whole[1])
        finally:
            await store.close()
