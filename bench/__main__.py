"""`python -m bench` runs every benchmark; `python -m bench NAME [args...]` runs one
(`bench/NAME_bench.py`, e.g. `python -m bench gateway --scale 0.25`)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)


def available() -> list[str]:
    return sorted(p.name.removesuffix("_bench.py") for p in Path(__file__).parent.glob("*_bench.py"))


def main(argv: list[str]) -> int:
    names = available()
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__ + "\nbenchmarks: " + ", ".join(names))
        return 0
    if argv:
        if argv[0] not in names:
            print(f"unknown benchmark {argv[0]!r}; choose from {', '.join(names)}", file=sys.stderr)
            return 2
        return int(importlib.import_module(f"bench.{argv[0]}_bench").main(argv[1:]) or 0)
    status = 0
    # Each benchmark prints its own figures; the bar (rich redirects their output above it)
    # shows how far the whole run is.
    with Progress(TextColumn("[bold]benchmarks"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), TimeElapsedColumn()) as progress:
        task = progress.add_task("", total=len(names))
        for name in names:
            progress.update(task, description=name)
            print(f"=== {name}", flush=True)
            status |= int(importlib.import_module(f"bench.{name}_bench").main([]) or 0)
            progress.advance(task)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
