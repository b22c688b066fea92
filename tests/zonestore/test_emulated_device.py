"""The emulated zoned drive enforces the rules a real host-managed drive enforces."""

from __future__ import annotations

import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from zonestore.device import (
    OutOfRangeError,
    UnalignedIOError,
    WritePointerError,
    ZoneCapacityError,
    ZoneCondition,
    ZoneResourceError,
    ZoneStateError,
    ZoneType,
)
from zonestore.emulated import EmulatedZonedDevice, Geometry, create_emulated_drive

BS = 4096
SMALL = Geometry(nr_zones=8, zone_size=16 * BS, zone_capacity=12 * BS, nr_conventional=1,
                 block_size=BS, max_open_zones=2, max_active_zones=3)


@pytest.fixture
def dev(tmp_path):
    create_emulated_drive(tmp_path / "d", SMALL)
    d = EmulatedZonedDevice(tmp_path / "d")
    yield d
    d.close()


def test_fresh_drive_reports_conventional_then_empty_zones(dev):
    zones = dev.report_zones()
    assert len(zones) == 8
    assert zones[0].type is ZoneType.CONVENTIONAL
    assert all(z.type is ZoneType.SEQUENTIAL_WRITE_REQUIRED for z in zones[1:])
    assert all(z.cond is ZoneCondition.EMPTY and z.wp == z.start for z in zones[1:])


def test_write_only_at_write_pointer_in_whole_blocks(dev):
    z = dev.zone(1)
    with pytest.raises(WritePointerError):
        dev.write(z.start + BS, b"x" * BS)
    with pytest.raises(UnalignedIOError):
        dev.write(z.start, b"x" * 100)
    dev.write(z.start, b"a" * BS)
    assert dev.zone(1).wp == z.start + BS
    assert dev.zone(1).cond is ZoneCondition.IMPLICIT_OPEN
    with pytest.raises(WritePointerError):
        dev.write(z.start, b"b" * BS)
    assert dev.read(z.start, BS) == b"a" * BS


def test_write_past_capacity_fails_and_full_zone_refuses(dev):
    z = dev.zone(2)
    with pytest.raises(ZoneCapacityError):
        dev.write(z.start, b"x" * (13 * BS))
    dev.write(z.start, b"x" * (12 * BS))
    assert dev.zone(2).cond is ZoneCondition.FULL
    with pytest.raises(ZoneCapacityError):
        dev.write(z.start + 12 * BS, b"x" * BS)


def test_open_and_active_limits(dev):
    dev.write(dev.zone(1).start, b"x" * BS)
    dev.write(dev.zone(2).start, b"x" * BS)
    with pytest.raises(ZoneResourceError):
        dev.write(dev.zone(3).start, b"x" * BS)  # third open zone
    dev.close_zone(1)
    assert dev.zone(1).cond is ZoneCondition.CLOSED
    dev.write(dev.zone(3).start, b"x" * BS)  # 2 open, 3 active
    dev.close_zone(3)
    with pytest.raises(ZoneResourceError):
        dev.write(dev.zone(4).start, b"x" * BS)  # would be a 4th active zone
    dev.finish_zone(1)
    dev.write(dev.zone(4).start, b"x" * BS)


def test_reset_rewinds_and_conventional_zone_takes_random_writes(dev):
    z = dev.zone(1)
    dev.write(z.start, b"x" * (2 * BS))
    dev.reset_zone(1)
    assert dev.zone(1).cond is ZoneCondition.EMPTY and dev.zone(1).wp == z.start
    with pytest.raises(OutOfRangeError):
        dev.read(z.start, BS)
    dev.write(3 * BS, b"c" * BS)
    dev.write(1 * BS, b"d" * BS)
    assert dev.read(BS, BS) == b"d" * BS
    with pytest.raises(ZoneStateError):
        dev.reset_zone(0)


def test_state_survives_reopen(tmp_path, dev):
    dev.write(dev.zone(1).start, b"q" * (3 * BS))
    dev.write(dev.zone(2).start, b"r" * BS)
    dev.finish_zone(2)
    dev.sync()
    dev.close()
    again = EmulatedZonedDevice(tmp_path / "d")
    z1, z2 = again.zone(1), again.zone(2)
    assert z1.cond is ZoneCondition.CLOSED and z1.wp == z1.start + 3 * BS
    assert z2.cond is ZoneCondition.FULL
    assert again.read(z1.start, 3 * BS) == b"q" * (3 * BS)
    again.close()


