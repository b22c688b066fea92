"""`zonegate serve --config C [--workers N]`: the S3 gateway under uvicorn.

Several worker processes share the listening socket (pyeclib holds the GIL, so one process
cannot use both cores); each opens the same SQLite metadata store (WAL) and its own node
connections. On SIGTERM or Ctrl-C idle keep-alive connections are closed at once (TLS ones
too: gateway/httpproto.py) and requests in flight get --shutdown-timeout seconds to finish, so
the gateway stops within the grace `zonegate dev` allows it. The glibc allocator settings of
the Makefile are applied by re-executing once with them in the environment, so the parent and
every worker run with them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

MALLOC_ENV = {
    "MALLOC_TRIM_THRESHOLD_": "268435456",
    "MALLOC_TOP_PAD_": "67108864",
    "MALLOC_MMAP_THRESHOLD_": "268435456",
}
CONFIG_ENV = "ZONEGATE_CONFIG"
# What requests in flight get after SIGTERM before uvicorn cancels them: well inside the grace
# `zonegate dev` gives the gateway before SIGKILL (10 s), leaving room for the app's own
# shutdown. Idle connections do not wait for it (gateway/httpproto.py).
SHUTDOWN_TIMEOUT_S = 5.0


def app_factory() -> Any:
    """uvicorn's factory in each worker: the app for the config named in the environment."""
    from gateway.app import create_app
    return create_app(os.environ[CONFIG_ENV])


def _listen(config_path: str, override: str | None) -> tuple[str, int]:
    from erasure.config import ClusterConfig
    cfg = ClusterConfig.load(config_path)
    listen = override or str(cfg.gateway.get("listen", "127.0.0.1:9000"))
    host, _, port = listen.rpartition(":")
    try:
        return host.strip("[]") or "127.0.0.1", int(port)
    except ValueError:
        raise ValueError(f"gateway listen address {listen!r} is not host:port") from None


def _check_metadata(config_path: str) -> None:
    """Reach the metadata store (and create or upgrade its schema) once, before the workers
    start: a database that is unreachable is one line naming the setting, and exit 1."""
    import asyncio

    from erasure.config import ClusterConfig
    from gateway.metadata import check_store
    asyncio.run(check_store(ClusterConfig.load(config_path).gateway))


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
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    missing = {k: v for k, v in MALLOC_ENV.items() if k not in os.environ}
    if missing and not os.environ.get("ZONEGATE_NO_REEXEC"):
        env = {**os.environ, **missing, "ZONEGATE_NO_REEXEC": "1"}
        os.execve(sys.executable, [sys.executable, "-m", "gateway.cli", *sys.argv[1:]], env)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    if args.shutdown_timeout < 0:
        raise ValueError("--shutdown-timeout must not be negative")
    config_path = os.path.abspath(args.config)
    host, port = _listen(config_path, args.listen)
    # Validate the config and the metadata store here, so a bad file fails in one line.
    from gateway.metrics import prepare_multiprocess
    prepare_multiprocess()  # before the workers start: /metrics then merges all of them
    from gateway.app import Gateway  # noqa: F401 - import errors surface before forking
    _check_metadata(config_path)
    os.environ[CONFIG_ENV] = config_path
    import uvicorn
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    from erasure.config import ClusterConfig
    for line in ClusterConfig.load(config_path).placeholder_warnings():
        logging.getLogger("zonegate.serve").warning("%s", line)
    uvicorn.run("gateway.serve:app_factory", factory=True, host=host, port=port,
                workers=max(1, args.workers), loop="uvloop",
                http="gateway.httpproto:GatewayHttpProtocol",
                timeout_graceful_shutdown=args.shutdown_timeout,
                lifespan="on", access_log=False, log_level=args.log_level,
                ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key,
                timeout_keep_alive=75, server_header=False, date_header=True)
    return 0
