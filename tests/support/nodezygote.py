"""Start node processes by forking a pre-imported one: `python -m zonestore.node` without
paying its ~0.3 CPU-s of imports per node (a 6-node cluster starts in a fraction of the time).

A zygote is a plain `python -m tests.support.nodezygote` that imports the node's modules,
then, per request on its stdin, forks a child that becomes a new session, sends its output to
the node's log and runs `zonestore.node`'s main with the given arguments: a real node
process, as `python -m zonestore.node` would be, only without the imports. The zygote reaps
its children and reports their exit status; `ForkedNode` wraps that as the part of
`subprocess.Popen`'s interface the tests use (pid, poll, wait, kill, terminate,
send_signal, returncode).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# ------------------------------------------------------------------ client side (pytest)

_REPO = str(Path(__file__).resolve().parents[2])  # where `-m tests.support...` imports from


class Zygote:
    """One zygote process, started with `env` (glibc reads MALLOC_* at a process's start, so
    the environment is the zygote's own, and children keep it)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.nodezygote"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=dict(env), cwd=_REPO)
        self.lock = threading.Lock()
        assert self._read() == {"ready": True}

    def _read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"node zygote exited with {self.proc.wait()}")
        return json.loads(line)

    def call(self, req: dict) -> dict:
        assert self.proc.stdin is not None
        with self.lock:
            self.proc.stdin.write(json.dumps(req).encode() + b"\n")
            self.proc.stdin.flush()
            return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_ZYGOTES: dict[tuple[tuple[str, str], ...], Zygote] = {}
_ZLOCK = threading.Lock()


def _zygote(env: Mapping[str, str]) -> Zygote:
    key = tuple(sorted(env.items()))
    with _ZLOCK:
        z = _ZYGOTES.get(key)
        if z is None or z.proc.poll() is not None:
            z = _ZYGOTES[key] = Zygote(env)
        return z


@atexit.register
def _close_all() -> None:
    for z in _ZYGOTES.values():
        z.close()


class ForkedNode:
    """A node process forked by a zygote, with the Popen methods the tests use."""

    def __init__(self, zygote: Zygote, pid: int, args: Sequence[str]) -> None:
        self.zygote = zygote
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.call({"status": self.pid})["status"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.005
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def spawn_node(args: Sequence[str], log_path: str, env: Mapping[str, str]) -> ForkedNode:
    """`python -m zonestore.node ARGS` with stdout and stderr appended to `log_path`, in a new
    session (as Popen's start_new_session), forked from a zygote with `env`."""
    z = _zygote(env)
    pid = z.call({"spawn": list(args), "log": str(log_path), "cwd": os.getcwd()})["pid"]
    return ForkedNode(z, pid, args)


# ------------------------------------------------------------------ the zygote itself


def _child(req: dict, fds: Sequence[int]) -> None:
    """In the forked child: become the node process, never return."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter
        for fd in fds:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        os.chdir(req["cwd"])
        import io
        import random
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True,
                                      line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True,
                                      line_buffering=True, errors="backslashreplace")
        random.seed()  # not the zygote's sequence, shared by every sibling
        import zonestore.node.__main__ as node_main
        sys.argv = [node_main.__file__, *req["spawn"]]
        try:
            code = node_main.main(req["spawn"]) or 0
        except SystemExit as e:  # as the interpreter ends on one
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                code = 1
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve() -> None:
    import zonestore.fsck  # noqa: F401
    import zonestore.node.__main__  # noqa: F401 - the imports every child then skips
    import zonestore.opener  # noqa: F401
    import zonestore.pool  # noqa: F401
    import zonestore.reclaim  # noqa: F401
    import zonestore.zonelog  # noqa: F401
    # the protocol on fds of its own; 0 and 1 go to /dev/null and stderr
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    inp, out = os.fdopen(rfd, "rb"), os.fdopen(wfd, "wb")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # pytest's Ctrl-C: closing stdin ends us
    exited: dict[int, int] = {}

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            exited[pid] = os.waitstatus_to_exitcode(status)

    out.write(b'{"ready": true}\n')
    out.flush()
    while True:
        ready, _, _ = select.select([inp, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            reap()
        if inp not in ready:
            continue
        line = inp.readline()
        if not line:
            return
        req = json.loads(line)
        if "spawn" in req:
            pid = os.fork()
            if pid == 0:
                _child(req, [inp.fileno(), out.fileno(), wake_r, wake_w])
            answer = {"pid": pid}
        else:
            reap()
            answer = {"status": exited.get(req["status"])}
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    _serve()
