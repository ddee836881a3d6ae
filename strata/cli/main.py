"""Entry point of the `strata` command: dispatches to the sub-commands (serve, generate, chat, bench, profile,
quantize)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="strata", description="Strata: MoE inference engine")
    sub = parser.add_subparsers(dest="command", required=True)
    from strata.cli import bench, chat, generate, profile, quantize, serve

    for module in (serve, generate, chat, bench, profile, quantize):
        module.register(sub)
    args = parser.parse_args(argv)
    try:
        return args.run(args) or 0
    except (ValueError, FileNotFoundError) as e:
        print(f"strata: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
