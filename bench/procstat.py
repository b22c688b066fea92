"""CPU seconds of a cluster's processes by role, from /proc/<pid>/stat (utime + stime of every
thread; children's time is not counted, so a role's figure is its own processes' only)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _user_system(stat: str) -> tuple[float, float]:
    """(utime, stime) in seconds from the text of a /proc .../stat file."""
    # the command name (field 2) may hold spaces: split after its closing parenthesis
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return sum(_user_system(text))


def role_of(pid: int) -> str:
    """gateway, node, launcher (`zonegate dev` itself) or other, from the command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    if b"node" in argv and b"--id" in argv:
        return "node"
    if b"serve" in argv or any(a.startswith(b"from multiprocessing") for a in argv):
        return "gateway"  # uvicorn's main process and its spawned workers
    if b"dev" in argv:
        return "launcher"
    return "other"


class RoleClock:
    """Sums CPU seconds per role over a fixed set of processes (a cluster's, found once)."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.roles = {pid: role_of(pid) for pid in pids}

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, role in self.roles.items():
            s = cpu_seconds(pid)
            if s is not None:
                out[role] = out.get(role, 0.0) + s
        out["client"] = cpu_seconds(os.getpid()) or 0.0
        return out

    @staticmethod
    def delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        return {k: b.get(k, 0.0) - a.get(k, 0.0) for k in set(a) | set(b)}


def task_stats(pid: int, name: str = "stat") -> Iterator[tuple[str, str]]:
    """(thread id, text of /proc/<pid>/task/<tid>/<name>) for each live thread of pid."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            yield tid, Path(f"/proc/{pid}/task/{tid}/{name}").read_text()
        except OSError:
            continue


def thread_times(pids: dict[int, str]) -> dict[str, tuple[float, float]]:
    """User and system CPU seconds per `role:loop` (each process's main thread: the event
    loop) and `role:threads` (its other threads: hashing, disk I/O), from
    /proc/<pid>/task/<tid>/stat; `pids` maps a process to its role."""
    out: dict[str, tuple[float, float]] = {}
    for pid, role in pids.items():
        for tid, text in task_stats(pid):
            key = f"{role}:{'loop' if tid == str(pid) else 'threads'}"
            user, system = out.get(key, (0.0, 0.0))
            u, s = _user_system(text)
            out[key] = (user + u, system + s)
    return out


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])
