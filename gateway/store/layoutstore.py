"""erasure.layoutstore.LayoutStore over the gateway's metadata store (SQLite or PostgreSQL):
every gateway on one store shares one cluster layout (issue 25). The tables and their
compare-and-set are gateway/metadata/layouts*.py."""

from __future__ import annotations

import json

from erasure.clusterlayout import Change, ClusterLayout
from erasure.layoutstore import HISTORY
from gateway.metadata import MetadataStore


class StoreLayouts:
    """erasure.layoutstore.LayoutStore on a MetadataStore."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def current(self) -> ClusterLayout | None:
        got = await self.store.layout_current()
        return ClusterLayout.from_json(got[1]) if got else None

    async def version(self) -> int:
        return await self.store.layout_version()

    async def get(self, version: int) -> ClusterLayout | None:
        doc = await self.store.layout_get(version)
        return ClusterLayout.from_json(doc) if doc else None

    async def history(self, limit: int = HISTORY) -> list[ClusterLayout]:
        return [ClusterLayout.from_json(d) for _, d in await self.store.layout_history(limit)]

    async def publish(self, layout: ClusterLayout, expected: int) -> bool:
        if layout.version != expected + 1:
            return False
        return await self.store.layout_publish(layout.version, layout.to_json())

    async def staged(self) -> list[Change]:
        return [Change.from_dict(json.loads(d)) for d in await self.store.layout_staged()]

    async def stage(self, change: Change) -> None:
        await self.store.layout_stage(json.dumps(change.to_dict(), sort_keys=True))

    async def clear_staged(self) -> int:
        return await self.store.layout_clear_staged()

    async def drive_identity(self, node: str, path: str, generation: int,
                             identity: str) -> str:
        return await self.store.drive_identity(node, path, generation, identity)
