"""SqliteStore's object versions, delete markers, tags and ACLs (a mixin of SqliteStore: it
uses the store's transactions, `_tx`, and its writer thread, `_w`)."""

from __future__ import annotations

import json
from typing import Any

from gateway.metadata.keys import key_bytes

_k = key_bytes


class SqliteVersions:
    def _set_object_field(self, bucket: str, key: str, version_id: str | None, col: str,
                          value: str | None) -> bool:
        with self._tx() as c:
            q = f"UPDATE objects SET {col}=? WHERE bucket=? AND key=?"
            args: list[Any] = [value, bucket, _k(key)]
            if version_id is not None:
                q += " AND version_id=?"
                args.append(version_id)
            return c.execute(q, args).rowcount > 0

    async def put_object_tags(self, bucket: str, key: str, version_id: str | None,
                              tags: dict[str, str]) -> bool:
        return await self._w(self._set_object_field, bucket, key, version_id, "tags",
                             json.dumps(tags))

    async def put_object_acl(self, bucket: str, key: str, version_id: str | None,
                             acl: list[dict[str, Any]] | None) -> bool:
        return await self._w(self._set_object_field, bucket, key, version_id, "acl",
                             None if acl is None else json.dumps(acl))
