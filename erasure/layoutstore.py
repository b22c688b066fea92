"""Where the cluster layout lives (docs/design.md, "Cluster layout and data movement").

`LayoutStore` is the async contract: the published versions (the newest is the truth), a
compare-and-set publish (two operators or gateways applying at once: one wins, the other is
told False and applies again on the new version), and the changes staged for the next version.
Two implementations: `FileLayoutStore` here (JSON files under `[erasure] state_dir`, for
erasure-only use and tools on a machine without a gateway store) and the gateway's over its
metadata store (gateway/store/layoutstore.py), which every gateway shares.

`load_or_bootstrap(store, config)` gives the current layout, publishing version 1 from the
cluster file the first time: after that the cluster file's node list is only a bootstrap.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from erasure.clusterlayout import Change, ClusterLayout, LayoutError

if TYPE_CHECKING:
    from erasure.config import ClusterConfig

HISTORY = 20  # versions `history()` returns by default
log = logging.getLogger(__name__)


@runtime_checkable
class LayoutStore(Protocol):
    async def current(self) -> ClusterLayout | None:
        """The newest published layout, or None before the first publish."""

    async def version(self) -> int:
        """The newest published version (0: none): cheap, for polling."""

    async def get(self, version: int) -> ClusterLayout | None: ...

    async def history(self, limit: int = HISTORY) -> list[ClusterLayout]:
        """The newest `limit` versions, newest first."""

    async def publish(self, layout: ClusterLayout, expected: int) -> bool:
        """Publish `layout` (its version must be expected + 1) if the current version is
        still `expected` (0: none yet); False when another publish came first."""

    async def staged(self) -> list[Change]: ...

    async def stage(self, change: Change) -> None: ...

    async def clear_staged(self) -> int: ...

    async def drive_identity(self, node: str, path: str, generation: int,
                             identity: str) -> str:
        """The drive identity recorded for this slot (node, path) and generation: the one
        given when none was (recorded now), else the first recorded. A drive reporting
        another identity is a new drive in a used slot (erasure/layouthealth.py)."""


async def load_or_bootstrap(store: LayoutStore, config: ClusterConfig) -> ClusterLayout:
    """The current layout; on first use version 1 from the cluster file is published (a
    racing bootstrap elsewhere wins or loses, both end on the same version 1)."""
    cur = await store.current()
    if cur is not None:
        return cur
    first = ClusterLayout.bootstrap(config)
    try:
        first.validate()
    except LayoutError as e:  # kept as it is (it ran so before), but said
        log.warning("the cluster file's layout cannot hold k+m per part with full "
                    "redundancy: %s (fix it with `zonegate layout`)", e)
    await store.publish(first, 0)
    cur = await store.current()
    if cur is None:  # pragma: no cover - a store that drops what it was given
        raise RuntimeError("the layout store kept no layout after the bootstrap")
    return cur


class FileLayoutStore:
    """Versions as `<dir>/v<00000001>.json` (written once: a hard link makes the CAS atomic
    between processes), staged changes in `<dir>/staged.json` (under an flock)."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir) / "layout"

    def _versions(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        out = []
        for p in self.dir.glob("v*.json"):
            with contextlib.suppress(ValueError):
                out.append(int(p.stem[1:]))
        return sorted(out)

    def _path(self, version: int) -> Path:
        return self.dir / f"v{version:08d}.json"

    def _read(self, version: int) -> ClusterLayout | None:
        try:
            return ClusterLayout.from_json(self._path(version).read_text())
        except FileNotFoundError:
            return None

    async def current(self) -> ClusterLayout | None:
        def run() -> ClusterLayout | None:
            vs = self._versions()
            return self._read(vs[-1]) if vs else None
        return await asyncio.to_thread(run)

    async def version(self) -> int:
        return await asyncio.to_thread(lambda: (self._versions() or [0])[-1])

    async def get(self, version: int) -> ClusterLayout | None:
        return await asyncio.to_thread(self._read, version)

    async def history(self, limit: int = HISTORY) -> list[ClusterLayout]:
        def run() -> list[ClusterLayout]:
            out = [self._read(v) for v in reversed(self._versions()[-limit:])]
            return [x for x in out if x is not None]
        return await asyncio.to_thread(run)

    def _publish(self, layout: ClusterLayout, expected: int) -> bool:
        if layout.version != expected + 1:
            return False
        self.dir.mkdir(parents=True, exist_ok=True)
        vs = self._versions()
        if (vs[-1] if vs else 0) != expected:
            return False
        tmp = self.dir / f".v{layout.version:08d}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as f:
            f.write(layout.to_json())
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, self._path(layout.version))  # fails if another publish came first
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(self.dir)
        return True

    async def publish(self, layout: ClusterLayout, expected: int) -> bool:
        return await asyncio.to_thread(self._publish, layout, expected)

    def _locked(self, fn):  # type: ignore[no-untyped-def]
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "staged.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return fn()

    def _staged_docs(self) -> list[dict]:
        try:
            return json.loads((self.dir / "staged.json").read_text())
        except FileNotFoundError:
            return []

    def _write_staged(self, docs: list[dict]) -> None:
        tmp = self.dir / "staged.json.tmp"
        tmp.write_text(json.dumps(docs))
        tmp.replace(self.dir / "staged.json")

    async def staged(self) -> list[Change]:
        docs = await asyncio.to_thread(self._staged_docs)
        return [Change.from_dict(d) for d in docs]

    async def stage(self, change: Change) -> None:
        def run() -> None:
            self._write_staged([*self._staged_docs(), change.to_dict()])
        await asyncio.to_thread(self._locked, run)

    async def clear_staged(self) -> int:
        def run() -> int:
            n = len(self._staged_docs())
            self._write_staged([])
            return n
        return await asyncio.to_thread(self._locked, run)

    async def drive_identity(self, node: str, path: str, generation: int,
                             identity: str) -> str:
        def run() -> str:
            p = self.dir / "drive-identities.json"
            try:
                known = json.loads(p.read_text())
            except FileNotFoundError:
                known = {}
            key = f"{node}\0{path}\0{generation}"
            if key not in known:
                known[key] = identity
                tmp = p.with_suffix(".tmp")
                tmp.write_text(json.dumps(known))
                tmp.replace(p)
            return str(known[key])
        return await asyncio.to_thread(self._locked, run)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
