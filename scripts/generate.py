"""tribunal generate: run a protocol with teacher backends over a labelled dataset -> transcripts.jsonl.

parse -> build -> run -> report. Rerunning the same command resumes: finished ids are skipped.
"""
from __future__ import annotations

import argparse
import json

from scripts.common import add_common


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common(p)
    p.add_argument("--limit", type=int, default=None, help="only the first N samples")


def run(args) -> int:
    from agents.pipeline import build_runner
    from data.config import GenerateConfig, load_config
    from data.sources import load_samples

    overrides = list(args.overrides)
    if args.limit is not None:
        overrides.append(f"limit={args.limit}")
    if args.output:
        overrides.append(f"output={args.output}")
    cfg = load_config(args.config, GenerateConfig, overrides)
    samples, report = load_samples(cfg.dataset)
    if cfg.limit:
        samples = samples[: cfg.limit]
    print(report.summary())
    runner = build_runner(cfg, path=args.config)
    try:
        stats = runner.run(samples)
    finally:
        for backend in runner.backends.values():
            backend.close()
    print(json.dumps({
        "output": cfg.output, "total": stats.total, "done": stats.done, "skipped_already_done": stats.skipped,
        "failed": stats.failed, "pending_batch": stats.pending, "exports": stats.exports,
        "wall_s": round(stats.wall_s, 2), "items_per_s": round(stats.items_per_s, 3),
        "tokens_per_s": round(stats.tokens_per_s, 1), "completion_tokens_per_s": round(stats.completion_tokens_per_s, 2),
        "prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.completion_tokens,
        "est_cost_usd": round(stats.cost_usd, 6), "repaired_tail": stats.repaired_tail,
    }, indent=2))
    if stats.pending:
        print(f"{stats.pending} samples wait on batch replies: submit {', '.join(stats.exports)} to the Batch API, "
              "put the output file in the batch folder, and run the same command again.")
    return 1 if stats.failed and not stats.done else 0
