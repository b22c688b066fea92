"""Both metadata store backends for the store tests: `stores` (params sqlite, postgres) makes
fresh stores of one backend; the PostgreSQL one is a new database on the session's server."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.metadata import MetadataStore, open_store
from tests.support.pgserver import PgServer, pg_server  # noqa: F401 - the fixture, for importers

BACKENDS = ["sqlite", "postgres"]


class Stores:
    """Fresh targets (a file path or a database URL) and started stores on them."""

    def __init__(self, backend: str, tmp: Path, server: PgServer | None) -> None:
        self.backend, self.tmp, self.server = backend, tmp, server
        self._n = itertools.count()
        self._open: list[MetadataStore] = []

    def new_target(self) -> str:
        if self.server is not None:
            return self.server.new_database()
        return str(self.tmp / f"meta{next(self._n)}.sqlite")

    async def open(self, target: str | None = None, **kw) -> MetadataStore:
        pf = str(self.server.password_file) if self.server is not None else None
        s = open_store(target or self.new_target(), password_file=pf, **kw)
        await s.start()
        self._open.append(s)
        return s

    async def close_all(self) -> None:
        for s in self._open:
            await s.close()


@pytest.fixture(params=BACKENDS)
async def stores(request, tmp_path) -> AsyncIterator[Stores]:
    server = request.getfixturevalue("pg_server") if request.param == "postgres" else None
    st = Stores(request.param, tmp_path, server)
    yield st
    await st.close_all()
