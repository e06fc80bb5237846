"""tribunal curate: the Curator over a scored run — false positives and false negatives become cases.

    tribunal curate -c configs/curate_smollm2.yaml [--output LIBRARY_FOLDER] [transcripts=PATH ...]

Rerunning skips transcripts already curated (the library's curation.jsonl records them).
"""
from __future__ import annotations

import argparse
import json
import sys

from scripts.common import add_common


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common(p)


def run(args) -> int:
    from agents.backends.factory import build_backend
    from agents.curator import CurateConfig, curate_file
    from agents.embedder import EmbedderError
    from agents.library import LibraryError
    from data.config import load_config

    overrides = list(args.overrides) + ([f"library={args.output}"] if args.output else [])
    cfg = load_config(args.config, CurateConfig, overrides)
    try:
        stats = curate_file(cfg, build_backend(cfg.backend))
    except (LibraryError, EmbedderError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({
        "transcripts_file": cfg.transcripts, "library": cfg.library, "select": cfg.select,
        "transcripts": stats.transcripts, "selected": stats.selected, "by_outcome": stats.by_outcome,
        "curated": stats.curated, "already_curated": stats.already_curated, "replayed_from_log": stats.replayed,
        "failed": stats.failed, "parse_errors": stats.parse_errors,
    }, indent=2))
    return 1 if stats.failed and not stats.curated else 0
