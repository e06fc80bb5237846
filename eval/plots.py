"""The bench's PNG plots: precision-recall curves, a reliability diagram, and cost (or tokens) versus F1.

Figures are built with matplotlib's object API on the Agg canvas (no pyplot, no display, no global
state), rendered to memory and written atomically.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from sklearn.metrics import precision_recall_curve

from eval.predictions import Prediction
from eval.report import write_atomic

PLOTS = ("pr_curves.png", "reliability.png", "cost_vs_f1.png")


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def _legend(ax, **kw) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    return write_atomic(path, buf.getvalue())


def _colors(names: list[str]) -> dict[str, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {n: cmap(i % 10) for i, n in enumerate(names)}


def pr_curves(rep: dict, predictions: dict[str, list[Prediction]], path: Path) -> Path:
    fig = Figure(figsize=(6.5, 5))
    ax = fig.add_subplot()
    colors = _colors(list(rep["systems"]))
    base = rep["gold"]["n_unsafe"] / rep["gold"]["n_items"] if rep["gold"]["n_items"] else float("nan")
    for name, s in rep["systems"].items():
        rows = [p for p in predictions[name] if p.score is not None]
        y = np.array([p.gold == "unsafe" for p in rows], dtype=int)
        curve = len(rows) and 0 < y.sum() < len(y)
        if curve:
            prec, rec, _ = precision_recall_curve(y, [p.score for p in rows])
            ap = s["scores"]["auprc"]
            ax.step(
                rec, prec, where="post", color=colors[name], label=f"{name} (AP {ap:.3f}, {len(rows)} scored)"
            )
        ex = s["exclude"]
        point = _finite(ex["recall"]) and _finite(ex["precision"])
        if point:  # the system's own decision (invalid excluded)
            ax.plot(
                [ex["recall"]],
                [ex["precision"]],
                "o",
                color=colors[name],
                markeredgecolor="black",
                label=None if curve else f"{name} (no usable scores)",
            )
        if not (curve or point):  # still named in the legend, with the reason it is not drawn
            why = f"{len(rows)} scored, one class" if rows else "no scores"
            ax.plot([], [], " ", label=f"{name}: no curve ({why}); precision undefined")
    if _finite(base):
        ax.axhline(base, color="grey", linestyle=":", linewidth=1, label=f"unsafe rate {base:.2f}")
    ax.set(
        xlabel="recall (unsafe)",
        ylabel="precision (unsafe)",
        xlim=(-0.02, 1.02),
        ylim=(-0.02, 1.05),
        title="Precision-recall from verdict scores (dots: each system's labels, invalid excluded)",
    )
    ax.title.set_fontsize(9)
    _legend(ax, fontsize=7, loc="lower left")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def reliability(rep: dict, path: Path) -> Path:
    k = rep["config"]["ece_bins"]
    fig = Figure(figsize=(6.5, 7))
    ax, hx = fig.subplots(2, 1, gridspec_kw={"height_ratios": [3, 1]}, sharex=True)
    colors = _colors(list(rep["systems"]))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect calibration")
    names = list(rep["systems"])
    width = 1 / k / max(len(names), 1)
    for i, (name, s) in enumerate(rep["systems"].items()):
        bins = [b for b in s["scores"]["reliability"] if b["count"]]
        if not bins:
            continue
        ece = s["scores"]["ece"]
        ax.plot(
            [b["mean_prob"] for b in bins],
            [b["frac_pos"] for b in bins],
            "o-",
            color=colors[name],
            label=f"{name} (ECE {ece:.3f})" if _finite(ece) else name,
        )
        hx.bar(
            [b["lower"] + (i + 0.5) * width for b in s["scores"]["reliability"]],
            [b["count"] for b in s["scores"]["reliability"]],
            width=width,
            color=colors[name],
        )
    ax.set(
        ylabel="fraction unsafe (gold)",
        xlim=(0, 1),
        ylim=(-0.02, 1.02),
        title=f"Reliability of verdict scores ({k} equal-width bins)",
    )
    _legend(ax, fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    hx.set(xlabel="mean score in bin", ylabel="items")
    hx.set_xticks(np.linspace(0, 1, k + 1))
    hx.tick_params(axis="x", labelsize=7)
    return _save(fig, path)


def cost_vs_f1(rep: dict, path: Path) -> Path:
    """x = $ per item when any system has a cost, else tokens per item; y = F1 with CI (excl) and as wrong."""
    systems = list(rep["systems"].values())
    costs = [s["cost_speed"]["cost_usd_per_item"] for s in systems]
    use_cost = any(_finite(c) and c > 0 for c in costs)
    key, xlabel = (
        ("cost_usd_per_item", "estimated cost per item (USD)")
        if use_cost
        else ("tokens_per_item", "tokens per item (no system has a recorded cost)")
    )
    fig = Figure(figsize=(6.5, 5))
    ax = fig.add_subplot()
    colors = _colors([s["name"] for s in systems])
    xs = []
    for s in systems:
        x = s["cost_speed"][key]
        ex, wr = s["exclude"], s["wrong"]
        if not _finite(x):
            continue
        xs.append(x)
        if _finite(ex["f1"]):
            lo, hi = ex["ci"]["f1"]
            yerr = [[ex["f1"] - lo], [hi - ex["f1"]]] if _finite(lo) and _finite(hi) else None
            ax.errorbar(
                [x],
                [ex["f1"]],
                yerr=yerr,
                fmt="o",
                color=colors[s["name"]],
                capsize=3,
                label=f"{s['name']} ({s['role']})",
            )
        if _finite(wr["f1"]):
            ax.plot([x], [wr["f1"]], "o", markerfacecolor="none", color=colors[s["name"]])
        ax.annotate(
            s["name"],
            (x, ex["f1"] if _finite(ex["f1"]) else wr["f1"] if _finite(wr["f1"]) else 0),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize=7,
        )
    ax.margins(x=0.2)  # room for the labels
    positive = [x for x in xs if x > 0]
    if positive and max(positive) / min(positive) > 30:
        ax.set_xscale("symlog", linthresh=min(positive))
    ax.set(
        xlabel=xlabel,
        ylabel="F1 (unsafe)",
        ylim=(-0.02, 1.05),
        title="F1 vs cost: filled = invalid excluded (with CI), hollow = invalid counted as wrong",
    )
    ax.title.set_fontsize(9)
    _legend(ax, fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def write_plots(
    rep: dict, predictions: dict[str, list[Prediction]], output_dir: str | Path
) -> dict[str, Path]:
    out = Path(output_dir)
    return {
        "pr_curves.png": pr_curves(rep, predictions, out / "pr_curves.png"),
        "reliability.png": reliability(rep, out / "reliability.png"),
        "cost_vs_f1.png": cost_vs_f1(rep, out / "cost_vs_f1.png"),
    }
