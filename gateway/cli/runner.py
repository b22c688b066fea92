"""How every `zonegate` entry point runs a parsed subcommand: its exit code, 130 on Ctrl-C, and
bad input or environment (OSError, ValueError) as one line on stderr, no stack trace."""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError) as e:
        print(f"zonegate: error: {e}", file=sys.stderr)
        return 1
