"""MD5 of many streams in vector lanes (gateway/s3/md5lanes.c, .py): every kernel and every
chunking give hashlib's digest, and concurrent streams share kernel calls."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import struct
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.s3 import checksums, md5lanes

pytestmark = pytest.mark.skipif(md5lanes._md5lanes is None,
                                reason="gateway/s3/_md5lanes is not built (no C compiler)")
_IV = struct.pack("<4I", 0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476)


def _padded(msg: bytes) -> bytes:
    return msg + b"\x80" + bytes(-(len(msg) + 9) % 64) + struct.pack("<Q", 8 * len(msg))


def _kernels() -> list[str]:
    isa = md5lanes.lanes_isa()
    return ["scalar"] + (["avx2"] if isa in ("avx2", "avx512") else []) + \
        (["avx512"] if isa == "avx512" else [])


@pytest.mark.parametrize("kernel", _kernels())
@pytest.mark.parametrize("lanes", [1, 2, 3, 5, 8])
def test_every_kernel_gives_hashlibs_digest_for_one_to_eight_streams(kernel: str,
                                                                     lanes: int) -> None:
    msgs = [os.urandom(64 * 37 + 13 * i) for i in range(lanes)]
    padded = [_padded(m) for m in msgs]
    states = [bytearray(_IV) for _ in msgs]
    common = min(len(p) for p in padded) // 64
    md5lanes._md5lanes.blocks(states, padded, common, kernel)
    for s, p in zip(states, padded, strict=True):
        rest = len(p) // 64 - common
        md5lanes._md5lanes.blocks([s], [memoryview(p)[64 * common:]], rest, kernel)
    assert [bytes(s) for s in states] == [hashlib.md5(m).digest() for m in msgs]


def test_the_kernel_refuses_what_it_cannot_hash() -> None:
    blocks = md5lanes._md5lanes.blocks
    with pytest.raises(ValueError):
        blocks([bytearray(16)], [bytes(63)], 1)  # less data than blocks
    with pytest.raises(ValueError):
        blocks([bytearray(15)], [bytes(64)], 1)  # not a state
    with pytest.raises(ValueError):
        blocks([bytearray(16)] * 9, [bytes(64)] * 9, 1)  # more streams than lanes
    with pytest.raises(BufferError):
        blocks([bytes(16)], [bytes(64)], 1)  # a state it cannot write
    with pytest.raises(ValueError):
        blocks([bytearray(16)], [bytes(64)], 1, "neon")
    with pytest.raises(ValueError):
        blocks([], [], 1)  # no stream
    with pytest.raises(ValueError):
        blocks([bytearray(16)], [bytes(64)], 1 << 58)  # bytes past what a size can say
    with pytest.raises(ValueError):
        blocks([bytearray(16)], [bytes(64)], -1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=3000) | st.integers(60_000, 300_000).map(lambda n: random.Random(n).randbytes(n)),
                         min_size=1, max_size=4), max_size=5))
def test_a_lane_md5_fed_any_chunking_gives_hashlibs_digest(batches: list[list[bytes]]) -> None:
    h, ref = md5lanes.LaneMd5(), hashlib.md5()
    for i, batch in enumerate(batches):
        if i % 2:
            h.update_many(batch)
        else:
            for c in batch:
                h.update(memoryview(c))
        for c in batch:
            ref.update(c)
        assert h.copy().hexdigest() == ref.hexdigest()
    assert h.digest() == ref.digest()


def test_streams_hashed_from_many_threads_each_get_their_own_digest() -> None:
    sizes = [1, 63, 64, 65, 4096, 65_536, 300_001, 1 << 20]
    results: dict[int, bool] = {}

    def stream(i: int) -> None:
        h, ref = md5lanes.LaneMd5(), hashlib.md5()
        for k in range(24):
            chunks = [os.urandom(sizes[(i + k + j) % len(sizes)]) for j in range(1 + k % 3)]
            h.update_many(chunks)
            for c in chunks:
                ref.update(c)
        results[i] = h.hexdigest() == ref.hexdigest()

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: True for i in range(12)}


def test_streams_waiting_together_share_the_kernels_calls() -> None:
    """What saves the CPU: four streams hashed at once go through the lanes together (with
    one call per stream, calls == streams advanced)."""
    data = os.urandom(1 << 20)
    for _ in range(5):  # a loaded machine may run the threads one after the other: retry
        calls, lanes = md5lanes.lanes_used()
        start = threading.Barrier(4)

        def stream(start: threading.Barrier) -> None:
            h = md5lanes.LaneMd5()
            start.wait()
            for _ in range(8):
                h.update(data)
            assert h.digest() == hashlib.md5(data * 8).digest()

        threads = [threading.Thread(target=stream, args=(start,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        calls2, lanes2 = md5lanes.lanes_used()
        if lanes2 - lanes > 1.5 * (calls2 - calls):
            return
    pytest.fail(f"streams never shared the lanes: {calls2 - calls} calls, {lanes2 - lanes} lanes")


async def test_threaded_hashers_hand_a_lane_md5_each_batch_whole() -> None:
    h, crc = md5lanes.LaneMd5(), checksums.new_hasher("CRC32")
    feeder = checksums.ThreadedHashers([h, crc])
    chunks = [os.urandom(n) for n in (100, 70_000, 200_000, 5, 1 << 20, 33)]
    for c in chunks:
        await feeder.feed(c)
    await feeder.finish()
    whole = b"".join(chunks)
    assert h.digest() == hashlib.md5(whole).digest()
    assert crc.b64() == checksums.checksum_b64("CRC32", whole)


def test_without_the_extension_new_md5_is_hashlibs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(md5lanes, "_md5lanes", None)
    h = md5lanes.new_md5()
    assert type(h) is type(hashlib.md5())
    assert md5lanes.lanes_isa() == "none"
    assert md5lanes.md5_of(b"abc").hexdigest() == hashlib.md5(b"abc").hexdigest()


def test_the_event_loop_hashes_small_updates_itself() -> None:
    """The most ThreadedHashers.finish hashes on the event loop (under 64 KiB, after a tail of
    63 bytes) is hashed there: the event loop never waits for the lanes."""
    calls, _ = md5lanes.lanes_used()

    async def small() -> str:
        h = md5lanes.LaneMd5()
        h.update(os.urandom(63))
        h.update(os.urandom(64 * 1024 - 1))
        return h.hexdigest()

    asyncio.run(small())
    assert md5lanes.lanes_used()[0] == calls


def test_a_gateway_without_the_lanes_says_so_at_start(monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    from gateway.server import app as appmod

    class Stop(Exception):
        pass

    class Store:  # the start goes no further than the metadata store
        async def start(self) -> None:
            raise Stop

    gateway = object.__new__(appmod.Gateway)
    gateway.store = Store()
    monkeypatch.setattr(appmod, "lanes_isa", lambda: "none")
    with pytest.raises(Stop):
        asyncio.run(gateway.start())
    assert "_md5lanes is not built" in caplog.text
    caplog.clear()
    monkeypatch.setattr(appmod, "lanes_isa", lambda: "avx2")
    with pytest.raises(Stop):
        asyncio.run(gateway.start())
    assert "_md5lanes" not in caplog.text


@pytest.mark.parametrize("mid_call", [False, True])
def test_a_forked_child_hashes_streams_together_too(mid_call: bool) -> None:
    """A forked child (a gateway worker may be), even of a parent whose lanes' lock a thread
    held at the fork, has its own lock and no queued streams: its streams meet in the lanes."""
    data = os.urandom(1 << 20)
    lanes = md5lanes._LANES
    with lanes._lock if mid_call else contextlib.nullcontext():
        pid = os.fork()
        if pid == 0:  # the child: four streams at once, then report by exit status
            ok = True
            try:
                results: list[bool] = []

                def stream() -> None:
                    h = md5lanes.LaneMd5()
                    for _ in range(4):
                        h.update(data)
                    results.append(h.digest() == hashlib.md5(data * 4).digest())

                threads = [threading.Thread(target=stream) for _ in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
                ok = results == [True] * 4
            finally:
                os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's hashing hung")


def test_a_kernel_error_reaches_every_stream_in_the_call_and_the_lanes_go_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = md5lanes._md5lanes
    entered = threading.Barrier(3)

    class Failing:
        @staticmethod
        def blocks(states, datas, nblocks, *rest):  # noqa: ANN001, ANN205
            if len(states) == 1 and nblocks <= 2:
                return real.blocks(states, datas, nblocks, *rest)  # digest's padding
            raise MemoryError("injected")

    monkeypatch.setattr(md5lanes, "_md5lanes", Failing)
    errors: list[BaseException] = []

    def stream() -> None:
        h = md5lanes.LaneMd5()
        entered.wait()
        try:
            h.update(bytes(1 << 20))
        except MemoryError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=stream) for _ in range(2)]
    for t in threads:
        t.start()
    entered.wait()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert len(errors) == 2
    monkeypatch.setattr(md5lanes, "_md5lanes", real)
    data = os.urandom(1 << 20)
    assert md5lanes.md5_of(data).digest() == hashlib.md5(data).digest()
