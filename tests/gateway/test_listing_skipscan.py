"""Delimiter listings (one skip-scan query per page, gateway/metadata/skipscan.py) answer
exactly what a brute-force S3 model answers, on both backends: binary key order, multi-byte
and control-character keys, multi-byte delimiters, markers inside rolled-up prefixes, every
page size; and following the markers visits each entry once."""

from __future__ import annotations

import random
import time

from gateway.metadata import BucketRecord, ObjectRecord
from tests.support import storebackends
from tests.support.storebackends import Stores

pg_server, stores = storebackends.pg_server, storebackends.stores

ALPHABET = ["a", "b", "/", "-", "\x01", "\x7f", "é", "\u00ff", "\u20ac", "\uffff",
            "\U0001f600"]
DELIMITERS = ["/", "é", "a", "/a", "\U0001f600", "ab/"]


def model(keys: list[str], prefix: str, delim: str, after: str,
          limit: int) -> tuple[list[str], list[str], bool]:
    """S3's answer: keys and common prefixes after `after`, in UTF-8 byte order."""
    b = lambda s: s.encode("utf-8", "surrogatepass")  # noqa: E731
    out: list[tuple[str, bool]] = []
    for k in sorted(keys, key=b):
        if not k.startswith(prefix) or b(k) <= b(after):
            continue
        i = k.find(delim, len(prefix)) if delim else -1
        if i >= 0:
            cp = k[:i + len(delim)]
            if b(cp) <= b(after) or (out and out[-1] == (cp, True)):
                continue
            out.append((cp, True))
        else:
            out.append((k, False))
    page = out[:limit]
    return ([k for k, p in page if not p], [k for k, p in page if p], len(out) > limit)


async def test_delimiter_pages_match_the_model_on_both_backends(stores: Stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", time.time()))
    await s.create_bucket(BucketRecord("other", "alice", time.time()))
    rnd = random.Random(13)
    keys = sorted({"".join(rnd.choices(ALPHABET, k=rnd.randint(1, 6))) for _ in range(400)})
    for k in keys:
        await s.put_object(ObjectRecord("b", k, 1, "e", 1.0, "alice", "v"))
    await s.put_object(ObjectRecord("other", "a/b", 1, "e", 1.0, "alice", "v"))
    for _ in range(150):
        prefix = "".join(rnd.choices(ALPHABET[:4] + ["é"], k=rnd.randint(0, 2)))
        delim = rnd.choice(DELIMITERS)
        after = rnd.choice(["", rnd.choice(keys), rnd.choice(keys)[:2], prefix + delim])
        limit = rnd.choice([0, 1, 2, 3, 7, 1000])
        page = await s.list_objects("b", prefix, delim, after, limit)
        want = model(keys, prefix, delim, after, limit)
        got = ([o.key for o in page.items], page.prefixes, page.truncated and limit > 0)
        assert got == (want[0], want[1], want[2] and limit > 0), (prefix, delim, after, limit)
    # following the markers, two entries a page, visits what one page of 1000 holds
    for delim in DELIMITERS:
        seen: list[str] = []
        after = ""
        while True:
            page = await s.list_objects("b", "", delim, after, 2)
            seen += [o.key for o in page.items] + page.prefixes
            if not page.truncated:
                break
            after = page.next_marker
        ks, ps, _ = model(keys, "", delim, "", 10_000)
        assert sorted(seen) == sorted(ks + ps)
        assert len(seen) == len(ks) + len(ps)
