"""A throwaway PostgreSQL server for the tests: Debian's `postgresql` binaries, `initdb` into a
temporary directory, listening on a free port of 127.0.0.1 and on a unix socket in that
directory. PostgreSQL refuses to run as root (CI runs as root): the server then runs as the
`postgres` system user (the Debian package creates it) through `runuser`.

`pg_server` is a session-scoped fixture; tests that need a server they can stop and restart
make their own `PgServer`. Without the binaries the tests that need them skip, saying why.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

USER = "zonegate"
PASSWORD = "pg-test-secret"
_db_counter = itertools.count()


def pg_bindir() -> Path | None:
    """The newest installed PostgreSQL's bin directory, or None."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                  key=lambda d: int(Path(d).parent.name) if Path(d).parent.name.isdigit() else 0)
    for d in reversed(dirs):
        if (Path(d) / "initdb").exists() and (Path(d) / "pg_ctl").exists():
            return Path(d)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def skip_reason() -> str | None:
    if pg_bindir() is None:
        return "PostgreSQL server binaries not installed (Debian package `postgresql`)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and no `postgres` system user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root and no `runuser` to drop privileges for PostgreSQL"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, port: int | None = None) -> None:
        reason = skip_reason()
        if reason:
            pytest.skip(reason)
        self.bindir = pg_bindir()
        assert self.bindir is not None
        self.root = Path(tempfile.mkdtemp(prefix="zonegate-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = port or free_port()
        self.password_file = self.root / "password"
        self.password_file.write_text(PASSWORD + "\n")
        self._as_root = os.geteuid() == 0
        if self._as_root:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            os.chown(self.password_file, pw.pw_uid, pw.pw_gid)
        # readable by the gateway processes the tests start (same user as the tests)
        os.chmod(self.root, 0o755)
        self.password_file.chmod(0o644)
        self._run("initdb", "-D", str(self.data), "-U", USER, "--auth=scram-sha-256",
                  f"--pwfile={self.password_file}", "-E", "UTF8", "--locale=C.UTF-8")
        self.running = False

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(self.bindir / tool), *args]
        if self._as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed: {r.stdout}{r.stderr}\n{log[-3000:]}")
        return r

    def start(self) -> None:
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
                "-c max_connections=300 -c shared_buffers=32MB -c fsync=on")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w",
                  "-t", "60", "start")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        if self.running:
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop",
                      check=False)
            self.running = False

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        """A libpq URL without the password (that comes from password_file or PGPASSWORD)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{db}"

    def psql(self, sql: str, db: str = "postgres") -> str:
        r = subprocess.run([str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-v",
                            "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(self.port),
                            "-U", USER, "-d", db, "-c", sql],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PGPASSWORD": PASSWORD})
        if r.returncode != 0:
            raise RuntimeError(f"psql failed: {r.stderr}")
        return r.stdout

    def new_database(self, prefix: str = "t") -> str:
        """A fresh, empty database; its URL."""
        name = f"{prefix}{os.getpid()}_{next(_db_counter)}"
        self.psql(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url(name)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = PgServer()
    try:
        server.start()
        yield server
    finally:
        server.destroy()
