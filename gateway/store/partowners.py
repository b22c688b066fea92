"""The gateway's side of the fragment audit and of `zonegate repair`: who owns each part.

`owners_for(config)` opens the gateway's metadata store read-mostly and returns a function
giving a fresh snapshot (part uid -> "live" | "pending write" | "queued for deletion"); the
erasure layer's audit and repair take it, so that parts the gateway is about to delete are
"queued for deletion", not "unrecoverable".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.metadata import is_database_url, store_from_config, store_path


class Owners:
    def __init__(self, gateway_config: dict[str, Any], state_dir: str | None = None) -> None:
        self.store = store_from_config(gateway_config)
        self.state_dir = state_dir
        self._snap: dict[str, str] | None = None

    async def start(self) -> None:
        await self.store.start()
        if self.state_dir is not None:
            # repair run before an upgraded gateway's first start: the files go in first
            from gateway.store.erasurequeues import import_state_dir
            await import_state_dir(self.store, self.state_dir)

    async def snapshot(self) -> dict[str, str]:
        self._snap = await self.store.part_owners()
        return self._snap

    def why_not_rebuilt(self, part_uid: str) -> str | None:
        """For repair: why this part should not be rebuilt (it is going away), or None; from
        the last snapshot (take one first)."""
        what = (self._snap or {}).get(part_uid)
        return None if what in (None, "live") else what

    def queues(self) -> dict[str, Any]:
        """ErasureCluster keyword arguments: the repair queue and deletion records that the
        gateways share in this store."""
        from gateway.store.erasurequeues import shared_queues
        return shared_queues(self.store)

    async def close(self) -> None:
        await self.store.close()


def owners_for(config: Any) -> Owners | None:
    """The owners of the gateway whose metadata store `config` names, None if it has none
    here (repair run on a machine without the gateway's SQLite file)."""
    gw = dict(getattr(config, "gateway", None) or {})
    path = store_path(gw)
    if not is_database_url(str(path)) and str(path) != ":memory:" and not Path(path).exists():
        return None
    erasure = getattr(config, "erasure", None)
    return Owners(gw, getattr(erasure, "state_dir", None))


OwnersFactory = Callable[[Any], "Owners | None"]
