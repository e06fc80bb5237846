"""tribunal library: build a case library (from labels or by cold start), show it, or query it.

    tribunal library build -c configs/library_labels_bundled.yaml [--output FOLDER] [key=value ...]
    tribunal library info FOLDER
    tribunal library search FOLDER "query text" [-k 3] [--exclude-sample-id ID]
"""
from __future__ import annotations

import argparse
import json
import sys

from scripts.common import add_common


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    add_common(sub.add_parser("build", help="seed a library from a labelled dataset (mode labels | cold_start)"))
    info = sub.add_parser("info", help="counts, labels and settings of a library")
    info.add_argument("folder")
    search = sub.add_parser("search", help="the nearest cases to a query (with the leakage guard)")
    search.add_argument("folder")
    search.add_argument("query")
    search.add_argument("-k", type=int, default=3)
    search.add_argument("--exclude-sample-id", default=None)


def run(args) -> int:
    from agents.embedder import EmbedderError
    from agents.library import LibraryError

    try:
        return _run(args)
    except (LibraryError, EmbedderError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    from agents.library import CaseLibrary

    if args.action == "info":
        print(json.dumps(CaseLibrary.load(args.folder).info(), indent=2))
        return 0
    if args.action == "search":
        lib = CaseLibrary.load(args.folder)
        for case, sim in lib.search(args.query, k=args.k, exclude_sample_id=args.exclude_sample_id):
            print(f"{sim:.4f}  {case.id}  [{case.label}]  {case.summary[:120]!r}")
        return 0
    from agents.library import LibraryBuildConfig
    from agents.library_seed import build_cold_start, build_from_labels
    from data.config import load_config

    overrides = list(args.overrides) + ([f"output={args.output}"] if args.output else [])
    cfg = load_config(args.config, LibraryBuildConfig, overrides)
    result = build_from_labels(cfg) if cfg.mode == "labels" else build_cold_start(cfg, path=args.config)
    print(json.dumps(result, indent=2))
    return 0
