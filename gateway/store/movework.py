"""The gateway's data mover task: runs erasure/mover.py over the metadata store whenever the
cluster layout changes (the cluster's adopt tells it), an operator asks (`zonegate rebalance`),
or a crashed mover left a run or parts unfinished. Every gateway runs one; the run lease makes
one of them move at a time, and another resumes its run if it dies.

Settings: `[erasure] move_rate` / `move_rate_total` (bytes/s per node and for the whole
cluster; `move_rate_busy` per node while this gateway handles S3 requests: the mover yields
to the foreground), `[gateway] mover_interval_seconds` (default 10; 0 = no mover in this gateway),
`mover_lease_seconds` (the run's and each part's lease: how soon another gateway takes over
from a dead mover; default 30 s for the run, 300 s for a part)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable
from typing import Any

from erasure.mover import Mover, RunState
from gateway.store.moves import StoreMoveLeases, StorePartIndex

log = logging.getLogger("zonegate.mover")
DEFAULT_INTERVAL = 10.0


def owner_id() -> str:
    """This process, as a lease owner: host, pid and a random tag (a restarted gateway with
    the same pid is someone else)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class MoverService:
    def __init__(self, cluster: Any, store: Any, *, interval: float = DEFAULT_INTERVAL,
                 rate: float = 0.0, rate_total: float = 0.0, busy_rate: float = 0.0,
                 busy: Callable[[], bool] | None = None) -> None:
        self.cluster = cluster
        self.interval = interval
        self.mover = Mover(cluster, StorePartIndex(store), StoreMoveLeases(store),
                           owner=owner_id(), layout=lambda: cluster.layout, rate=rate,
                           rate_total=rate_total, busy=busy,
                           busy_rate=busy_rate)
        self._task: asyncio.Task | None = None
        self._kick = asyncio.Event()

    @classmethod
    def from_gateway(cls, config: Any, cluster: Any, store: Any,
                     busy: Callable[[], bool] | None = None) -> MoverService:
        """The gateway's mover; `busy()` says whether the gateway is handling S3 requests
        (the app's: gateway/server/metrics.py counts them)."""
        gw = dict(getattr(config, "gateway", None) or {})
        e = getattr(config, "erasure", None)
        svc = cls(cluster, store,
                  interval=float(gw.get("mover_interval_seconds", DEFAULT_INTERVAL)),
                  rate=float(getattr(e, "move_rate", 0.0) or 0.0),
                  rate_total=float(getattr(e, "move_rate_total", 0.0) or 0.0),
                  busy_rate=float(getattr(e, "move_rate_busy", 0.0) or 0.0), busy=busy)
        if "mover_lease_seconds" in gw:  # how soon another gateway takes over a dead mover
            lease = float(gw["mover_lease_seconds"])
            svc.mover.run_lease = svc.mover.part_lease = lease
            svc.mover.retry_after = 2 * lease
        return svc

    def kick(self, *_: Any) -> None:
        """Look now (a new layout was adopted)."""
        self._kick.set()

    def start(self) -> None:
        if self.interval <= 0:
            return
        observers = getattr(self.cluster, "layout_observers", None)
        if observers is not None:
            observers.append(self.kick)
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def progress(self) -> RunState:
        return await self.mover.progress()

    async def _loop(self) -> None:
        while True:
            try:
                await self.mover.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # the store or a node is away: the next round resumes
                log.exception("data mover round failed; will resume")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.interval)
            self._kick.clear()
