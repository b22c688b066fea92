"""The one command-line entry point, `zonegate`, composed from each layer's subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from erasure import cli as erasure_cli
from gateway.cli import dev as gateway_dev
from gateway.cli import layout as gateway_layout
from gateway.cli import rebalance as gateway_rebalance
from gateway.cli import status as gateway_status
from gateway.cli import users as gateway_users
from gateway.metadata import cli as gateway_metadata
from gateway.server import serve as gateway_serve
from gateway.store import bucketmarkers as gateway_bucketmarkers
from gateway.store import partowners as gateway_audit
from gateway.store import recover as gateway_recover
from zonestore import cli as zonestore_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zonegate",
        description="S3-compatible object store for AI training data on zoned drives",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    zonestore_cli.register(sub)
    erasure_cli.register(sub, owners=gateway_audit.owners_for)
    gateway_dev.register(sub)
    gateway_serve.register(sub)
    gateway_recover.register(sub)
    gateway_bucketmarkers.register(sub)
    gateway_status.register(sub)
    gateway_rebalance.register(sub)
    gateway_metadata.register(sub)
    gateway_users.register(sub)
    gateway_layout.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError) as e:
        # Bad input or environment: one line, no stack trace.
        print(f"zonegate: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
