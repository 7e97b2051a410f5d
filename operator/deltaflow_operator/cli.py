"""The `deltaflow` command line."""

from __future__ import annotations

import argparse
import sys

from deltaflow_operator import __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every `deltaflow` subcommand."""
    parser = argparse.ArgumentParser(
        prog="deltaflow", description="Kafka -> Delta Lake, on Kubernetes."
    )
    parser.add_argument("--version", action="version", version=f"deltaflow {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `deltaflow` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
