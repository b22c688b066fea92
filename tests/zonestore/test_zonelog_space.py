"""The zone log keeps its drives usable to the last zone: many streams share zones by
lifetime class (nothing is finished half empty at the open/active limit), reclaim keeps
empty zones in reserve, NoSpace only when live data fills the drive; the space figures add
up to the capacity. On small emulated drives of both limit shapes."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.space_workload import Churn, KiB, MiB, capacity, check_accounting, read_back
from tests.support.zonelog_helpers import make_drive, open_log
from zonestore.errors import NoSpace

pytestmark = pytest.mark.timeout(300)
# (max open, max active): ZNS-like and SMR-like (no active limit).
SHAPES = {"zns": (12, 14), "smr": (128, 0)}
SIZES = [4 * KiB, 16 * KiB, 100 * KiB, 256 * KiB, 1 * MiB, 3 * MiB]


def drive_of(root: Path, shape: str, zones: int = 40):
    mo, ma = SHAPES[shape]
    return make_drive(root, zones=zones, zone_size=MiB, max_open=mo, max_active=ma)


async def fill(shape: str, streams: int, size: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        log = await open_log(drive_of(Path(tmp), shape), space_wait=2.0)
        try:
            stored: dict[str, bytes] = {}
            n = 0

            async def worker(w: int) -> None:
                nonlocal n
                while True:
                    n += 1
                    rid, data = f"f{n}", bytes([n % 251]) * size
                    try:
                        await log.put(rid, data, stream=f"s{n % streams}")
                    except NoSpace:
                        return
                    stored[rid] = data

            # Puts in flight hold their chunks until they commit: keep that to an eighth.
            workers = max(1, min(16, capacity(log) // (8 * size)))
            await asyncio.gather(*(worker(w) for w in range(workers)))
            user = sum(map(len, stored.values()))
            check_accounting(log, stored)
            await read_back(log, stored)
            print(f"WA {log.stats().write_amplification:.3f}", end=" ")
            return user / capacity(log)
        finally:
            await log.close()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("streams,size", [(1000, 64 * KiB), (7, 300 * KiB), (1, 2 * MiB)])
async def test_many_streams_fill_the_drive_before_the_first_no_space(shape, streams, size):
    frac = await fill(shape, streams, size)
    print(f"{shape} {streams} streams of {size} B records: {frac:.3f} of capacity live at "
          "the first NoSpace")
    assert frac >= 0.9


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(shape=st.sampled_from(sorted(SHAPES)), streams=st.sampled_from([1, 3, 40, 1000]),
       sizes=st.lists(st.sampled_from(SIZES), min_size=1, max_size=4, unique=True),
       target=st.floats(0.5, 0.88), delete_share=st.floats(0.0, 0.6), seed=st.integers(0, 99))
def test_churn_below_90_percent_live_never_runs_out_of_space(shape, streams, sizes, target,
                                                             delete_share, seed):
    asyncio.run(_churn(shape, streams, sizes, target, delete_share, seed))


async def _churn(shape, streams, sizes, target, delete_share, seed):
    with tempfile.TemporaryDirectory() as tmp:
        log = await open_log(drive_of(Path(tmp), shape, zones=40),
                             background_reclaim=True, reclaim_interval=0.2)
        try:
            churn = Churn(target=target, streams=streams, sizes=sizes,
                          user_bytes=int(2.5 * capacity(log)), delete_share=delete_share,
                          seed=seed)
            await churn.run(log)
            assert not churn.no_space, churn.no_space[:3]
            st = log.stats()
            print(f"{shape} streams={streams} target={target:.2f}: WA "
                  f"{st.write_amplification:.3f}, copied {st.gc_bytes_copied >> 20} MiB")
            check_accounting(log, churn.model)
            await read_back(log, churn.model)
        finally:
            await log.close()
        # What was live is live after a reopen too.
        log = await open_log(drive_of_existing(Path(tmp)))
        try:
            await read_back(log, churn.model)
            check_accounting(log, churn.model)
        finally:
            await log.close()


def drive_of_existing(root: Path) -> Path:
    return root / "drive"


async def test_streams_written_one_after_another_continue_one_zone(tmp_path):
    """A new stream takes the idle class used last (its zone holds the previous stream's
    tail, data of a neighbour in time); streams written at once get classes of their own,
    and a known stream moves off a class another stream is busy with."""
    log = await open_log(drive_of(tmp_path, "zns", zones=40))
    try:
        await log.put("a1", b"a" * 100 * KiB, stream="ckpt/step-1/")
        await log.put("b1", b"b" * 100 * KiB, stream="ckpt/step-2/")
        assert log.class_of("ckpt/step-1/") == log.class_of("ckpt/step-2/")
        za = {ext.offset // log.zone_size for ext in log.index.lookup("a1").extents}
        zb = {ext.offset // log.zone_size for ext in log.index.lookup("b1").extents}
        assert za == zb
        await asyncio.gather(*(log.put(f"c{i}", b"c" * 300 * KiB, stream=f"conc{i}")
                               for i in range(log.nclasses)))
        assert len({log.class_of(f"conc{i}") for i in range(log.nclasses)}) == log.nclasses
        # step-1 and step-2 share a class; written at once, step-1 moves to another.
        both = await asyncio.gather(log.put("a2", b"a" * 300 * KiB, stream="ckpt/step-2/"),
                                    log.put("b2", b"b" * 300 * KiB, stream="ckpt/step-1/"))
        assert len(both) == 2
        assert log.class_of("ckpt/step-1/") != log.class_of("ckpt/step-2/")
    finally:
        await log.close()


async def test_checkpoint_retention_reuses_zones_without_copying(tmp_path):
    """Checkpoints of 7 records of 1 MiB written one after another (2 at a time), the
    newest 2 kept, on a drive of 18 zones of 2 MiB (ZNS-like limits): every zone is written
    several times over, reclaim copies nothing, device WA stays <= 1.02."""
    drive = make_drive(tmp_path, zones=20, zone_size=2 * MiB, max_open=12, max_active=14)
    log = await open_log(drive, background_reclaim=True, reclaim_interval=0.5)
    try:
        kept: list[list[str]] = []
        for step in range(24):
            stream = f"ckpt/run1/step-{step:05d}/"
            ids = [f"s{step}.f{j}" for j in range(7)]
            for pair in (ids[i:i + 2] for i in range(0, 7, 2)):
                await asyncio.gather(*(log.put(r, bytes([step % 251]) * MiB, stream=stream)
                                       for r in pair))
            await log.put(f"s{step}.meta", b"m" * 600, stream=stream)
            kept.append([*ids, f"s{step}.meta"])
            if len(kept) > 2:
                for r in kept.pop(0):
                    await log.delete(r)
        st = log.stats()
        assert st.device_bytes_written >= 3 * capacity(log), st
        assert st.gc_bytes_copied == 0 and st.write_amplification <= 1.02, st
        for ids in kept:
            for r in ids:
                assert await log.head(r)
    finally:
        await log.close()
