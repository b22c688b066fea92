"""MD5 for ETags, many streams at once: `new_md5()` gives a hashlib.md5-like hasher whose large
updates are hashed together with every other stream's waiting at the same time, one per 32-bit
lane of a vector register (md5lanes.c: up to 8 streams for about the CPU of one). Updates
of up to `INLINE_BYTES` are hashed at once in the calling thread. Without the compiled
extension, `new_md5` is hashlib.md5.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

try:
    from gateway.s3 import _md5lanes
except ImportError:  # not built (no compiler where it was installed): hashlib's MD5
    _md5lanes = None

LANES = 8
INLINE_BYTES = 64 * 1024
_IV = struct.pack("<4I", 0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476)


class _Job:
    __slots__ = ("state", "data", "pos", "left", "wake", "lead", "error")

    def __init__(self, state: bytearray, data: Any, blocks: int) -> None:
        self.state, self.data, self.pos, self.left = state, data, 0, blocks
        self.wake = threading.Lock()  # released when done, or when this thread is to lead
        self.wake.acquire()
        self.lead = False
        self.error: BaseException | None = None


class _Lanes:
    """Streams waiting to be hashed, and whose thread hashes them: the first caller to find no
    one hashing leads. It hashes every stream waiting, up to LANES at a time in one call,
    until its own is done; then it hands the lead to a thread still waiting, or stops. A
    stream alone is hashed by its own thread in one call, with no hand-off."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[_Job] = []
        self._active: list[_Job] = []  # the leader's
        self._leading = False
        # Set when a stream is queued: the kernel call in hand returns within 256 blocks
        # (16 KiB a lane), so that the new stream takes a lane.
        self._stop = bytearray(1)
        self.calls = 0  # kernel calls, and the streams they advanced: lanes / calls is the
        self.lanes = 0  # mean width, what the lanes save (`bench md5` prints it)

    def run(self, job: _Job) -> None:
        """Hash job's blocks into its state; returns when done."""
        with self._lock:
            self._queue.append(job)
            lead = not self._leading
            self._leading = True
            self._stop[0] = 1
        if not lead:
            job.wake.acquire()
            lead, job.lead = job.lead, False
        if lead:
            self._lead(job)
        if job.error is not None:
            raise job.error

    def _lead(self, own: _Job) -> None:
        try:
            self._lead_until_done(own)
        except BaseException as exc:  # noqa: BLE001 - no stream may wait for a leader gone
            with self._lock:
                jobs = self._active + self._queue
                self._active, self._queue, self._leading = [], [], False
            for j in jobs:
                if j is not own and j.left > 0:
                    j.error, j.left = exc, 0
                    j.wake.release()
            raise

    def _lead_until_done(self, own: _Job) -> None:
        blocks = _md5lanes.blocks
        while True:
            with self._lock:
                self._active += self._queue
                self._queue.clear()
                active = self._active
                if own.left <= 0:
                    if active:
                        heir = active[0]
                        heir.lead = True
                        heir.wake.release()
                    else:
                        self._leading = False
                    return
                lanes = active[:LANES]
                # a stream still waiting for a lane may stop the call early
                self._stop[0] = len(active) > LANES
            self.calls += 1
            self.lanes += len(lanes)
            try:
                k = blocks([j.state for j in lanes], [j.data[j.pos:] for j in lanes],
                           min(j.left for j in lanes), "", self._stop)
            except BaseException as exc:  # noqa: BLE001 - told to every waiting caller
                for j in lanes:
                    j.error, j.left = exc, 0
                k = 0
            for j in lanes:
                j.pos += 64 * k
                j.left -= k
            # the streams done leave; with more streams than lanes, those hashed go last
            self._active = active[len(lanes):] + [j for j in lanes if j.left > 0]
            for j in lanes:
                if j.left <= 0 and j is not own:
                    j.wake.release()

    def after_fork(self) -> None:
        """In a forked child (gateway workers may be): the parent's lock may have been held
        by a thread that does not exist here, and its queued streams are not this process's."""
        self._lock = threading.Lock()
        self._queue, self._active, self._leading = [], [], False


_LANES = _Lanes()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_LANES.after_fork)


class LaneMd5:
    """hashlib.md5's update/digest/hexdigest; one stream, updated by one thread at a time."""

    __slots__ = ("_state", "_tail", "_length")
    name = "md5"
    digest_size = 16

    def __init__(self, data: bytes = b"") -> None:
        self._state = bytearray(_IV)
        self._tail = b""
        self._length = 0
        if data:
            self.update(data)

    def update(self, data: Any, /) -> None:
        self.update_many((data,))

    def update_many(self, chunks: Sequence[Any]) -> None:
        """Hash chunks in order; large updates are hashed with other streams' (_Lanes)."""
        size = sum(len(c) for c in chunks)
        if not size:
            return
        self._length += size
        if self._tail or len(chunks) != 1:
            data = b"".join((self._tail, *chunks))
        else:
            data = chunks[0]
        n = len(data) // 64
        self._tail = bytes(memoryview(data)[64 * n:])
        if not n:
            return
        if 64 * n <= INLINE_BYTES:  # ThreadedHashers.finish: under 64 KiB + a tail
            _md5lanes.blocks([self._state], [data], n)
        else:
            _LANES.run(_Job(self._state, memoryview(data).cast("B"), n))

    def copy(self) -> LaneMd5:
        other = LaneMd5()
        other._state[:] = self._state
        other._tail, other._length = self._tail, self._length
        return other

    def digest(self) -> bytes:
        pad = (self._tail + b"\x80" + bytes(-(len(self._tail) + 9) % 64)
               + struct.pack("<Q", (8 * self._length) & 0xFFFF_FFFF_FFFF_FFFF))
        state = bytearray(self._state)
        _md5lanes.blocks([state], [pad], len(pad) // 64)
        return bytes(state)

    def hexdigest(self) -> str:
        return self.digest().hex()


def new_md5() -> Any:
    """A fresh MD5 hasher: LaneMd5 where the extension is built, else hashlib.md5()."""
    return LaneMd5() if _md5lanes is not None else hashlib.md5()


def md5_of(data: Any) -> Any:
    """A hasher that has taken `data` (call it in a worker thread: it may wait for the lanes)."""
    h = new_md5()
    h.update(data)
    return h


def lanes_used() -> tuple[int, int]:
    """(kernel calls, streams they advanced) in this process's lanes so far."""
    return _LANES.calls, _LANES.lanes


def lanes_isa() -> str:
    """'avx512', 'avx2', '' (one stream at a time), or 'none' (hashlib: not built)."""
    return _md5lanes.simd() if _md5lanes is not None else "none"
