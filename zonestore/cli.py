"""`zonegate drive ...` subcommands: create, inspect and check zoned drives."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from zonestore.device import count_conditions
from zonestore.emulated import Geometry, create_emulated_drive
from zonestore.opener import open_device

MiB = 1024 * 1024


def _size(text: str) -> int:
    """Parse 256M / 4K / 1G / plain bytes."""
    units = {"K": 1024, "M": MiB, "G": 1024 * MiB, "T": 1024 * 1024 * MiB}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 4096, 4K, 256M)") from None


def register(sub: argparse._SubParsersAction) -> None:
    drive = sub.add_parser("drive", help="create and inspect zoned drives")
    dsub = drive.add_subparsers(dest="drive_cmd", required=True, metavar="COMMAND")

    d = Geometry()
    create = dsub.add_parser("create", help="create an emulated zoned drive (sparse)")
    create.add_argument("path")
    create.add_argument("--zones", type=int, default=d.nr_zones, help="number of zones")
    create.add_argument("--zone-size", type=_size, default=d.zone_size)
    create.add_argument("--zone-capacity", type=_size, default=None,
                        help="writable bytes per zone (default: the zone size)")
    create.add_argument("--conventional", type=int, default=d.nr_conventional,
                        help="number of conventional (random-write) zones at the start")
    create.add_argument("--block-size", type=_size, default=d.block_size)
    create.add_argument("--max-open", type=int, default=d.max_open_zones, help="0 = unlimited")
    create.add_argument("--max-active", type=int, default=d.max_active_zones, help="0 = unlimited")
    create.set_defaults(func=cmd_create)

    info = dsub.add_parser("info", help="show a drive's geometry and zones")
    info.add_argument("path")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=cmd_info)

    fsck = dsub.add_parser(
        "fsck", help="rebuild a drive's index from its zones and compare it with the live one")
    fsck.add_argument("path")
    fsck.add_argument("--index", default=None,
                      help="index file (default: PATH/index.sqlite for emulated drives)")
    fsck.add_argument("--rebuild", action="store_true",
                      help="replace the live index by the rebuilt one (drive must not be in use)")
    fsck.add_argument("--quiet", action="store_true", help="no progress bar")
    fsck.set_defaults(func=cmd_fsck)


def cmd_create(args: argparse.Namespace) -> int:
    g = Geometry(
        nr_zones=args.zones,
        zone_size=args.zone_size,
        zone_capacity=args.zone_capacity or args.zone_size,
        nr_conventional=args.conventional,
        block_size=args.block_size,
        max_open_zones=args.max_open,
        max_active_zones=args.max_active,
    )
    create_emulated_drive(args.path, g)
    print(f"created emulated zoned drive {args.path}: {g.nr_zones} zones of "
          f"{g.zone_size // MiB} MiB ({g.nr_conventional} conventional), "
          f"{g.block_size}-byte blocks, max open {g.max_open_zones}, max active {g.max_active_zones}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    with open_device(args.path) as dev:
        zones = dev.report_zones()
        info = dev.info
    conds = {k: v for k, v in count_conditions(zones).items() if v}
    if args.json:
        json.dump({"info": asdict(info), "conditions": conds}, sys.stdout)
        print()
        return 0
    print(f"{info.path} ({info.backend}): {info.nr_zones} zones of {info.zone_size // MiB} MiB, "
          f"block {info.physical_block_size}, max open {info.max_open_zones}, "
          f"max active {info.max_active_zones}")
    print("zones by condition: " + ", ".join(f"{k} {v}" for k, v in sorted(conds.items())))
    return 0


def cmd_fsck(args: argparse.Namespace) -> int:
    from pathlib import Path

    from zonestore.fsck import fsck
    from zonestore.progress import progress

    index = args.index
    if index is None:
        if not Path(args.path).is_dir():
            print(f"{args.path}: a block device needs --index PATH", file=sys.stderr)
            return 2
        index = Path(args.path) / "index.sqlite"
    with open_device(args.path) as dev:
        if args.quiet:
            diffs, stats = fsck(dev, index, rebuild=args.rebuild)
        else:
            with progress(unit="bytes", transient=True) as bar:
                task = bar.add_task("scanning zones", total=None)
                diffs, stats = fsck(dev, index, rebuild=args.rebuild,
                                    progress=lambda done, total: bar.update(
                                        task, completed=done, total=total))
    print(f"scanned {stats.zones_scanned} zones, {stats.bytes_scanned / MiB:.1f} MiB: "
          f"{stats.records} records, {stats.applied} indexed, {stats.incomplete} incomplete "
          f"puts (garbage), {stats.damaged} damaged regions")
    for d in diffs:
        print(f"  {d}")
    if not diffs:
        print("index matches the zones")
        return 0
    if args.rebuild:
        print(f"{len(diffs)} differences; index replaced by the rebuilt one")
        return 0
    print(f"{len(diffs)} differences; run with --rebuild to replace the index")
    return 1
