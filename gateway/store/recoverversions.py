"""Version chains for `recover-metadata`: from the object versions and delete markers found
on the nodes, each key's versions in order, and what to write into the store.

The order is the archives' `(last_modified, version_id)`: version ids made by
`versionids.new_version_id` start with their µs timestamp, and a key has at most one "null"
version at a time (a write while versioning is off or suspended replaces it), so of several
"null" versions found (a replaced one whose fragments the sweeper had not freed yet) only the
newest is kept; the others are superseded, as are repeats of one version id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway.metadata.store import CONFIG_KINDS, ObjectRecord, VersionRecord

NULL = "null"


@dataclass
class Chains:
    """Per (bucket, key) its versions oldest first; what lost to a newer copy."""

    keys: dict[tuple[str, str], list[ObjectRecord]] = field(default_factory=dict)
    superseded: list[ObjectRecord] = field(default_factory=list)

    def versioned_buckets(self) -> set[str]:
        """Buckets with a version that only a versioned bucket makes."""
        return {b for (b, _), chain in self.keys.items()
                if any(v.version_id != NULL or is_marker(v) for v in chain)}


def is_marker(rec: ObjectRecord) -> bool:
    return isinstance(rec, VersionRecord) and rec.delete_marker


def _order(rec: ObjectRecord) -> tuple[float, str, str]:
    return (rec.last_modified, rec.version_id, rec.version)


def build_chains(found: list[ObjectRecord]) -> Chains:
    """Sort object versions and delete markers into per-key chains."""
    out = Chains()
    groups: dict[tuple[str, str], list[ObjectRecord]] = {}
    for rec in found:
        groups.setdefault((rec.bucket, rec.key), []).append(rec)
    for k, recs in groups.items():
        recs.sort(key=_order)
        chain: list[ObjectRecord] = []
        seen: dict[str, int] = {}
        for rec in recs:
            i = seen.get(rec.version_id)
            if i is not None:
                # The same version id again (a null version replaced later, or a copy):
                # the newer one wins; it takes the place the newer write had.
                out.superseded.append(chain[i])
                chain[i] = None  # type: ignore[call-overload]
            seen[rec.version_id] = len(chain)
            chain.append(rec)
        out.keys[k] = [r for r in chain if r is not None]
    return out


async def write_chain(store: Any, chain: list[ObjectRecord]) -> int:
    """Write one key's versions, oldest first, into the store; returns how many were added.
    Merging (--force) into a store that already knows the key: versions it has are skipped,
    a "null" version only replaces an older one, new ones go on top."""
    added = 0
    for rec in chain:
        have = await store.get_object(rec.bucket, rec.key, rec.version_id)
        if have is not None and (rec.version_id != NULL or _order(have) >= _order(rec)):
            continue
        if is_marker(rec):
            assert isinstance(rec, VersionRecord)
            await store.put_delete_marker(rec, "suspended" if rec.version_id == NULL
                                          else "enabled")
        else:
            await store.put_object(rec, versioning="off" if rec.version_id == NULL
                                   else "enabled")
        added += 1
    return added


async def restore_configs(store: Any, bucket: str, configs: dict[str, str] | None,
                          versioned: bool) -> int:
    """Put back the bucket's configuration documents from its marker (those the store does
    not hold yet). A bucket holding versions whose marker names no versioning state (a marker
    whose rewrite was missed) is taken as versioning-enabled: versioning is never undone, and
    that state keeps the versions."""
    n = 0
    for kind, doc in (configs or {}).items():
        if kind in CONFIG_KINDS and await store.get_bucket_config(bucket, kind) is None:
            await store.put_bucket_config(bucket, kind, doc)
            n += 1
    if versioned and await store.get_bucket_config(bucket, "versioning") is None:
        await store.put_bucket_config(bucket, "versioning", json.dumps({"Status": "Enabled"}))
        n += 1
    return n
