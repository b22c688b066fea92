"""Gateway metadata: the store interface, its embedded SQLite (WAL) implementation and the
PostgreSQL one for several gateways sharing one namespace."""

from __future__ import annotations

from typing import Any

from gateway.metadata.postgres import PostgresStore, redact
from gateway.metadata.queues import RepairEntry
from gateway.metadata.sqlite import SqliteStore
from gateway.metadata.store import (
    BucketRecord,
    ListPage,
    MetadataStore,
    ObjectRecord,
    OrphanEntry,
    PartRecord,
    StoreUnavailableError,
    UploadRecord,
)

DEFAULT_PATH = "data/gateway/meta.sqlite"


def store_path(gateway_config: dict | None) -> str:
    """Where the metadata store lives: the gateway config's `metadata` (a path, or a
    postgresql:// URL), or the default."""
    return str((gateway_config or {}).get("metadata") or DEFAULT_PATH)


def is_database_url(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def open_store(target: str, *, free_delay: float = 0.0, password_file: str | None = None,
               pool_size: int | None = None) -> MetadataStore:
    """The metadata store at target: a postgresql:// URL (any libpq URL; the password from
    password_file, PGPASSWORD or ~/.pgpass) or a SQLite file path. Call `await start()`."""
    if is_database_url(target):
        kw: dict[str, Any] = {} if pool_size is None else {"pool_size": pool_size}
        return PostgresStore(target, free_delay=free_delay, password_file=password_file, **kw)
    return SqliteStore(target, free_delay=free_delay)


def store_from_config(gateway_config: dict | None, *, free_delay: float = 0.0) -> MetadataStore:
    """The store named by a `[gateway]` table (`metadata`, `metadata_password_file`,
    `metadata_pool_size`)."""
    gw = gateway_config or {}
    pf = gw.get("metadata_password_file")
    ps = gw.get("metadata_pool_size")
    return open_store(store_path(gw), free_delay=free_delay,
                      password_file=str(pf) if pf else None,
                      pool_size=int(ps) if ps else None)


async def check_store(gateway_config: dict | None) -> None:
    """Open the configured store once (creating or upgrading its schema) and let go; any
    failure is one ValueError line naming the setting, for `zonegate serve` to print."""
    target = store_path(gateway_config)
    try:
        store = store_from_config(gateway_config)
    except (OSError, ValueError) as e:
        raise ValueError(f"[gateway] metadata = {describe(target)!r}: {e}") from None
    try:
        await store.start()
        await store.get_bucket("zonegate-startup-probe")
    except (OSError, ValueError) as e:
        raise ValueError(f"[gateway] metadata = {describe(target)!r}: {e}") from None
    except Exception as e:  # driver errors: authentication, permissions, a bad URL
        raise ValueError(f"[gateway] metadata = {describe(target)!r}: cannot use it: "
                         f"{type(e).__name__}: {e}") from None
    finally:
        await store.close()


def describe(target: str) -> str:
    """target for messages: a URL without its password."""
    if is_database_url(target):
        return redact(target)
    return target


__all__ = [
    "BucketRecord", "ListPage", "MetadataStore", "ObjectRecord", "OrphanEntry", "PartRecord",
    "RepairEntry", "SqliteStore", "StoreUnavailableError", "UploadRecord", "check_store", "describe", "is_database_url",
    "open_store", "store_from_config", "store_path",
]
