"""Who may sign requests: the config's `[[users]]` plus the users kept in the metadata store
(`zonegate user add/list/remove`). A user's display name is its name, its canonical id is
derived from the name (gateway.access.identity.canonical_id), so owners and grantees read
the same on every gateway.

Store users are looked up on first use and cached briefly per process (`TTL` seconds,
unknown keys for `NEGATIVE_TTL`), so a removed user's key stops working within TTL."""

from __future__ import annotations

import time
from typing import Any

from gateway.access.identity import canonical_id
from gateway.metadata import MetadataStore

TTL = 5.0
NEGATIVE_TTL = 1.0


class UserDirectory:
    def __init__(self, config_users: Any, store: MetadataStore) -> None:
        self.static: dict[str, tuple[str, str]] = {
            u.access_key: (u.name, u.secret_key) for u in config_users}
        self.static_names = {name for name, _ in self.static.values()}
        self.store = store
        self._cache: dict[str, tuple[tuple[str, str] | None, float]] = {}
        self._names: tuple[dict[str, str], float] | None = None  # canonical id -> name

    def lookup(self, access_key: str) -> tuple[str, str] | None:
        """(name, secret) for a signature check; store users only once `load`ed."""
        found = self.static.get(access_key)
        if found is not None:
            return found
        hit = self._cache.get(access_key)
        if hit is not None and hit[1] > time.monotonic():
            return hit[0]
        return None

    def needs_load(self, access_key: str) -> bool:
        if access_key in self.static:
            return False
        hit = self._cache.get(access_key)
        return hit is None or hit[1] <= time.monotonic()

    async def load(self, access_key: str) -> None:
        rec = await self.store.get_user(access_key)
        now = time.monotonic()
        if rec is None:
            self._cache[access_key] = (None, now + NEGATIVE_TTL)
        else:
            self._cache[access_key] = ((rec.display_name, rec.secret), now + TTL)
        if len(self._cache) > 10000:
            self._cache = {k: v for k, v in self._cache.items() if v[1] > now}

    async def ids(self, fresh: bool = False) -> dict[str, str]:
        """Every user's canonical id -> name (config and store); `fresh`: read the store now
        (documents naming users are validated against the current list)."""
        if fresh or self._names is None or self._names[1] <= time.monotonic():
            names = set(self.static_names)
            names.update(u.display_name for u in await self.store.list_users())
            self._names = ({canonical_id(n): n for n in names}, time.monotonic() + TTL)
        return self._names[0]

    async def known_names(self, fresh: bool = False) -> set[str]:
        return set((await self.ids(fresh)).values())
