"""Leases on shared erasure work: a part is rehomed or healed by one worker at a time.

Every gateway worker runs a healer and moves handoff fragments home when a node returns; two
of them working on one part did the work twice (87 of 103 moves in one run) or rebuilt a
fragment the other had just moved (issue 24, D5). Before either, a worker takes the part's
lease (`part_lease`); one that cannot leaves the part to its holder. `LeaseStore` is what the
cluster takes: the gateway gives it one on the shared metadata store (every gateway on it
sees the same leases, gateway/store/erasurequeues.py); alone, `LocalLeases` serves the one
process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator
from typing import Protocol

PART_LEASE_S = 300.0  # a holder that dies frees the part after this
WAIT_STEP = 0.5       # seconds between asks while waiting for a lease


class LeaseStore(Protocol):
    async def lease_take(self, name: str, holder: str, seconds: float) -> bool: ...

    async def lease_release(self, name: str, holder: str) -> None: ...


class LocalLeases:
    """Leases within one process."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, float]] = {}

    async def lease_take(self, name: str, holder: str, seconds: float) -> bool:
        now = time.monotonic()
        got = self._held.get(name)
        if got is not None and got[0] != holder and got[1] > now:
            return False
        self._held[name] = (holder, now + seconds)
        return True

    async def lease_release(self, name: str, holder: str) -> None:
        if self._held.get(name, ("",))[0] == holder:
            del self._held[name]


def new_holder() -> str:
    """This process's name as a lease holder (unique across hosts and restarts)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@contextlib.asynccontextmanager
async def part_lease(leases: LeaseStore, holder: str, part_uid: str,
                     seconds: float = PART_LEASE_S, wait: float = 0.0) -> AsyncIterator[bool]:
    """Hold the part's lease for the block: yields False (and holds nothing) when another
    holder has it, still after `wait` seconds of asking again. The lease is given back at the
    end; if that fails (or the holder dies) it runs out after `seconds`."""
    name = f"part/{part_uid}"
    deadline = time.monotonic() + wait
    while not await leases.lease_take(name, holder, seconds):
        if time.monotonic() >= deadline:
            yield False
            return
        await asyncio.sleep(WAIT_STEP)
    try:
        yield True
    finally:
        with contextlib.suppress(Exception):
            await leases.lease_release(name, holder)
