"""The ``tribunal`` command. Every verb takes ``-c CONFIG``, ``--output`` and ``dotted.key=value`` overrides."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

VERBS = {
    "generate": ("scripts.generate", "run a debate protocol over a dataset and write transcripts"),
    "validate": ("scripts.validate", "check a transcript file: file:line: field: problem"),
    "library": ("scripts.library", "case library: build (labels | cold_start), info, search"),
    "curate": ("scripts.curate", "the Curator: FP/FN of a scored run -> key cues + summary cases in the library"),
    "mine": ("scripts.mine", "hard-example miner: architect, operator, target + committee, rewards, pools"),
    "bench": ("scripts.bench", "score teacher, students and baselines on the same items -> report.md/json + plots"),
    "show": ("scripts.show", "audit view of one debate: tribunal show FILE --id ID [--html OUT.html]"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="tribunal", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)
    for verb, (mod, help_) in VERBS.items():
        p = sub.add_parser(verb, help=help_)
        importlib.import_module(mod).add_arguments(p)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from data.config import ConfigError
    from data.jsonl import RecordError

    try:
        return int(importlib.import_module(VERBS[args.verb][0]).run(args) or 0)
    except (ConfigError, RecordError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
