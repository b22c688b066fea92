"""Fixtures shared by several test modules.

Every test module under tests/ sees these, so each name says what it is and cannot shadow, or
be shadowed by, a module's own fixture (several modules have a `dev` of their own).

Collection order: the files of `slow`-marked tests first, the in-QEMU harness before them all,
so that under `make test`'s two workers the longest files start early instead of one of them
running alone at the end.

zbd_path / zbd_dev: the libzbd tests (tests/test_zbd_*.py) run once per real zoned block
device the QEMU harness names in ZONEGATE_ZONED_DEVICES, and skip where there is none.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.zoned.support import device_params, reset_all

LONGEST_FIRST = ("test_zoned_qemu.py",)  # the longest file: about 5 minutes under TCG


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank: dict[str, int] = {}
    for item in items:
        r = 0 if item.path.name in LONGEST_FIRST else 1 if item.get_closest_marker("slow") else 2
        rank[item.path.name] = min(r, rank.get(item.path.name, 2))
    items.sort(key=lambda item: rank[item.path.name])  # stable: a file keeps its order


@pytest.fixture(params=device_params())
def zbd_path(request: pytest.FixtureRequest) -> str:
    """The path of one real zoned block device."""
    return request.param


@pytest.fixture
def zbd_dev(zbd_path: str) -> Iterator[Any]:
    """That device opened with ZbdZonedDevice, every sequential zone reset before and after
    (the tests share the devices)."""
    from zonestore.zbd import ZbdZonedDevice

    d = ZbdZonedDevice(zbd_path)
    reset_all(d)
    yield d
    if not d.closed:  # a test may close it to reopen the device itself
        reset_all(d)
        d.close()
