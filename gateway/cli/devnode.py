"""`python -m gateway.cli.devnode node --config C --id N ...`: `zonegate node` as `zonegate dev`
starts it, twelve at once: the same subcommand and arguments (erasure/cli.py), without
importing every other subcommand the full `zonegate` entry point composes (the gateway's
metadata stores, recovery, ...), which cost each node a third of its start-up CPU time."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from erasure import cli as erasure_cli
from gateway.cli.runner import run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zonegate")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    erasure_cli.register(sub)
    args = parser.parse_args(argv)
    if args.command != "node":
        parser.error("only `node` runs here; use `zonegate`")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
