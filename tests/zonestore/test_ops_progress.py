"""Long CLI work shows progress: a rich bar on a terminal, plain periodic lines otherwise
(zonestore/progress.py, used by drive fsck, repair, recover-metadata, bucket-markers and dev);
and `zonegate drive create D && zonegate drive fsck D` is clean on a brand-new drive."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from zonestore.progress import PlainProgress, progress
from zonestore.zonelog import ZoneLog

pytestmark = pytest.mark.timeout(300)


def zonegate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True,
                          text=True, timeout=120)


def on_a_terminal(*args: str) -> tuple[int, str]:
    """Run zonegate with stdout and stderr on a pseudo-terminal; (exit code, what it showed)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.environ.update(COLUMNS="100", TERM="xterm")
        os.execv(sys.executable, [sys.executable, "-m", "gateway.cli", *args])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_fsck_of_a_fresh_drive_is_clean(tmp_path):
    drive = tmp_path / "d0"
    assert zonegate("drive", "create", str(drive), "--zones", "8", "--zone-size", "8M"
                    ).returncode == 0
    res = zonegate("drive", "fsck", str(drive))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "index matches the zones" in res.stdout
    assert zonegate("drive", "fsck", str(drive), "--rebuild").returncode == 0


async def _drive_with_records(path: Path, n: int = 40) -> None:
    from zonestore.emulated import Geometry, create_emulated_drive
    create_emulated_drive(path, Geometry(nr_zones=8, zone_size=8 << 20, zone_capacity=8 << 20))
    log = await ZoneLog.open_path(path, background_reclaim=False)
    try:
        for i in range(n):
            await log.put(f"rec{i:03d}", os.urandom(100_000 + i), stream="s")
    finally:
        await log.close()


async def test_fsck_still_reports_a_missing_index_of_a_drive_that_holds_records(tmp_path):
    drive = tmp_path / "d0"
    await _drive_with_records(drive)
    (drive / "index.sqlite").unlink()
    res = zonegate("drive", "fsck", str(drive))
    assert res.returncode == 1 and "no live index" in res.stdout
    # off a terminal: plain progress lines (stderr), no control codes
    assert "scanning zones" in res.stderr and "(100%)" in res.stderr
    assert "\x1b[" not in res.stderr + res.stdout
    fixed = zonegate("drive", "fsck", str(drive), "--rebuild")
    assert fixed.returncode == 0
    assert zonegate("drive", "fsck", str(drive), "--quiet").returncode == 0


async def test_fsck_rebuild_shows_a_bar_on_a_terminal(tmp_path):
    drive = tmp_path / "d0"
    await _drive_with_records(drive)
    code, shown = on_a_terminal("drive", "fsck", str(drive), "--rebuild")
    assert code == 0, shown
    assert "━" in shown and "scanning zones" in shown  # rich's bar, drawn with escapes
    assert "\x1b[" in shown


def test_plain_progress_writes_start_periodic_and_end_lines():
    out = io.StringIO()
    with PlainProgress(out, interval=0.0) as p:
        t = p.add_task("repairing", total=None)
        p.update(t, total=3)
        for _ in range(3):
            p.advance(t)
        u = p.add_task("scanning zones", total=None)
        p.update(u, completed=5 << 20, total=10 << 20)
    lines = out.getvalue().splitlines()
    assert lines[0] == "repairing ..."
    assert "repairing: 3/3 (100%)" in lines
    assert lines.count("repairing: 3/3 (100%)") == 1  # the end line is not repeated
    assert "scanning zones: 5242880/10485760 (50%)" in lines
    quiet = io.StringIO()
    with PlainProgress(quiet, interval=3600) as p:  # between start and end: nothing
        t = p.add_task("x", total=1000)
        for _ in range(999):
            p.advance(t)
    assert quiet.getvalue().splitlines() == ["x: 0/1000 (0%)", "x: 999/1000 (99%)"]


def test_progress_picks_plain_lines_off_a_terminal_and_rich_on_one():
    from rich.console import Console
    from rich.progress import Progress
    assert isinstance(progress(console=Console(file=io.StringIO())), PlainProgress)
    assert isinstance(progress(console=Console(file=io.StringIO(), force_terminal=True)),
                      Progress)
