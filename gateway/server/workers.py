"""How the uvicorn supervisor starts and watches the gateway's worker processes.

uvicorn spawns each worker (a fresh interpreter that imports uvicorn and the whole gateway
again) and kills any worker that does not answer its health ping within
`timeout_worker_healthcheck` (5 s by default), starting a new one in its place. On a loaded
machine (load 10-20 on 2 cores) a spawned worker needs longer than that just to come up, so
workers were killed before they served, again and again: 26-71 s before a restarted gateway
answered (issue 24, D2). Two changes:

- workers are forked from the master, which has already imported the gateway (`zonegate
  serve` imports the app before starting uvicorn, so that import errors are one line): a new
  worker only builds the app and opens its store and node connections, a fraction of a
  spawn's CPU time, and answers its ping at once (the ping thread starts before the app does);
- the health ping waits WORKER_HEALTHCHECK_S. It is answered by a thread of the worker, not
  by its event loop, so it only ever caught a process that was wholly stuck or starved;
  a starved worker is now left to start rather than replaced by another starved one.

The master is single-threaded when it forks (its metadata check ran and closed its store
before uvicorn started), so no lock is inherited held.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from socket import socket
from typing import Any

WORKER_HEALTHCHECK_S = 60

# The supervisor's handlers (it queues these signals for itself); a worker must not inherit
# them: SIGINT and SIGTERM get the server's own handlers, the others their default action
# (or the TLS reloader's SIGHUP handler, installed when the worker builds its context).
_SUPERVISOR_SIGNALS = [getattr(signal, f"SIG{x}") for x in
                       "HUP QUIT TTIN TTOU USR1 USR2 WINCH".split() if hasattr(signal, f"SIG{x}")]


def _forked_started(config: Any, target: Callable[..., None], sockets: list[socket]) -> None:
    for sig in _SUPERVISOR_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    # prometheus_client picks its value class when imported, which in the master was before
    # PROMETHEUS_MULTIPROC_DIR was set: a spawned worker imported it again, a forked one picks
    # again (its metrics are made later, on first use), so /metrics still sums every worker.
    from prometheus_client import values
    values.ValueClass = values.get_value_class()
    config.configure_logging()
    try:
        target(sockets=sockets)
    except KeyboardInterrupt:
        pass


def forked_subprocess(config: Any, target: Callable[..., None],
                      sockets: list[socket]) -> BaseProcess:
    """uvicorn's `get_subprocess`, forking instead of spawning (see the module's text)."""
    sys.stdout.flush()
    sys.stderr.flush()  # nothing buffered is written twice
    return multiprocessing.get_context("fork").Process(
        target=_forked_started, kwargs={"config": config, "target": target, "sockets": sockets})


def use_forked_workers() -> None:
    """Make uvicorn's supervisor fork its workers (call in the master, before it runs)."""
    import uvicorn.supervisors.multiprocess as mp
    mp.get_subprocess = forked_subprocess  # type: ignore[assignment]
