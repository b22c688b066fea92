"""The ListObjectVersions walk shared by both store backends: keys ascending (binary), each
key's versions newest first (highest `seq` first), common prefixes rolled up as in
`keys.ObjectWalk`, so SQLite and PostgreSQL page and resume alike and only the SQL differs.

A range is `VRange(lower, seq, inclusive, end)`: with `seq` set, the versions of key `lower`
older than `seq` (`key = lower AND seq < seq ORDER BY seq DESC`, the rest of a key a page or a
batch stopped inside); else the keys from `lower` (`key >= lower`, or `> lower`) below `end`
(None: no bound), `ORDER BY key, seq DESC`; at most `walk.batch` rows either way. Both are
plain index ranges over (bucket, key, seq DESC).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields
from typing import Any, NamedTuple

from gateway.metadata.keys import BATCH, JUMP_BATCH, key_bytes, key_str, prefix_end
from gateway.metadata.store import (
    ANY,
    VERSIONING_STATES,
    ListPage,
    ObjectRecord,
    VersionRecord,
)
from gateway.s3.lockrules import lock_of


class VRange(NamedTuple):
    lower: bytes
    seq: int | None
    inclusive: bool
    end: bytes | None


class VersionWalk:
    """Drive with `while (r := walk.next_range()) is not None: walk.feed(fetch(r))`.
    `key_of(row)`, `seq_of(row)`, `vid_of(row)` read a row; `item_of(row, is_latest)` makes
    its page item. `marker_seq`: the seq of (key_marker, version_id_marker), None to resume
    after every version of key_marker."""

    def __init__(self, prefix: str, delimiter: str, key_marker: str, marker_seq: int | None,
                 limit: int, key_of: Callable[[Any], bytes], seq_of: Callable[[Any], int],
                 vid_of: Callable[[Any], str], item_of: Callable[[Any, bool], Any]) -> None:
        self.bp, self.bd = key_bytes(prefix), key_bytes(delimiter)
        self.end = prefix_end(self.bp) if self.bp else None
        self.limit = limit
        self.key_of, self.seq_of, self.vid_of, self.item_of = key_of, seq_of, vid_of, item_of
        self.range = VRange(self.bp, None, True, self.end)
        self.items: list[Any] = []
        self.prefixes: list[str] = []
        self.count = 0
        self.truncated = False
        self.last: tuple[str, str | None] | None = None
        self.done = False
        self.prev: bytes | None = None  # key of the previous version seen (is_latest)
        self.batch = min(max(limit, 0), BATCH) + 1
        km = key_bytes(key_marker)
        if km and km >= self.bp:
            self.range = VRange(km, None, False, self.end)
            if self.bd and (i := km.find(self.bd, len(self.bp))) >= 0:
                # a marker inside a rolled-up prefix: that prefix was already returned
                nxt = prefix_end(km[:i + len(self.bd)])
                if nxt is None:
                    self.done = True
                else:
                    self.range = VRange(nxt, None, True, self.end)
            elif marker_seq is not None and (not self.bp or km.startswith(self.bp)):
                self.range = VRange(km, marker_seq, False, self.end)
                self.prev = km  # the key's newest version was on an earlier page

    def next_range(self) -> VRange | None:
        return None if self.done else self.range

    def feed(self, rows: list[Any]) -> None:
        asked, self.batch = self.batch, BATCH
        same_key = self.range.seq is not None
        for row in rows:
            kb = bytes(self.key_of(row))
            if self.count >= self.limit:
                self.truncated = self.done = True
                return
            if self.bd and not same_key and (i := kb.find(self.bd, len(self.bp))) >= 0:
                cp = kb[:i + len(self.bd)]
                self.prefixes.append(key_str(cp))
                self.count += 1
                self.last = (key_str(cp), None)
                nxt = prefix_end(cp)
                if nxt is None:
                    self.done = True
                else:
                    self.range = VRange(nxt, None, True, self.end)
                    self.batch = JUMP_BATCH
                return
            self.items.append(self.item_of(row, kb != self.prev))
            self.prev = kb
            self.count += 1
            self.last = (key_str(kb), self.vid_of(row))
            self.range = VRange(kb, self.seq_of(row), False, self.end)
        if len(rows) < asked:
            if same_key:
                # the rest of that key is done: on to the keys after it
                self.range = VRange(self.range.lower, None, False, self.end)
            else:
                self.done = True

    def page(self) -> ListPage:
        truncated = self.truncated and self.limit != 0
        last = self.last if truncated else None
        return ListPage(self.items, self.prefixes, truncated, last[0] if last else None,
                        last[1] if last else None)


def range_query(cols: str, bucket: str, r: VRange, param: Callable[[int], str],
                limit: int) -> tuple[str, list[Any]]:
    """The SQL (placeholders from `param(i)`, i from 1) and arguments that read range `r` of
    a version walk, for both backends."""
    if r.seq is not None:
        return (f"SELECT {cols} FROM versions WHERE bucket={param(1)} AND key={param(2)} AND "
                f"seq < {param(3)} ORDER BY seq DESC LIMIT {limit}", [bucket, r.lower, r.seq])
    q = (f"SELECT {cols} FROM versions WHERE bucket={param(1)} AND "
         f"key {'>=' if r.inclusive else '>'} {param(2)}")
    args: list[Any] = [bucket, r.lower]
    if r.end is not None:
        q += f" AND key < {param(3)}"
        args.append(r.end)
    return q + f" ORDER BY key, seq DESC LIMIT {limit}", args


def as_version(o: ObjectRecord, is_latest: bool, delete_marker: bool) -> VersionRecord:
    """The VersionRecord of one stored version."""
    return VersionRecord(**{f.name: getattr(o, f.name) for f in fields(ObjectRecord)},
                         is_latest=is_latest, delete_marker=delete_marker)


def marker_record(marker: VersionRecord, version_id: str) -> VersionRecord:
    """A delete marker as stored: no size, ETag, metadata or parts; its layout (if any) is
    the manifest, so it is freed with the marker."""
    return VersionRecord(marker.bucket, marker.key, 0, "", marker.last_modified, marker.owner,
                         marker.version, manifest=marker.manifest, version_id=version_id,
                         is_latest=True, delete_marker=True)


def check_versioning(state: str) -> None:
    if state not in VERSIONING_STATES:
        raise ValueError(f"versioning must be one of {VERSIONING_STATES}, not {state!r}")


def once_per_part(layouts: list[dict]) -> list[dict]:
    """Freed layouts with each part once (the markers of one DeleteObjects share a batch
    part: deleting them all frees it once, not once per marker)."""
    seen: set[str] = set()
    out = []
    for lay in layouts:
        uid = lay.get("part_uid")
        if uid is not None and uid in seen:
            continue
        if uid is not None:
            seen.add(uid)
        out.append(lay)
    return out


def fields_are(expect: dict[str, Any] | None, tags: str | None, acl: str | None,
               headers: str | None = None) -> bool:
    """Whether a version's stored tags / ACL (JSON columns) hold the values `expect` names:
    a tag or ACL change commits only if the other field is still what its archive records
    (gateway/store/tagarchives.py), so the newest archive never carries a stale one."""
    if not expect:
        return True
    have = {"tags": json.loads(tags) if tags else {},
            "acl": json.loads(acl) if acl is not None else None,
            "lock": lock_of(json.loads(headers)) if headers else {}}
    return all(have[k] == v for k, v in expect.items())


def expected(**given: Any) -> dict[str, Any] | None:
    """The `expect` of fields_are from put_object_tags / _acl / _lock's `if_*` arguments
    (`if_tags=...` -> {"tags": ...}), leaving out those that are ANY (not checked)."""
    out = {k[3:]: v for k, v in given.items() if v is not ANY}
    return out or None
