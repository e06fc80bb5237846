"""tribunal bench: score teacher, students and baselines on the same gold items -> report.md/.json, plots.

parse -> read and join every system's transcripts -> metrics (both invalid conventions, CIs, breakdowns,
cost and speed) -> write the report and the PNG plots into output_dir.
"""

from __future__ import annotations

import argparse
import sys
import time

from scripts.common import add_common


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common(p)


def _summary(rep: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from eval.report import f3, money, num, with_ci

    t = Table(
        "system",
        "n",
        "invalid",
        "F1 (excl) [CI]",
        "F1 (as wrong)",
        "κ teacher",
        "AUROC",
        "tokens/item",
        "$/item",
        title="tribunal bench (report.md has every metric)",
    )
    t.columns[0].no_wrap = True
    for s in rep["systems"].values():
        t.add_row(
            Text(s["name"]),
            str(s["join"]["n_items"]),
            str(s["invalid"]["n_invalid"]),
            with_ci(s["exclude"], "f1"),
            f3(s["wrong"]["f1"]),
            f3((s["teacher"] or {}).get("kappa")),
            f3(s["scores"]["auroc"]),
            num(s["cost_speed"]["tokens_per_item"]),
            money(s["cost_speed"]["cost_usd_per_item"]),
        )
    Console(width=None if sys.stdout.isatty() else 160).print(t)


def run(args) -> int:
    from agents.pipeline import git_sha
    from data.config import load_config
    from eval.bench import BenchConfig, run_bench
    from eval.plots import write_plots
    from eval.report import write_report

    overrides = list(args.overrides)
    if args.output:
        overrides.append(f"output_dir={args.output}")
    cfg = load_config(args.config, BenchConfig, overrides)
    t0 = time.perf_counter()
    rep, preds = run_bench(cfg, git_sha=git_sha())
    if rep["gold"]["dataset"]:
        print(rep["gold"]["dataset"])
    for s in rep["systems"].values():
        j = s["join"]
        print(
            f"{s['name']}: {j['n_finished']} finished, {j['n_failed']} failed, {j['n_missing']} missing, "
            f"{j['n_extra']} extra ids"
        )
    paths = {}
    if cfg.plots:
        paths.update(write_plots(rep, preds, cfg.output_dir))
        rep["plots"] = list(paths)
    paths.update(write_report(rep, preds, cfg.output_dir))
    _summary(rep)
    print(f"wrote {', '.join(str(p) for p in paths.values())} in {time.perf_counter() - t0:.1f} s")
    return 0
