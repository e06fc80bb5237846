"""tribunal validate PATH: check every line of a transcript file; exit 1 with file:line: field: problem."""
from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a transcripts .jsonl file")


def run(args) -> int:
    from data.jsonl import validate_file

    ok, errors = validate_file(args.path)
    for e in errors[:50]:
        print(e)
    if len(errors) > 50:
        print(f"... and {len(errors) - 50} more problems")
    print(f"{args.path}: {ok} valid transcripts, {len(errors)} problems")
    return 1 if errors or ok == 0 else 0
