"""The data mover's contracts and state (erasure/mover.py uses them): the `PartIndex` and
`MoveStore` a caller gives it (the gateway's: gateway/store/moves.py), its `Throttle`, and a
run's durable progress, `RunState`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from erasure.layout import PartLayout


class PartIndex(Protocol):
    """The parts a caller records, with their layouts (the gateway: object versions' and
    uploads' parts in its metadata store). `ref`s are opaque and stable while the record is."""

    async def page(self, cursor: str, limit: int
                   ) -> tuple[list[tuple[str, PartLayout]], str | None]:
        """Up to about `limit` parts after `cursor` ("" = the start) and the next cursor
        (None at the end)."""

    async def get(self, ref: str) -> PartLayout | None:
        """The layout recorded at `ref` now (None: the record is gone)."""

    async def commit(self, ref: str, old: PartLayout, new: PartLayout) -> bool:
        """Record `new` at `ref` if `old` is still recorded there (compare-and-set)."""


class MoveStore(Protocol):
    """Durable leases with a JSON document each: the run's progress and the parts in flight."""

    async def claim(self, name: str, owner: str, seconds: float,
                    doc: dict[str, Any] | None = None) -> bool:
        """Take or extend the lease `name` (free, expired or `owner`'s); `doc` replaces its
        document when given. False: someone else holds it."""

    async def save(self, name: str, owner: str, doc: dict[str, Any]) -> bool:
        """Replace the document if `owner` holds the lease."""

    async def get(self, name: str) -> dict[str, Any] | None: ...

    async def release(self, name: str, owner: str, *, drop: bool = False) -> None:
        """End `owner`'s lease (the document stays unless `drop`)."""

    async def leftovers(self, prefix: str, limit: int = 100) -> list[tuple[str, dict[str, Any]]]:
        """Expired leases under `prefix` with their documents (a crashed mover's parts)."""


class Throttle:
    """Paces bytes per node and in all: each bucket books its bytes on a virtual clock at its
    rate and a caller waits until every bucket it uses is less than `burst` seconds ahead.

    While `busy()` says foreground requests are in flight (the gateway's S3 requests), the
    rates drop to `busy_rate` per node (the total scaled alike): the mover yields to the
    foreground, as a zone log's reclaim yields to puts waiting for space, and runs at full
    rate when idle. Bytes already booked keep their pace."""

    def __init__(self, per_node: float = 0.0, total: float = 0.0, burst: float = 0.25, *,
                 busy: Callable[[], bool] | None = None, busy_rate: float = 0.0) -> None:
        self.per_node, self.total, self.burst = per_node, total, burst
        self.busy, self.busy_rate = busy, busy_rate
        self._clock: dict[str, float] = {}

    def rates(self) -> tuple[float, float]:
        """(per node, total) bytes/s now: lower while the foreground is busy (0 = unpaced)."""
        per_node, total = self.per_node, self.total
        slow = self.busy_rate
        if slow > 0 and self.busy is not None and self.busy():
            if per_node <= 0 or slow < per_node:
                scale = slow / per_node if per_node > 0 else 0.0
                per_node = slow
                if total > 0 and scale > 0:
                    total *= scale
        return per_node, total

    def _book(self, name: str, rate: float, n: int, now: float) -> float:
        if rate <= 0:
            return 0.0
        t = max(self._clock.get(name, now), now) + n / rate
        self._clock[name] = t
        return max(0.0, t - now - self.burst)

    def delay(self, nodes: Iterable[str], n: int, now: float | None = None) -> float:
        """Book `n` bytes on these nodes' buckets and the total's; the seconds to wait."""
        now = time.monotonic() if now is None else now
        per_node, total = self.rates()
        return max([self._book("*", total, n, now)]
                   + [self._book(f"node:{x}", per_node, n, now) for x in set(nodes)])

    async def take(self, nodes: Iterable[str], n: int) -> None:
        wait = self.delay(nodes, n)
        if wait > 0:
            await asyncio.sleep(wait)


@dataclass
class RunState:
    """A run's durable progress (the `run` lease's document)."""

    version: int = 0            # layout version planned for
    requested: float = 0.0      # the operator request this run answers (its time)
    phase: str = "tally"        # tally | move | done
    cursor: str = ""
    passes: int = 0
    held: dict[str, int] = field(default_factory=dict)   # bytes per node (tally, then planned)
    parts: int = 0              # parts recorded (tally)
    bytes_left: int = 0         # estimate: what still has to move
    parts_left: int = 0         # estimate: parts with a fragment that has to move
    moves: int = 0              # fragments moved (copied or rebuilt) and committed
    rebuilt: int = 0            # of them rebuilt from parity
    bytes_moved: int = 0
    failed: int = 0             # moves that failed in the last pass
    stuck: int = 0              # fragments with nowhere to go in the last pass
    started: float = 0.0
    updated: float = 0.0
    finished: float = 0.0
    owner: str = ""
    rate: float = 0.0           # bytes/s moved, this run
    balance: bool = False       # even the nodes' fill out too (else: only what must move)
    swept: int = 0              # records no part record names, moved off draining nodes
    spread: float = 0.0         # the largest fill deviation left (rebalance runs)
    drive_records: int = 0      # records moved off draining drives (within their node)
    shape: dict[str, float] = field(default_factory=dict)  # writable nodes' weights

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> RunState:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in (d or {}).items() if k in known})

    @property
    def eta(self) -> float | None:
        """Seconds until done at the rate seen so far (None: unknown)."""
        if self.phase == "done":
            return 0.0
        return self.bytes_left / self.rate if self.rate > 0 else None


def progress_report(run: dict[str, Any] | None, request: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The mover's stored run as `zonegate status`, `zonegate rebalance --json` and the
    console show it: the run's figures (less the per-node tallies), `eta_seconds`, `active`
    (what the `move_active` gauge says) and whether a rebalance request is still waiting.
    {"phase": "none"} before any run."""
    if run is None:
        return {"phase": "none", "active": False}
    st = RunState.from_dict(run)
    out = st.to_dict()
    out.pop("held", None)
    out.pop("shape", None)
    out["eta_seconds"] = st.eta
    out["active"] = bool(run) and st.phase != "done"
    out["requested_pending"] = bool(request and float(request.get("at", 0)) > st.requested)
    return out
