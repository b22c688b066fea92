"""Rows of the PostgreSQL store shared by its modules (postgres.py, pg_versions.py)."""

from __future__ import annotations

import json
from typing import Any

from gateway.metadata.keys import key_str
from gateway.metadata.store import ObjectRecord

OBJ_COLS = ("bucket, key, size, etag, last_modified, owner, version, headers, user_meta, "
            "checksum, parts, manifest, tags, acl, version_id")


class Again(Exception):
    """A row appeared between our read and our insert: run the transaction again."""


def obj_row(r: Any, parts: list[dict[str, Any]] | None = None) -> ObjectRecord:
    return ObjectRecord(
        bucket=r[0], key=key_str(r[1]), size=r[2], etag=r[3], last_modified=r[4], owner=r[5],
        version=r[6], headers=json.loads(r[7]), user_meta=json.loads(r[8]),
        checksum=json.loads(r[9]), parts=json.loads(r[10]) if parts is None else parts,
        manifest=json.loads(r[11]) if r[11] else None, tags=json.loads(r[12]),
        acl=json.loads(r[13]) if r[13] else None, version_id=r[14],
        meta_part=json.loads(r[17]) if len(r) > 17 and r[17] else None)


def js(v: Any) -> str | None:
    """JSON text of an optional column (None stays NULL)."""
    return None if v is None else json.dumps(v)
