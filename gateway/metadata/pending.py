"""Stubs: the store contract's new methods, implemented in the next commits."""
# ruff: noqa
from __future__ import annotations
from typing import Any


class PendingMethods:
    async def put_bucket_acl(self, bucket, acl): raise NotImplementedError
    async def get_bucket_config(self, bucket, kind): raise NotImplementedError
    async def put_bucket_config(self, bucket, kind, doc): raise NotImplementedError
    async def bucket_configs(self, bucket): raise NotImplementedError
    async def head_version(self, bucket, key): raise NotImplementedError
    async def delete_version(self, bucket, key, version_id): raise NotImplementedError
    async def put_delete_marker(self, marker, versioning): raise NotImplementedError
    async def delete_many(self, bucket, items, versioning="off"): raise NotImplementedError
    async def list_versions(self, bucket, prefix, delimiter, key_marker, version_id_marker, limit): raise NotImplementedError
    async def put_object_tags(self, bucket, key, version_id, tags): raise NotImplementedError
    async def put_object_acl(self, bucket, key, version_id, acl): raise NotImplementedError
    async def add_user(self, rec): raise NotImplementedError
    async def get_user(self, access_key): raise NotImplementedError
    async def list_users(self): raise NotImplementedError
    async def remove_user(self, access_key): raise NotImplementedError
    async def lifecycle_claim(self, worker, day, lease, limit=10): raise NotImplementedError
    async def lifecycle_progress(self, bucket, worker, day, marker, lease): raise NotImplementedError
    async def lifecycle_done(self, bucket, worker, day): raise NotImplementedError
