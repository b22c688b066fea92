"""Gateway metadata: the store interface and its SQLite (WAL) implementation."""

from gateway.metadata.sqlite import SqliteStore
from gateway.metadata.store import (
    BucketRecord,
    ListPage,
    MetadataStore,
    ObjectRecord,
    OrphanEntry,
    PartRecord,
    UploadRecord,
)

DEFAULT_PATH = "data/gateway/meta.sqlite"


def store_path(gateway_config: dict | None) -> str:
    """Where the metadata store lives: the gateway config's `metadata`, or the default."""
    return str((gateway_config or {}).get("metadata") or DEFAULT_PATH)


def open_store(path: str, *, free_delay: float = 0.0) -> MetadataStore:
    """Open the metadata store named by the gateway config (SQLite today)."""
    return SqliteStore(path, free_delay=free_delay)


__all__ = [
    "BucketRecord", "ListPage", "MetadataStore", "ObjectRecord", "OrphanEntry", "PartRecord",
    "SqliteStore", "UploadRecord", "open_store", "store_path",
]
