"""The cluster layout's tables in the metadata store (issue 25; docs/design.md, "Cluster layout
and data movement"): every published layout version and the changes staged for the next one.

They live in the store so that every gateway on it sees one truth: a version is published with
a compare-and-set on the current one (two gateways applying at once: one wins, the other is
told so). Layouts and changes are opaque JSON text here; gateway/store/layoutstore.py adapts
these methods to erasure.layoutstore.LayoutStore.
"""

from __future__ import annotations

import abc


class LayoutTables(abc.ABC):
    """Layout versions and staged changes: each method one transaction."""

    @abc.abstractmethod
    async def layout_current(self) -> tuple[int, str] | None:
        """(version, document) of the newest published layout, or None."""

    @abc.abstractmethod
    async def layout_version(self) -> int:
        """The newest published version (0: none); what every gateway polls."""

    @abc.abstractmethod
    async def layout_get(self, version: int) -> str | None: ...

    @abc.abstractmethod
    async def layout_history(self, limit: int = 20) -> list[tuple[int, str]]:
        """The newest `limit` versions, newest first."""

    @abc.abstractmethod
    async def layout_publish(self, version: int, doc: str) -> bool:
        """Publish `doc` as `version` if the newest published version is `version - 1` (none
        at all for version 1); False, nothing written, when another one came first."""

    @abc.abstractmethod
    async def layout_staged(self) -> list[str]:
        """Staged changes, in the order they were staged."""

    @abc.abstractmethod
    async def layout_stage(self, doc: str) -> None: ...

    @abc.abstractmethod
    async def layout_clear_staged(self) -> int:
        """Drop every staged change; returns how many."""

    @abc.abstractmethod
    async def drive_identity(self, node: str, path: str, generation: int,
                             identity: str) -> str:
        """The identity recorded for this drive slot and generation: `identity` if none was
        (it is recorded now), else the one first recorded."""
