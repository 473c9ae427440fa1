"""`sdk-agent [--store SPEC] --session ID TEXT`: one turn, reply on stdout."""

from __future__ import annotations

import argparse

from .agent import run_turn

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run one turn and print the reply."""
    parser = argparse.ArgumentParser(prog="sdk-agent", description=__doc__)
    parser.add_argument("--store", help="a turnkeep store spec (default: configured)")
    parser.add_argument("--session", required=True, help="the conversation's id")
    parser.add_argument("text", help="what the user says")
    args = parser.parse_args(argv)
    print(run_turn(args.store, args.session, args.text), flush=True)
    return 0
