"""One supervised child of `zonegate dev` (a node or the gateway): started in its own process
group, dying with the launcher (PR_SET_PDEATHSIG), its group reaped after it dies, restarted
with a backoff while it keeps dying soon after its start."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
RESTART_DELAY_S = 0.5
RESTART_DELAY_MAX_S = 30.0
STABLE_S = 60.0  # a child that ran this long before dying is restarted without delay

_libc = ctypes.CDLL(None, use_errno=True)


def child_preexec(parent: int) -> None:
    # Runs in the child between fork and exec: die with the launcher, however it dies. The
    # signal follows the *thread* that forked, so the launcher spawns only from its main thread.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(1)


@dataclass
class Child:
    name: str
    argv: list[str]
    log: Path
    proc: Any = None
    starts: list[float] = field(default_factory=list)
    failures: int = 0  # deaths in a row, each soon after its start
    restart_at: float | None = None  # when a dead child is to be started again

    def spawn(self, env: dict[str, str], keep_fds: tuple[int, ...] = ()) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        with open(self.log, "ab") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: "
                      f"{' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                env=env, process_group=0, preexec_fn=lambda: child_preexec(parent),
                pass_fds=keep_fds,
            )
        self.starts.append(time.monotonic())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, sig: int) -> bool:
        """Signal the child's process group; False when the group is gone."""
        if self.proc is None:
            return False
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def reap_group(self, grace: float) -> None:
        """After the child itself died: SIGTERM what is left of its process group (a
        gateway's workers), SIGKILL it after `grace` seconds, and wait until it is gone."""
        if not self.signal_group(signal.SIGTERM):
            return
        deadline = time.monotonic() + grace
        while self.signal_group(0):
            if time.monotonic() > deadline:
                self.signal_group(signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.1)

    def restart_delay(self, now: float) -> float:
        """How long to wait before starting the dead child again (doubling while it keeps
        dying soon after its start)."""
        if self.starts and now - self.starts[-1] >= STABLE_S:
            self.failures = 0
        self.failures += 1
        if self.failures == 1:
            return 0.0
        return min(RESTART_DELAY_MAX_S, RESTART_DELAY_S * 2 ** (self.failures - 2))

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("    " + t for t in text[-lines:])
