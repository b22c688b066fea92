"""`zonegate serve --config C [--workers N]`: the S3 gateway under uvicorn.

Several worker processes share the listening socket (pyeclib holds the GIL, so one process
cannot use both cores); each opens the same SQLite metadata store (WAL) and its own node
connections. On SIGTERM or Ctrl-C idle keep-alive connections are closed at once (TLS ones
too: gateway/server/httpproto.py) and requests in flight get --shutdown-timeout seconds to finish, so
the gateway stops within the grace `zonegate dev` allows it. The glibc allocator settings of
the Makefile are applied by re-executing once with them in the environment, so the parent and
every worker run with them.

Workers die with their master: each asks the kernel for SIGTERM when the master dies, even by
SIGKILL (PR_SET_PDEATHSIG), and then stops as on any SIGTERM, so no orphaned worker keeps the
port and a restarted master can bind it. The per-connection limits and timeouts of
gateway/server/httplimits.py come from `[gateway]` and travel to the workers on uvicorn's Config.
uvicorn's proxy-header rewriting is off: the client address behind a proxy comes from
`[gateway] trusted_proxies` (gateway/access/proxies.py). Prometheus multiprocess directories
are named after the master's pid; those of dead masters (whose workers are dead too) are
removed at start, so crashes do not leak them.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import gc
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

# glibc's default trim/mmap thresholds make CPython regrow its heap for every large buffer;
# measured to matter 2-12x for the servers (shared/notes/performance.md). The one definition:
# `zonegate dev`, the tests and the Makefile's defaults use the same.
MALLOC_ENV = {
    "MALLOC_TRIM_THRESHOLD_": "268435456",
    "MALLOC_TOP_PAD_": "67108864",
    "MALLOC_MMAP_THRESHOLD_": "268435456",
}
CONFIG_ENV = "ZONEGATE_CONFIG"
MASTER_ENV = "ZONEGATE_SERVE_MASTER"  # the master's pid, for its workers
PR_SET_PDEATHSIG = 1
METRICS_PREFIX = "zonegate-metrics-"
STARTUP_FAILURE = 3  # uvicorn's exit status when the server did not start
# What requests in flight get after SIGTERM before uvicorn cancels them: well inside the grace
# `zonegate dev` gives the gateway before SIGKILL (10 s), leaving room for the app's own
# shutdown. Idle connections do not wait for it (gateway/server/httpproto.py).
SHUTDOWN_TIMEOUT_S = 5.0
# gc thresholds of a worker (tune_gc): a request's few thousand containers (a listing page's
# records and rows) no longer set off collections; older generations as CPython's defaults.
GC_THRESHOLD = (10_000, 10, 10)


def app_factory() -> Any:
    """uvicorn's factory in each worker: the app for the config named in the environment."""
    die_with_master()
    from gateway.server.app import create_app
    app = create_app(os.environ[CONFIG_ENV])
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as state:
            tune_gc()
            yield state
    app.router.lifespan_context = lifespan
    return app


