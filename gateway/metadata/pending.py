"""Stubs: the store contract's new methods, implemented in the next commits."""
# ruff: noqa
from __future__ import annotations
from typing import Any


class PendingMethods:
    async def head_version(self, bucket, key): raise NotImplementedError
    async def delete_version(self, bucket, key, version_id): raise NotImplementedError
    async def put_delete_marker(self, marker, versioning): raise NotImplementedError
    async def delete_many(self, bucket, items, versioning="off"): raise NotImplementedError
    async def list_versions(self, bucket, prefix, delimiter, key_marker, version_id_marker, limit): raise NotImplementedError
