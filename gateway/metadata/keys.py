"""Key order and listing walks shared by every store backend.

Keys are compared as their UTF-8 bytes (S3's binary order). A listing is a walk over key
ranges: `ObjectWalk` says which range to fetch next and folds the rows fetched into a page, so
that SQLite and PostgreSQL page, roll up and resume exactly alike; only the SQL differs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from gateway.metadata.store import ListPage

# Rows fetched per range query of a listing walk: keeps each query short.
BATCH = 1000
# Rows asked for right after a jump past a rolled-up common prefix: the next row is often
# rolled up too, and a full BATCH would fetch (and drop) the whole next prefix's keys.
JUMP_BATCH = 8


def key_bytes(key: str) -> bytes:
    return key.encode("utf-8", "surrogatepass")


# The checksum of the (many) listed objects stored without one: shared, hence read-only.
NO_CHECKSUM: Mapping[str, str] = MappingProxyType({})


class ListedObject:
    """An object as a listing returns it: the fields of ObjectRecord a page shows (and the
    lifecycle worker judges by); headers, metadata, parts, tags and ACL read as empty (a
    caller wanting them reads the object). One slotted allocation, where an ObjectRecord is
    seven (itself, its __dict__, four empty containers and the checksum dict): the 7,000
    allocations of a page of 1000 set off 8 garbage collections, every ~20 pages a full one
    over the gateway's whole heap (tens of ms)."""

    __slots__ = ("bucket", "key", "size", "etag", "last_modified", "owner", "version",
                 "checksum", "version_id")
    manifest: dict[str, Any] | None = None
    acl: list[dict[str, Any]] | None = None
    meta_part: dict[str, Any] | None = None

    def __init__(self, bucket: str, key: str, size: int, etag: str, last_modified: float,
                 owner: str, version: str, checksum: Mapping[str, str],
                 version_id: str) -> None:
        self.bucket, self.key, self.size, self.etag = bucket, key, size, etag
        self.last_modified, self.owner, self.version = last_modified, owner, version
        self.checksum, self.version_id = checksum, version_id

    @property
    def headers(self) -> dict[str, str]:
        return {}

    @property
    def user_meta(self) -> dict[str, str]:
        return {}

    @property
    def tags(self) -> dict[str, str]:
        return {}

    @property
    def parts(self) -> list[dict[str, Any]]:
        return []

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ListedObject):
            return NotImplemented
        return all(getattr(self, a) == getattr(other, a) for a in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ListedObject({self.bucket!r}, {self.key!r}, size={self.size})"


def listed_object(r: Any) -> ListedObject:
    """A listing's record from the row (bucket, key, size, etag, last_modified, owner, version,
    checksum, version_id): a page has no use for headers, metadata, parts, tags or ACL, and
    most checksums are "{}" (parsing five JSON columns per row was most of a page's time)."""
    ck = r[7]
    return ListedObject(r[0], key_str(r[1]), r[2], r[3], r[4], r[5], r[6],
                        NO_CHECKSUM if ck == "{}" else json.loads(ck), r[8])


def key_str(key: bytes) -> str:
    return bytes(key).decode("utf-8", "surrogatepass")


def prefix_end(prefix: bytes) -> bytes | None:
    """Smallest byte string greater than every string starting with prefix (None: no bound)."""
    p = bytearray(prefix)
    while p:
        if p[-1] < 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return None


class ObjectWalk:
    """Walk keys > after under prefix; keys holding the delimiter after the prefix roll up into
    one common prefix each, and both count toward limit (as in S3).

    Drive it with `while (r := walk.next_range()) is not None: walk.feed(fetch(*r))`: a range
    is (lower, inclusive, end) meaning `key >= lower` (or `> lower`) and `key < end` (end None:
    no bound), at most `walk.batch` rows in key order. `key_of(row)` gives a row's key bytes and
    `item_of(row)` its page item."""

    def __init__(self, prefix: str, delimiter: str, after: str, limit: int,
                 key_of: Callable[[Any], bytes], item_of: Callable[[Any], Any]) -> None:
        self.bp, self.bd = key_bytes(prefix), key_bytes(delimiter)
        self.end = prefix_end(self.bp) if self.bp else None
        self.limit = limit
        self.key_of, self.item_of = key_of, item_of
        self.lower, self.inclusive = self.bp, True
        self.items: list[Any] = []
        self.prefixes: list[str] = []
        self.count = 0
        self.truncated = False
        self.last_b: bytes | None = None  # decoded once, for the page's next marker
        self.done = False
        # the first query asks for one row past the page: a full page then needs no second one
        # to learn that it is truncated
        self.batch = min(max(limit, 0), BATCH) + 1
        ba = key_bytes(after)
        if ba and ba >= self.bp:
            self.lower, self.inclusive = ba, False
            if self.bd:
                # A marker inside a rolled-up prefix: that prefix was already returned.
                i = ba.find(self.bd, len(self.bp))
                if i >= 0:
                    nxt = prefix_end(ba[:i + len(self.bd)])
                    if nxt is None:
                        self.done = True
                    else:
                        self.lower, self.inclusive = nxt, True

    def next_range(self) -> tuple[bytes, bool, bytes | None] | None:
        return None if self.done else (self.lower, self.inclusive, self.end)

    def steps(self) -> int:
        """Entries still wanted, plus one to learn whether the page is truncated (the row
        count of a skip-scan query, gateway/metadata/skipscan.py)."""
        return max(self.limit - self.count, 0) + 1

    def feed(self, rows: list[Any], asked: int | None = None) -> None:
        """Fold rows (key order, from the current range; `asked`: how many the query could
        return, default `self.batch`) into the page. Rows under a common prefix already
        rolled up are skipped."""
        if asked is None:
            asked = self.batch
        self.batch = BATCH
        if not rows:
            self.done = True
            return
        if not self.bd:
            # nothing rolls up: the rows are the page's next items, in one pass
            room = max(self.limit - self.count, 0)
            take = rows[:room] if len(rows) > room else rows
            self.items += map(self.item_of, take)
            self.count += len(take)
            if take:
                kb = self.key_of(take[-1])
                self.last_b = kb if type(kb) is bytes else bytes(kb)
                self.lower, self.inclusive = self.last_b, False
            if len(rows) > room:
                self.truncated = self.done = True
            elif len(rows) < asked:
                self.done = True  # the range held no more rows
            return
        skip_below: bytes | None = None  # the end of the last rolled-up prefix
        for row in rows:
            kb = self.key_of(row)
            if type(kb) is not bytes:
                kb = bytes(kb)
            if skip_below is not None and kb < skip_below:
                continue
            if self.count >= self.limit:
                self.truncated = self.done = True
                return
            if self.bd:
                i = kb.find(self.bd, len(self.bp))
                if i >= 0:
                    cp = kb[:i + len(self.bd)]
                    self.prefixes.append(key_str(cp))
                    self.count += 1
                    self.last_b = cp
                    nxt = prefix_end(cp)
                    if nxt is None:
                        self.done = True
                        return
                    self.lower, self.inclusive = nxt, True
                    skip_below = nxt
                    continue
            skip_below = None
            self.items.append(self.item_of(row))
            self.count += 1
            self.last_b = kb
            self.lower, self.inclusive = kb, False
        if len(rows) < asked:
            self.done = True  # the range held no more rows
        elif skip_below is not None:
            self.batch = JUMP_BATCH

    def page(self) -> ListPage:
        truncated = self.truncated and self.limit != 0
        last = key_str(self.last_b) if truncated and self.last_b is not None else None
        return ListPage(self.items, self.prefixes, truncated, last)


def rollup_uploads(rows: Iterable[Any], prefix: str, delimiter: str, limit: int,
                   key_of: Callable[[Any], bytes], item_of: Callable[[Any], Any]) -> ListPage:
    """A page of uploads from rows sorted by (key, upload id), already past the markers and
    under the prefix: keys holding the delimiter after the prefix roll up."""
    bp, bd = key_bytes(prefix), key_bytes(delimiter)
    items: list[Any] = []
    prefixes: list[str] = []
    truncated = False
    last: str | None = None
    for row in rows:
        kb = bytes(key_of(row))
        cp = None
        if bd:
            i = kb.find(bd, len(bp))
            if i >= 0:
                cp = key_str(kb[:i + len(bd)])
        if cp is not None and prefixes and prefixes[-1] == cp:
            continue
        if len(items) + len(prefixes) >= limit:
            truncated = True
            break
        if cp is not None:
            prefixes.append(cp)
            last = cp
        else:
            items.append(item_of(row))
            last = key_str(kb)
    return ListPage(items, prefixes, truncated, last if truncated else None)


# A bucket's marker on the nodes (gateway/store/bucketmarkers.py): the store names its part uid
# as a live part for the fragment audit.
MARKER_PREFIX = "bucket:"


def marker_uid(name: str, created: float) -> str:
    """The part uid of the marker of the bucket `name` created at `created` (epoch seconds)."""
    return f"{MARKER_PREFIX}{name}:{round(created * 1_000_000):x}"
