"""The one command-line entry point, `zonegate`, composed from each layer's subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from erasure import cli as erasure_cli
from gateway.cli import dev as gateway_dev
from gateway.cli import layout as gateway_layout
from gateway.cli import rebalance as gateway_rebalance
from gateway.cli import status as gateway_status
from gateway.cli import users as gateway_users
from gateway.cli.runner import run
from gateway.metadata import cli as gateway_metadata
from gateway.server import serve as gateway_serve
from gateway.store import bucketmarkers as gateway_bucketmarkers
from gateway.store import partowners as gateway_audit
from gateway.store import recover as gateway_recover
from zonestore import cli as zonestore_cli

# Where `zonegate dev` (`make run`) writes its cluster file: the subcommands that take --config
# look there, relative to the working directory, when it is left out.
DEFAULT_CONFIG = Path("data") / "zonegate.toml"
_FIND_CONFIG = object()  # --config left out: DEFAULT_CONFIG, if it is there


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in action.choices.values():
                yield sp
                yield from _subparsers(sp)


def _default_config(parser: argparse.ArgumentParser) -> None:
    """Make every subcommand's required --config optional, defaulting to DEFAULT_CONFIG.
    Done here, where the layers' parsers are composed, so that no layer needs to know where
    the dev cluster keeps its file."""
    for sp in _subparsers(parser):
        for action in sp._actions:
            if action.dest == "config" and action.required:
                action.required = False
                action.default = _FIND_CONFIG
                action.help = f"{action.help or 'cluster config'} (default ./{DEFAULT_CONFIG})"


def resolve_config(args: argparse.Namespace) -> None:
    """A left-out --config becomes ./data/zonegate.toml, or a one-line error saying where it
    was looked for."""
    if getattr(args, "config", None) is not _FIND_CONFIG:
        return
    if not DEFAULT_CONFIG.is_file():
        raise FileNotFoundError(f"no --config given and no ./{DEFAULT_CONFIG} in {Path.cwd()} "
                                "(`make run` / `zonegate dev` writes it there)")
    args.config = str(DEFAULT_CONFIG)


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
    _default_config(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        resolve_config(args)
    except (OSError, ValueError) as e:
        print(f"zonegate: error: {e}", file=sys.stderr)
        return 1
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
