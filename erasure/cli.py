"""`zonegate node` (run one storage node of the cluster config) and `zonegate repair`."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from erasure.config import ClusterConfig
from zonestore.progress import progress as make_progress

# Set by the composing CLI (gateway/cli/main.py): config -> an object with snapshot() (part uid ->
# owner), why_not_rebuilt(part uid) and queues() (ErasureCluster keyword arguments: the
# shared repair queue and deletion records), or None. This layer cannot import the gateway.
OWNERS: Callable[[ClusterConfig], Any] | None = None


def register(sub: argparse._SubParsersAction,
             owners: Callable[[ClusterConfig], Any] | None = None) -> None:
    global OWNERS
    OWNERS = owners
    node = sub.add_parser("node", help="run one storage node of the cluster config")
    node.add_argument("--config", required=True, help="cluster config (TOML)")
    node.add_argument("--id", required=True, help="this node's id in the config")
    node.add_argument("--create-drives", action="store_true",
                      help="create missing drives as emulated zoned drives")
    node.add_argument("--open-metrics", choices=("loopback", "any", "signed"),
                      default="loopback", help="who may read /metrics and /health/ready "
                      "unsigned: loopback (default), any (Prometheus on another host), signed")
    node.add_argument("--index-dir", default=None,
                      help="where the zone-log indexes of block-device drives live")
    node.add_argument("--scrub-rate", type=float, default=None,
                      help="bytes/s the scrubber re-reads to check every record (0 = off; "
                           "default 8 MiB/s)")
    node.add_argument("--scrub-interval", type=float, default=None,
                      help="seconds of rest between scrub passes (default 3600)")
    node.add_argument("--port-file", default=None, help="write the bound port here when listening")
    node.add_argument("--log-level", default="INFO")
    node.add_argument("--log-format", choices=("text", "json"), default="text",
                      help="log lines as text (default) or JSON objects")
    node.set_defaults(func=cmd_node)

    rep = sub.add_parser("repair", help="find and rebuild missing or corrupt fragments")
    rep.add_argument("--config", required=True, help="cluster config (TOML)")
    rep.add_argument("--prefix", default="", help="only parts whose id starts with this")
    rep.add_argument("--deep", action="store_true",
                     help="also read every fragment through to find silent corruption")
    rep.add_argument("--include-unreachable", action="store_true",
                     help="treat nodes that cannot be reached as gone for good: rebuild their "
                          "fragments on other nodes")
    rep.add_argument("--dry-run", action="store_true", help="report, rebuild nothing")
    rep.add_argument("--audit", action="store_true",
                     help="afterwards list every fragment on every node and check that "
                          "something owns it (a live object, a pending write, a queued "
                          "deletion); exit 1 if a fragment nobody owns is found")
    rep.add_argument("--state-dir", default=None,
                     help="use the repair queue files of this directory, not the gateway "
                          "metadata store's queue (default when there is no store here: "
                          "erasure.state_dir)")
    rep.set_defaults(func=cmd_repair)


def cmd_node(args: argparse.Namespace) -> int:
    from zonestore.node.server import DriveError, run_node

    cfg = ClusterConfig.load(args.config)
    spec = cfg.node(args.id)
    if not spec.drives:
        raise ValueError(f"{cfg.source}: node {spec.id} has no drives")
    from zonestore.logsetup import configure
    configure(args.log_level, args.log_format, spec.id)
    for line in cfg.placeholder_warnings(users=False):  # a node only uses `secret`
        logging.getLogger("zonegate.node").warning("%s", line)
    try:
        scrub = {k: v for k, v in (("scrub_rate", args.scrub_rate),
                                   ("scrub_interval", args.scrub_interval)) if v is not None}
        run_node(spec.id, list(spec.drives), spec.host, spec.port, cfg.secret, **scrub,
                 create_drives=args.create_drives, open_metrics=args.open_metrics,
                 index_dir=Path(args.index_dir) if args.index_dir else None,
                 port_file=Path(args.port_file) if args.port_file else None)
    except DriveError as e:
        raise ValueError(str(e)) from None
    return 0


def cmd_repair(args: argparse.Namespace) -> int:
    cfg = ClusterConfig.load(args.config)
    return asyncio.run(_repair(cfg, args))


async def _repair(cfg: ClusterConfig, args: argparse.Namespace) -> int:
    from erasure.audit import audit
    from erasure.cluster import ErasureCluster
    from erasure.repair import repair

    console = Console(stderr=False, highlight=False)
    owners = OWNERS(cfg) if OWNERS else None
    try:
        if owners is not None:
            await owners.start()
        # the gateways' shared queue in their store, unless told to use a state directory
        queues = owners.queues() if owners is not None and args.state_dir is None else {}
        if "layout_store" not in queues:
            # erasure-only use: the layout files beside the queue files, if any
            from erasure.layoutstore import FileLayoutStore
            layout = await FileLayoutStore(args.state_dir or cfg.erasure.state_dir).current()
            if layout is not None:
                queues["layout"] = layout
        async with ErasureCluster(cfg, state_dir=args.state_dir, health_interval=0,
                                  auto_repair=False, **queues) as cluster:
            report = await _run_repair(console, cluster, args, repair, owners)
            leaks = None
            if args.audit:
                if owners is None:
                    console.print("[red]audit[/]: no metadata store here to check owners against")
                    return 1
                a = await audit(cluster, owners.snapshot)
                for part, frags in sorted(a.unowned.items()):
                    where = ", ".join(f"f{i:02d}@{'+'.join(n)}" for i, n in sorted(frags.items()))
                    console.print(f"[red]unowned[/] {part}: {where}")
                console.print("audit: " + a.summary())
                leaks = not a.clean
    finally:
        if owners is not None:
            await owners.close()
    for part, why in report.failed if args.dry_run else []:
        console.print(f"{part}: {why}")
    for part, why in report.unrecoverable:
        console.print(f"[red]unrecoverable[/] {part}: {why}")
    for part, why in report.waiting:
        console.print(f"waiting for unreachable nodes: {part}: {why}")
    for part, why in report.queued:
        console.print(f"{why}: {part}")
    if report.unreachable:
        console.print(f"could not list: {', '.join(report.unreachable)}")
    if report.deferred:
        console.print(f"{len(report.deferred)} fragments on unreachable nodes not rebuilt "
                      "(use --include-unreachable if a node is gone for good)")
    console.print(f"{len(report.fixed)} parts fixed, {len(report.failed)} failed, "
                  f"{len(report.unrecoverable)} unrecoverable, {report.healthy} healthy, "
                  f"{len(report.queued)} queued for deletion, {len(report.waiting)} waiting for "
                  f"nodes, {len(report.purged)} deletions finished, {report.moved} fragments moved home")
    lost = (report.failed and not args.dry_run) or report.unrecoverable
    return 1 if lost or leaks else 0


async def _run_repair(console: Console, cluster: Any, args: argparse.Namespace, repair: Any,
                      owners: Any) -> Any:
    down = sorted(cluster.down_nodes())
    if down:
        console.print(f"nodes unreachable: {', '.join(down)}")
    console.print("scanning nodes" + (" and reading every fragment" if args.deep else ""))
    with make_progress(console=console) as progress:
        task = progress.add_task("repairing", total=None)

        def found(n: int) -> None:
            progress.update(task, total=n)

        def done(part: str, what) -> None:
            if isinstance(what, str):
                progress.console.print(f"[red]failed[/] {part}: {what}")
            else:
                places = ", ".join(f"f{i:02d} -> {n}" for i, n in sorted(what.items()))
                progress.console.print(f"fixed {part}: {places}")
            progress.advance(task)

        if owners is not None:
            await owners.snapshot()
        return await repair(cluster, args.prefix, deep=args.deep, dry_run=args.dry_run,
                            include_unreachable=args.include_unreachable,
                            on_found=found, on_done=done,
                            owner=owners.why_not_rebuilt if owners is not None else None)
