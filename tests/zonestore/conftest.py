"""Fixtures of the node tests: one node on two drives per module, and an HTTP session."""

from __future__ import annotations

import aiohttp
import pytest

from tests.support.nodeproc import NodeCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One real node process on two emulated drives, shared by a module's tests (a module
    that needs another secret or drive count defines its own)."""
    with NodeCluster(tmp_path_factory.mktemp("nodes"), 1, drives_per_node=2) as c:
        yield c


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s