def test_partial_block_left_by_a_crash_is_dropped(tmp_path, dev):
    dev.write(dev.zone(1).start, b"q" * BS)
    dev.close()
    with open(tmp_path / "d" / "zones" / "000001", "ab") as f:
        f.write(b"torn")
    again = EmulatedZonedDevice(tmp_path / "d")
    assert again.zone(1).wp == again.zone(1).start + BS
    again.close()


ops = st.lists(
    st.tuples(
        st.sampled_from(["write", "open", "close", "finish", "reset"]),
        st.integers(1, 7),
        st.integers(-2, 14),  # block offset relative to the write pointer / length in blocks
        st.integers(0, 13),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops)
@example([("write", 1, 0, 2), ("write", 1, 14, 1)])  # past the zone's end: the next zone's
def test_every_illegal_write_is_refused_and_every_legal_one_accepted(tmp_path_factory, ops):
    """A reference model of the zone rules decides legality; the device must agree exactly."""
    path = tmp_path_factory.mktemp("prop") / "d"
    create_emulated_drive(path, SMALL)
    dev = EmulatedZonedDevice(path)
    wp = {i: 0 for i in range(1, 8)}
    cond = {i: "empty" for i in range(1, 8)}
    cap = SMALL.zone_capacity // BS

    def n_open():
        return sum(c in ("iopen", "eopen") for c in cond.values())

    def n_active():
        return sum(c in ("iopen", "eopen", "closed") for c in cond.values())

    def can_open(i):
        if cond[i] in ("iopen", "eopen"):
            return True
        if cond[i] not in ("empty", "closed"):
            return False
        if n_open() >= SMALL.max_open_zones:
            return False
        return not (cond[i] == "empty" and n_active() >= SMALL.max_active_zones)

    try:
        for op, i, a, b in ops:
            start = i * SMALL.zone_size
            if op == "write":
                off_blocks = wp[i] + a
                if off_blocks * BS >= SMALL.zone_size:
                    continue  # that address is the next zone's, not this one's
                nblocks = b
                legal = (a == 0 and nblocks > 0 and cond[i] != "full"
                         and wp[i] + nblocks <= cap and can_open(i))
                try:
                    dev.write(start + off_blocks * BS if off_blocks >= 0 else start,
                              b"z" * (nblocks * BS))
                    ok = True
                except OSError:
                    ok = False
                if a < 0:  # we wrote at the zone start instead: legal only if wp is 0
                    legal = wp[i] == 0 and nblocks > 0 and cond[i] != "full" and can_open(i) \
                        and nblocks <= cap
                assert ok == legal, (op, i, a, b, wp[i], cond[i])
                if ok:
                    wp[i] += nblocks
                    if cond[i] != "eopen":
                        cond[i] = "iopen"
                    if wp[i] == cap:
                        cond[i] = "full"
            elif op == "open":
                legal = can_open(i) and cond[i] != "full"
                try:
                    dev.open_zone(i)
                    ok = True
                except OSError:
                    ok = False
                assert ok == legal
                if ok:
                    cond[i] = "eopen"
            elif op == "close":
                dev.close_zone(i)
                if cond[i] in ("iopen", "eopen"):
                    cond[i] = "closed" if wp[i] else "empty"
            elif op == "finish":
                legal = cond[i] != "empty" or n_active() < SMALL.max_active_zones
                legal = legal and (cond[i] != "empty" or n_open() < SMALL.max_open_zones)
                try:
                    dev.finish_zone(i)
                    ok = True
                except OSError:
                    ok = False
                assert ok == legal
                if ok:
                    cond[i] = "full"
            elif op == "reset":
                dev.reset_zone(i)
                wp[i], cond[i] = 0, "empty"
            z = dev.zone(i)
            assert z.cond.name.lower().startswith(
                {"iopen": "implicit", "eopen": "explicit"}.get(cond[i], cond[i]))
            if cond[i] != "full":
                assert z.wp == z.start + wp[i] * BS
    finally:
        dev.close()


def test_drive_create_cli_makes_a_sparse_drive(tmp_path):
    from gateway.cli.main import main

    assert main(["drive", "create", str(tmp_path / "d"), "--zones", "16"]) == 0
    usage = sum(os.stat(p).st_blocks for p in (tmp_path / "d" / "zones").iterdir()) * 512
    assert usage < 1024 * 1024
    assert main(["drive", "info", str(tmp_path / "d")]) == 0
    assert main(["drive", "create", str(tmp_path / "d")]) == 1  # exists: one-line error
