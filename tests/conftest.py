"""Fixtures shared by several test modules.

Every test module under tests/ sees these, so each name says what it is and cannot shadow, or
be shadowed by, a module's own fixture (several modules have a `dev` of their own).

zbd_path / zbd_dev: the libzbd tests (tests/zonestore/test_zbd_*.py) run once per real zoned block
device the QEMU harness names in ZONEGATE_ZONED_DEVICES, and skip where there is none.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.zoned.support import device_params, reset_all


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
