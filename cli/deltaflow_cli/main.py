"""The `deltaflow` command line: one parser for every command, above operator and runtime."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deltaflow_operator import __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every `deltaflow` subcommand."""
    # The data plane's commands are listed here too (their arguments are built by the runtime's
    # own parser code; nothing of Spark is imported to build them).
    from deltaflow_runtime.cli import EXIT_CODES_HELP, add_commands

    parser = argparse.ArgumentParser(
        prog="deltaflow",
        description="Kafka -> Delta Lake, on Kubernetes.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"deltaflow {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    crd = commands.add_parser(
        "crd",
        help="regenerate crds/, the chart's CRD and docs/crd-reference.md from the API models",
    )
    crd.add_argument("--repo", type=Path, default=Path.cwd(), help="repository root to write into")
    crd.add_argument("--stdout", action="store_true", help="print the CRD instead of writing files")
    commands.add_parser(
        "operator", help="run the operator (leader election, kopf, metrics, health)"
    )
    add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `deltaflow` console script."""
    given = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(given)
    from deltaflow_runtime.cli import COMMANDS

    if args.command in COMMANDS:
        # The data plane runs its commands itself (Spark is imported there, only when needed).
        from deltaflow_runtime.cli import main as runtime_main

        return runtime_main(given)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "operator":
        from deltaflow_operator.main import serve

        serve()
    if args.command == "crd":
        from deltaflow_api import crd, reference

        if args.stdout:
            sys.stdout.write(crd.render())
        else:
            for path in [*crd.write(args.repo), reference.write(args.repo)]:
                print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
