"""The `deltaflow` command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deltaflow_operator import __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every `deltaflow` subcommand."""
    parser = argparse.ArgumentParser(
        prog="deltaflow", description="Kafka -> Delta Lake, on Kubernetes."
    )
    parser.add_argument("--version", action="version", version=f"deltaflow {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    crd = commands.add_parser(
        "crd", help="regenerate crds/ and the chart's CRD from the API models"
    )
    crd.add_argument("--repo", type=Path, default=Path.cwd(), help="repository root to write into")
    crd.add_argument("--stdout", action="store_true", help="print the CRD instead of writing files")
    commands.add_parser(
        "operator", help="run the operator (leader election, kopf, metrics, health)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `deltaflow` console script."""
    # Data-plane commands (run, stream, optimize, vacuum, recover-checkpoint) parse their own
    # arguments in deltaflow_runtime.cli, imported only here: the operator never loads Spark.
    given = sys.argv[1:] if argv is None else argv
    if given and given[0] in ("run", "stream", "optimize", "vacuum", "recover-checkpoint"):
        from deltaflow_runtime.cli import main as runtime_main

        return runtime_main(given)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "operator":
        from deltaflow_operator.main import run

        return run()
    if args.command == "crd":
        from deltaflow_operator.api import crd

        if args.stdout:
            sys.stdout.write(crd.render())
        else:
            for path in crd.write(args.repo):
                print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
