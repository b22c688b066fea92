"""PostgresStore's object versions, delete markers, tags and ACLs (a mixin of PostgresStore:
it uses the store's `_tx` and `_read`)."""

from __future__ import annotations

import json
from typing import Any

from gateway.metadata.keys import key_bytes


class PgVersions:
    async def _set_object_field(self, bucket: str, key: str, version_id: str | None, col: str,
                                value: str | None) -> bool:
        q = f"UPDATE objects SET {col}=$1 WHERE bucket=$2 AND key=$3"
        args: list[Any] = [value, bucket, key_bytes(key)]
        if version_id is not None:
            q += " AND version_id=$4"
            args.append(version_id)
        return (await self._tx(lambda c: c.execute(q, *args))).endswith(" 1")

    async def put_object_tags(self, bucket: str, key: str, version_id: str | None,
                              tags: dict[str, str]) -> bool:
        return await self._set_object_field(bucket, key, version_id, "tags", json.dumps(tags))

    async def put_object_acl(self, bucket: str, key: str, version_id: str | None,
                             acl: list[dict[str, Any]] | None) -> bool:
        return await self._set_object_field(bucket, key, version_id, "acl",
                                            None if acl is None else json.dumps(acl))
