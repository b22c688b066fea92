"""`zonegate layout ...`: the cluster's shape, versioned in the metadata store (issue 25).

Changes are staged, checked at once (a change that would lose redundancy is refused with one
line), shown with `diff` and applied together as one new version (`apply`, a compare-and-set:
of two operators applying at once one wins, the other is told to look again); every gateway
adopts the new version within `[gateway] layout_poll_seconds` (default 3) and tells the nodes
their drives' states. `revert` publishes a previous version again as a new one.

    zonegate layout show|diff|apply|revert|history --config C
    zonegate layout node add ID URL [--domain D] [--weight W] [--drive PATH ...]
    zonegate layout node drain|remove|activate ID;  node weight ID W;  node domain ID D
    zonegate layout drive add|drain|replace|fail|activate NODE PATH
    zonegate layout erasure K M

`--files` uses the JSON files under `[erasure] state_dir` instead of the metadata store
(erasure-only use, no gateway).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from erasure.clusterlayout import (
    Change,
    ClusterLayout,
    LayoutError,
    apply_changes,
    check_transition,
    diff,
)
from erasure.config import ClusterConfig
from erasure.layoutstore import FileLayoutStore, LayoutStore, load_or_bootstrap

EXIT_REFUSED = 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("layout", help="the cluster's shape: show, stage and apply changes "
                                      "(nodes, drives, erasure code)")
    lsub = p.add_subparsers(dest="layout_command", required=True, metavar="ACTION")

    def cmd(parent: Any, name: str, helptext: str, func: Callable[..., Any]) -> Any:
        a = parent.add_parser(name, help=helptext)
        a.add_argument("--config", required=True, help="cluster config (TOML)")
        a.add_argument("--files", action="store_true",
                       help="use the layout files under [erasure] state_dir, not the "
                            "metadata store")
        a.set_defaults(func=func)
        return a

    s = cmd(lsub, "show", "the current layout (or --version N) and the staged changes",
            cmd_show)
    s.add_argument("--version", type=int, default=None)
    s.add_argument("--json", action="store_true", help="one JSON document")
    cmd(lsub, "diff", "what applying the staged changes would change", cmd_diff)
    a = cmd(lsub, "apply", "apply the staged changes as a new version", cmd_apply)
    a.add_argument("--note", default="", help="why (kept with the version)")
    r = cmd(lsub, "revert", "publish an earlier version again as a new one", cmd_revert)
    r.add_argument("--to", type=int, default=None, help="version (default: the previous)")
    h = cmd(lsub, "history", "the latest versions, newest first", cmd_history)
    h.add_argument("--limit", type=int, default=20)
    cmd(lsub, "unstage", "drop every staged change", cmd_unstage)

    node = lsub.add_parser("node", help="stage a node change").add_subparsers(
        dest="node_command", required=True, metavar="CHANGE")
    na = cmd(node, "add", "a new node (active: it takes new fragments)", cmd_stage)
    na.add_argument("id")
    na.add_argument("url")
    na.add_argument("--domain", default=None, help="failure domain (default: the id)")
    na.add_argument("--weight", type=float, default=1.0)
    na.add_argument("--drive", action="append", default=[], help="a drive path (repeat)")
    na.set_defaults(op="node add")
    for name, helptext in (("drain", "no new fragments; the mover empties it"),
                           ("remove", "gone: never asked again, its data rebuilt elsewhere"),
                           ("activate", "take new fragments again")):
        x = cmd(node, name, helptext, cmd_stage)
        x.add_argument("id")
        x.set_defaults(op=f"node {name}")
        if name == "remove":  # refused while the node answers and still holds records
            x.add_argument("--force", action="store_true",
                           help="remove it although it answers and holds records (they are "
                           "then rebuilt from parity elsewhere, never copied)")
    w = cmd(node, "weight", "share of new fragments (1 = even; 0 = none)", cmd_stage)
    w.add_argument("id")
    w.add_argument("weight", type=float)
    w.set_defaults(op="node weight")
    d = cmd(node, "domain", "move a node to another failure domain", cmd_stage)
    d.add_argument("id")
    d.add_argument("domain")
    d.set_defaults(op="node domain")

    drive = lsub.add_parser("drive", help="stage a drive change").add_subparsers(
        dest="drive_command", required=True, metavar="CHANGE")
    for name, helptext in (("add", "a new drive on a node"),
                           ("drain", "no new records on it; the mover empties it"),
                           ("replace", "a new empty drive at the slot: rebuild what it held"),
                           ("fail", "dead: its records are lost"),
                           ("activate", "active again (a drained or rebuilt drive)")):
        x = cmd(drive, name, helptext, cmd_stage)
        x.add_argument("node")
        x.add_argument("path")
        x.set_defaults(op=f"drive {name}")
    e = cmd(lsub, "erasure", "the erasure code of new writes (old parts keep theirs)",
            cmd_stage)
    e.add_argument("k", type=int)
    e.add_argument("m", type=int)
    e.set_defaults(op="erasure")


def _change(args: argparse.Namespace) -> Change:
    op = args.op
    if op == "node add":
        a: dict[str, Any] = {"id": args.id, "url": args.url.rstrip("/"), "weight": args.weight,
                             "drives": list(args.drive)}
        if args.domain:
            a["domain"] = args.domain
        return Change(op, a)
    if op == "node weight":
        return Change(op, {"id": args.id, "weight": args.weight})
    if op == "node domain":
        return Change(op, {"id": args.id, "domain": args.domain})
    if op.startswith("node "):
        return Change(op, {"id": args.id})
    if op.startswith("drive "):
        return Change(op, {"node": args.node, "path": args.path})
    return Change(op, {"k": args.k, "m": args.m})


def _run(args: argparse.Namespace, fn: Callable[[LayoutStore, ClusterLayout],
                                                 Awaitable[int]]) -> int:
    config = ClusterConfig.load(args.config)

    async def main() -> int:
        if args.files:
            return await fn_with(FileLayoutStore(config.erasure.state_dir))
        from gateway.metadata import store_from_config
        from gateway.store.layoutstore import StoreLayouts
        meta = store_from_config(dict(config.gateway or {}))
        await meta.start()
        try:
            return await fn_with(StoreLayouts(meta))
        finally:
            await meta.close()

    async def fn_with(store: LayoutStore) -> int:
        return await fn(store, await load_or_bootstrap(store, config))

    try:
        return asyncio.run(main())
    except LayoutError as e:
        print(f"zonegate layout: refused: {e}", file=sys.stderr)
        return EXIT_REFUSED


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def render(layout: ClusterLayout, staged: list[Change]) -> str:
    s = layout.scheme
    out = [f"layout v{layout.version} ({_when(layout.applied_at)}): {layout.note}",
           f"erasure {s.k}+{s.m} for new writes; {len(layout.writable())} of "
           f"{len(layout.nodes)} nodes take writes, "
           f"{len({n.domain for n in layout.writable()})} failure domains", ""]
    w = max([4, *(len(n.id) for n in layout.nodes)])
    out.append(f"{'node':<{w}}  {'state':<8}  {'weight':>6}  {'domain':<10}  url")
    for n in layout.nodes:
        out.append(f"{n.id:<{w}}  {n.state:<8}  {n.weight:>6g}  {n.domain:<10}  {n.url}")
        for d in n.drives:
            gen = f" (generation {d.generation})" if d.generation != 1 else ""
            out.append(f"{'':<{w}}    drive {d.path}: {d.state}{gen}")
    if staged:
        out += ["", f"staged ({len(staged)}; `zonegate layout diff`, then `apply`):"]
        out += [f"  {c.describe()}" for c in staged]
    return "\n".join(out)


def cmd_show(args: argparse.Namespace) -> int:
    async def fn(store: LayoutStore, cur: ClusterLayout) -> int:
        layout = cur if args.version is None else await store.get(args.version)
        if layout is None:
            print(f"zonegate layout: no version {args.version}", file=sys.stderr)
            return 1
        staged = await store.staged()
        if args.json:
            print(json.dumps({"layout": layout.to_dict(),
                              "staged": [c.to_dict() for c in staged]}, indent=2))
        else:
            print(render(layout, staged))
            try:
                layout.validate()
            except LayoutError as e:
                print(f"warning: {e}")
        return 0
    return _run(args, fn)


def cmd_stage(args: argparse.Namespace) -> int:
    change = _change(args)

    async def fn(store: LayoutStore, cur: ClusterLayout) -> int:
        apply_changes(cur, [*await store.staged(), change])  # refused here, not at apply
        if change.op == "node remove" and not getattr(args, "force", False):
            await _refuse_removing_data(cur, str(change.args["id"]), args.config)
        await store.stage(change)
        print(f"staged: {change.describe()} (`zonegate layout diff`, then `apply`)")
        return 0
    return _run(args, fn)


async def _refuse_removing_data(cur: ClusterLayout, node_id: str, config_path: str) -> None:
    """A node that answers and still holds records is not removed (its fragments would be
    rebuilt from parity instead of copied, or be the only copies): drain it first. A node
    that does not answer is gone: removing it is what rebuilds its fragments."""
    from erasure.movesweep import records_on
    node = cur.node(node_id)
    if node is None or node.state == "gone":
        return
    held = await records_on(node.id, node.url, ClusterConfig.load(config_path).secret)
    if held:
        raise LayoutError(f"node {node_id} answers and still holds {held}"
                          f"{'+' if held >= 1000 else ''} records: drain it first "
                          f"(`zonegate layout node drain {node_id}`, then wait for the mover), "
                          "or --force if it must go now")


def cmd_diff(args: argparse.Namespace) -> int:
    async def fn(store: LayoutStore, cur: ClusterLayout) -> int:
        staged = await store.staged()
        if not staged:
            print(f"nothing staged (layout v{cur.version})")
            return 0
        new = apply_changes(cur, staged)
        print(f"v{cur.version} -> v{new.version}:")
        for line in diff(cur, new):
            print(f"  {line}")
        return 0
    return _run(args, fn)


def cmd_apply(args: argparse.Namespace) -> int:
    async def fn(store: LayoutStore, cur: ClusterLayout) -> int:
        staged = await store.staged()
        if not staged:
            print(f"nothing staged (layout v{cur.version})")
            return 0
        new = apply_changes(cur, staged, note=args.note)
        if not await store.publish(new, cur.version):
            now = await store.current()
            print(f"zonegate layout: refused: another apply came first (now "
                  f"v{now.version if now else '?'}); check `zonegate layout diff` and apply "
                  f"again", file=sys.stderr)
            return EXIT_REFUSED
        await store.clear_staged()
        print(f"applied layout v{new.version}:")
        for line in diff(cur, new):
            print(f"  {line}")
        print("gateways adopt it within a few seconds")
        return 0
    return _run(args, fn)


def cmd_revert(args: argparse.Namespace) -> int:
    async def fn(store: LayoutStore, cur: ClusterLayout) -> int:
        to = cur.version - 1 if args.to is None else args.to
        old = await store.get(to) if to >= 1 else None
        if old is None:
            print(f"zonegate layout: no version {to} to revert to", file=sys.stderr)
            return 1
        new = ClusterLayout(cur.version + 1, old.scheme, old.nodes,
                            f"revert to v{to}", time.time())
        new.validate()
        check_transition(cur, new)
        if not await store.publish(new, cur.version):
            print("zonegate layout: refused: another apply came first; look again",
                  file=sys.stderr)
            return EXIT_REFUSED
        print(f"layout v{new.version} = v{to}:")
        for line in diff(cur, new):
            print(f"  {line}")
        return 0
    return _run(args, fn)


def cmd_history(args: argparse.Namespace) -> int:
    async def fn(store: LayoutStore, cur: ClusterLayout) -> int:
        for lay in await store.history(args.limit):
            s = lay.scheme
            print(f"v{lay.version}  {_when(lay.applied_at)}  {s.k}+{s.m}  "
                  f"{len(lay.writable())}/{len(lay.nodes)} nodes writable  {lay.note}")
        return 0
    return _run(args, fn)


def cmd_unstage(args: argparse.Namespace) -> int:
    async def fn(store: LayoutStore, cur: ClusterLayout) -> int:
        print(f"dropped {await store.clear_staged()} staged change(s)")
        return 0
    return _run(args, fn)