def tune_gc() -> None:
    """Once the worker has started: everything alive now (modules, the app, the store's pools)
    lives as long as the process, so it leaves the collector's generations (gc.freeze), and a
    young-generation collection waits for GC_THRESHOLD[0] new container objects, not 700.
    Measured on a ListObjects page of 1000 (bench/README.md, Metadata): 8 collections a page,
    every ~20 pages a full one over the whole heap (tens of ms: the tail of the page times).
    Reference counting still frees almost everything at once; the collector only finds
    cycles, a little later."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def die_with_master() -> None:
    """In a worker process (not in a single-process server): SIGTERM when the master dies."""
    try:
        master = int(os.environ.get(MASTER_ENV, ""))
    except ValueError:
        return
    if master == os.getpid():
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != master:  # the master died before prctl took effect
        os._exit(1)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_metrics_dirs(tmp: str | Path | None = None) -> list[Path]:
    """Remove the multiprocess metrics directories of gateways that are gone: named after a
    dead master (`zonegate-metrics-<pid>-*`), or of an older naming, whose metric files all
    belong to dead processes. Returns what was removed."""
    removed = []
    for d in Path(tmp or tempfile.gettempdir()).glob(METRICS_PREFIX + "*"):
        if not d.is_dir():
            continue
        pids = set()
        m = re.match(re.escape(METRICS_PREFIX) + r"([0-9]+)-", d.name)
        if m:
            pids.add(int(m.group(1)))
        try:
            for f in d.glob("*.db"):
                tail = f.stem.rsplit("_", 1)[-1]
                if tail.isascii() and tail.isdigit():
                    pids.add(int(tail))
        except OSError:
            continue
        if pids and not any(_pid_alive(p) for p in pids):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _metrics_dir() -> str | None:
    """A fresh multiprocess metrics directory named after this master (None: the operator
    chose one with PROMETHEUS_MULTIPROC_DIR)."""
    from gateway.server.metrics import MULTIPROC_ENV
    if os.environ.get(MULTIPROC_ENV):
        return None
    remove_stale_metrics_dirs()
    path = tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _listen(config_path: str, override: str | None) -> tuple[str, int]:
    from erasure.config import ClusterConfig
    cfg = ClusterConfig.load(config_path)
    listen = override or str(cfg.gateway.get("listen", "127.0.0.1:9000"))
    host, _, port = listen.rpartition(":")
    try:
        return host.strip("[]") or "127.0.0.1", int(port)
    except ValueError:
        raise ValueError(f"gateway listen address {listen!r} is not host:port") from None


def _tls_from_config(args: argparse.Namespace, config_path: str) -> None:
    """`[gateway] tls_cert / tls_key` (relative to the config file) unless given as flags;
    SIGHUP reloads them (gateway/server/tls.py)."""
    if args.tls_cert or args.tls_key:
        return
    from erasure.config import ClusterConfig
    gw = ClusterConfig.load(config_path).gateway
    base = os.path.dirname(config_path)
    for key in ("tls_cert", "tls_key"):
        if gw.get(key):
            setattr(args, key, os.path.join(base, str(gw[key])))


def _check_metadata(config_path: str) -> None:
    """Reach the metadata store (and create or upgrade its schema) once, before the workers
    start: a database that is unreachable is one line naming the setting, and exit 1."""
    import asyncio

    from erasure.config import ClusterConfig
    from gateway.metadata import check_store
    from gateway.store.ssekeys import SseSettings
    gw = ClusterConfig.load(config_path).gateway
    # a bad sse_master_key_file: one line (ValueError), exit 1
    SseSettings.from_gateway(gw, os.path.dirname(os.path.abspath(config_path)))
    asyncio.run(check_store(gw))


def preload_worker_modules() -> None:
    """Import in the master what a worker's create_app imports, so that the workers, forked
    (gateway/server/workers.py), find it loaded: a worker then starts in a fraction of the
    CPU time, which is what a loaded machine lacks. One left out is only imported later."""
    import erasure.cluster  # noqa: F401 - node client, aiohttp
    import gateway.console  # noqa: F401
    import gateway.server.health  # noqa: F401
    import gateway.store.erasurequeues  # noqa: F401


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the S3 gateway")
    p.add_argument("--config", required=True, help="cluster config (TOML)")
    p.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 4),
                   help="worker processes (default: CPUs, at most 4)")
    p.add_argument("--listen", default=None, help="host:port (default: [gateway] listen)")
    p.add_argument("--tls-cert", default=None, help="PEM certificate: serve HTTPS")
    p.add_argument("--tls-key", default=None, help="PEM private key for --tls-cert")
    p.add_argument("--shutdown-timeout", type=float, default=SHUTDOWN_TIMEOUT_S,
                   help="seconds requests in flight at SIGTERM get to finish "
                        f"(default {SHUTDOWN_TIMEOUT_S:g})")
    p.add_argument("--log-level", default="warning")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="log lines as text (default) or JSON objects")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    missing = {k: v for k, v in MALLOC_ENV.items() if k not in os.environ}
    if missing and not os.environ.get("ZONEGATE_NO_REEXEC"):
        env = {**os.environ, **missing, "ZONEGATE_NO_REEXEC": "1"}
        os.execve(sys.executable, [sys.executable, "-m", "gateway.cli", *sys.argv[1:]], env)
    _tls_from_config(args, os.path.abspath(args.config))
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    if args.shutdown_timeout < 0:
        raise ValueError("--shutdown-timeout must not be negative")
    config_path = os.path.abspath(args.config)
    host, port = _listen(config_path, args.listen)
    # Validate the config and the metadata store here, so a bad file fails in one line.
    from erasure.config import ClusterConfig
    from gateway.server.httplimits import HttpLimits
    cfg = ClusterConfig.load(config_path)
    limits = HttpLimits.from_gateway(cfg.gateway)
    from gateway.access.proxies import TrustedProxies
    TrustedProxies.from_gateway(cfg.gateway)  # a bad network: one line naming the setting
    from gateway.server.metrics import prepare_multiprocess
    prepare_multiprocess(_metrics_dir())  # before the workers start: /metrics merges them
    from gateway.server.app import Gateway  # noqa: F401 - import errors surface before forking
    preload_worker_modules()
    _check_metadata(config_path)
    os.environ[CONFIG_ENV] = config_path
    from gateway.server.tls import run_uvicorn
    from zonestore.logsetup import configure, dict_config
    log_config = dict_config(args.log_level, args.log_format, "gateway")
    configure(args.log_level, args.log_format, "gateway")
    for line in cfg.placeholder_warnings():
        logging.getLogger("zonegate.serve").warning("%s", line)
    os.environ[MASTER_ENV] = str(os.getpid())
    # the limits ride on the Config, where each worker's protocol reads them
    return run_uvicorn("gateway.server.serve:app_factory", attrs={"zonegate_limits": limits},
                       factory=True, host=host, port=port,
                       workers=max(1, args.workers), loop="uvloop",
                       http="gateway.server.httpproto:GatewayHttpProtocol",
                       timeout_graceful_shutdown=args.shutdown_timeout,
                       lifespan="on", access_log=False, log_level=args.log_level,
                       log_config=log_config,
                       ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key,
                       timeout_keep_alive=75, server_header=False, date_header=True,
                       # uvicorn would believe X-Forwarded-* from any loopback peer (or
                       # $FORWARDED_ALLOW_IPS) and rewrite the scope for everything; the
                       # gateway's `trusted_proxies` decide, for aws:SourceIp and logs only
                       proxy_headers=False)
