"""tribunal mine: the hard-example miner (seed 001) — Architect, Operator, target + committee, rewards.

    tribunal mine -c configs/mine_smollm2.yaml [--output DIR] [--cycles N] [key=value ...]

``--cycles`` is the total: rerunning with a larger number continues from DIR/attempts.jsonl.
"""
from __future__ import annotations

import argparse
import json

from scripts.common import add_common


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common(p)
    p.add_argument("--cycles", type=int, default=None, help="total cycles (continues an earlier run)")


def run(args) -> int:
    from agents.miner import MineConfig, Miner
    from data.config import load_config

    overrides = list(args.overrides)
    if args.output:
        overrides.append(f"output={args.output}")
    if args.cycles is not None:
        overrides.append(f"cycles={args.cycles}")
    cfg = load_config(args.config, MineConfig, overrides)
    stats = Miner(cfg, path=args.config).run()
    print(json.dumps({
        "output": cfg.output, "cycles_run": stats.cycles_run, "new_attempts": stats.attempts,
        "total_attempts": stats.total_attempts, "rewards_this_run": stats.rewards, "splits_this_run": stats.splits,
        "no_outcome_this_run": stats.failed, "hard_pool": stats.hard, "regular_pool": stats.regular,
    }, indent=2))
    return 0
