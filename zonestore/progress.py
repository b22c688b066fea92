"""Progress reporting for long CLI work (fsck, repair, recover-metadata, bucket-markers, dev).

`progress()` returns a rich `Progress` on a terminal and a `PlainProgress` otherwise: the same
small surface (`add_task`, `update`, `advance`, `console.print`, a context manager), so callers
and the callbacks they hand to lower layers never care which. Off a terminal (cron, CI, a log
file) a bar would be a stream of control codes, so the plain one writes one line per task when
it starts, at most every `interval` seconds while it moves, and when it ends.

It lives in zonestore, the lowest layer that needs it, so erasure and gateway reuse it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import IO, Any

from rich.console import Console

INTERVAL_S = 5.0


def _fmt(n: float, unit: str) -> str:
    if unit != "bytes":
        return f"{n:.0f}"
    for u in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or u == "TiB":
            return f"{n:.0f} {u}" if u == "B" else f"{n:.1f} {u}"
        n /= 1024
    return str(n)


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float = 0.0
    printed_at: float = 0.0
    printed: tuple[float, float | None, str] | None = None


class PlainProgress:
    """Periodic plain lines; the rich Progress calls that ZoneGate uses."""

    def __init__(self, stream: IO[str] | None = None, *, interval: float = INTERVAL_S,
                 unit: str = "items", console: Console | None = None) -> None:
        self.stream = stream or sys.stderr
        self.interval = interval
        self.unit = unit
        # Markup in messages (`[red]failed[/]`) is rendered as plain text off a terminal.
        self.console = console or Console(file=sys.stdout, highlight=False, soft_wrap=True)
        self.tasks: dict[int, _Task] = {}

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        for tid in self.tasks:
            self._line(tid, force=True)

    def add_task(self, description: str, total: float | None = None, **_: Any) -> int:
        tid = len(self.tasks)
        self.tasks[tid] = _Task(description, total)
        self._line(tid, force=True)
        return tid

    def update(self, task_id: int, *, completed: float | None = None, total: float | None = None,
               advance: float | None = None, description: str | None = None, **_: Any) -> None:
        t = self.tasks[task_id]
        if total is not None:
            t.total = total
        if completed is not None:
            t.completed = completed
        if advance:
            t.completed += advance
        if description is not None:
            t.description = description
        self._line(task_id, force=t.total is not None and t.completed >= t.total)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def _line(self, task_id: int, force: bool = False) -> None:
        t = self.tasks[task_id]
        now = time.monotonic()
        state = (t.completed, t.total, t.description)
        if state == t.printed or (not force and now - t.printed_at < self.interval):
            return
        t.printed, t.printed_at = state, now
        done = _fmt(t.completed, self.unit)
        if t.total:
            pct = int(100 * t.completed / t.total)  # floor: 100% only when done
            text = f"{t.description}: {done}/{_fmt(t.total, self.unit)} ({pct}%)"
        else:
            text = f"{t.description}: {done}" if t.completed else f"{t.description} ..."
        print(text, file=self.stream, flush=True)


def progress(*, console: Console | None = None, unit: str = "items", transient: bool = False,
             stream: IO[str] | None = None, interval: float = INTERVAL_S) -> Any:
    """A rich progress bar when `console` (default: stdout) is a terminal, else PlainProgress
    writing to `stream` (default stderr)."""
    console = console or Console(highlight=False)
    if not console.is_terminal:
        return PlainProgress(stream, interval=interval, unit=unit, console=console)
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    count = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    return Progress(TextColumn("{task.description}"), BarColumn(), count, TimeElapsedColumn(),
                    TimeRemainingColumn(), console=console, transient=transient)
