"""`python -m zonestore.node --id ID --drive PATH [--drive PATH] --listen HOST:PORT
--secret-file FILE`: run one storage node (see zonestore/node/server.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zonestore.emulated import Geometry
from zonestore.logsetup import configure
from zonestore.node.scrub import DEFAULT_INTERVAL as SCRUB_INTERVAL
from zonestore.node.scrub import DEFAULT_RATE as SCRUB_RATE
from zonestore.node.server import DriveError, run_node
from zonestore.node.state import DEFAULT_MAX_RECORD_SIZE

MiB = 1 << 20


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"--listen wants HOST:PORT, not {text!r}")
    return (host.strip("[]") or "127.0.0.1"), int(port)


def read_secret(path: str) -> bytes:
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise SystemExit(f"zonestore.node: cannot read secret file {path}: {exc.strerror}") from None
    if not secret:
        raise SystemExit(f"zonestore.node: secret file {path} is empty")
    return secret


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m zonestore.node", description=__doc__)
    p.add_argument("--id", required=True, help="node id (as in the cluster config)")
    p.add_argument("--drive", action="append", required=True, metavar="PATH",
                   help="a zoned drive of this node (repeat for each drive)")
    p.add_argument("--listen", type=parse_listen, default=("127.0.0.1", 9101),
                   metavar="HOST:PORT", help="address to serve on (port 0 = any free port)")
    p.add_argument("--secret-file", required=True, help="file holding the cluster HMAC secret")
    p.add_argument("--create-drives", action="store_true",
                   help="create missing drives as emulated drives (default geometry, or the "
                        "--zones/--zone-size below)")
    p.add_argument("--zones", type=int, default=None, help="zones of created drives")
    p.add_argument("--zone-size-mib", type=int, default=None, help="zone size of created drives")
    p.add_argument("--index-dir", default=None, help="index directory for block-device drives")
    p.add_argument("--max-record-size", type=int, default=DEFAULT_MAX_RECORD_SIZE,
                   help="largest record payload accepted, bytes (default 6 GiB)")
    p.add_argument("--reclaim-interval", type=float, default=5.0,
                   help="seconds between background reclaim passes per drive (0 = off)")
    p.add_argument("--scrub-rate", type=float, default=SCRUB_RATE,
                   help="bytes/s the scrubber re-reads to check every record (0 = off)")
    p.add_argument("--scrub-interval", type=float, default=SCRUB_INTERVAL,
                   help="seconds of rest between scrub passes")
    p.add_argument("--open-metrics", choices=("loopback", "any", "signed"), default="loopback",
                   help="who may read /metrics and /health/ready without a signature")
    p.add_argument("--port-file", default=None, help="write the bound port here once listening")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="log lines as text (default) or JSON objects")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure(args.log_level, args.log_format, args.id)
    geometry = None
    if args.zones is not None or args.zone_size_mib is not None:
        d = Geometry()
        size = (args.zone_size_mib * MiB) if args.zone_size_mib else d.zone_size
        geometry = Geometry(nr_zones=args.zones or d.nr_zones, zone_size=size,
                            zone_capacity=size)
    host, port = args.listen
    try:
        run_node(args.id, args.drive, host, port, read_secret(args.secret_file),
                 create_drives=args.create_drives, geometry=geometry,
                 index_dir=Path(args.index_dir) if args.index_dir else None,
                 max_record_size=args.max_record_size,
                 reclaim_interval=args.reclaim_interval, open_metrics=args.open_metrics,
                 scrub_rate=args.scrub_rate, scrub_interval=args.scrub_interval,
                 port_file=Path(args.port_file) if args.port_file else None)
    except DriveError as exc:
        print(f"zonestore.node: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
