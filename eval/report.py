"""Write a bench result as report.md (tables a person reads) and report.json (everything, machine-readable).

Both files are written whole or not at all (a temporary file in the same folder, then ``os.replace``).
NaN (an undefined metric) is ``null`` in JSON and an em dash in Markdown.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from agents.backends.atomic import write_atomic
from eval.predictions import Prediction

DASH = "—"


# ------------------------------------------------------------------ files


def jsonable(x):
    """NaN / inf -> None, tuples -> lists, recursively (strict JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


# ------------------------------------------------------------------ conventions
def conventions(cfg: dict) -> dict[str, str]:
    level = f"{cfg['ci_level']:.0%}"
    return {
        "positive_class": (
            '"unsafe" is the positive class for precision, recall, F1, FNR, FPR, AUROC and AUPRC.'
        ),
        "items": (
            "Every system is scored on the same gold items: the dataset's labelled items (or, without a "
            "dataset, every labelled sample id found in any system's transcripts). Items without a gold "
            "label are dropped and counted."
        ),
        "invalid": (
            "A prediction is invalid when the verdict has no label (a failed parse with no fallback), "
            "when a review verdict is configured as invalid, when the item failed (it is in the run's "
            "<stem>.errors.jsonl), or when the system has no transcript for the item (missing). A verdict "
            "reached through a protocol fallback (e.g. Aetheria's mean-score rule) has a label and is "
            "valid; it is counted as a fallback verdict."
        ),
        "excluded": "'excl' (as Aetheria does): invalid predictions are dropped; n is the items left.",
        "as_wrong": (
            "'as wrong': every gold item is scored and an invalid prediction counts as the label opposite "
            "to gold (an FN for unsafe gold, an FP for safe gold)."
        ),
        "review": "An AAM 'review' verdict is scored as each system's review_as (unsafe | safe | invalid).",
        "teacher": (
            "Agreement and Cohen's kappa against the teacher use the items where both predictions are valid."
        ),
        "scores": (
            "AUROC, AUPRC (average precision), Brier and ECE use every item whose verdict has a score "
            "(P(unsafe)-like, in [0, 1]), whether or not its label is valid; AUROC/AUPRC need both classes."
        ),
        "ece": (
            f"ECE uses {cfg['ece_bins']} equal-width bins on [0, 1] (bin i = [i/k, (i+1)/k), the last "
            "bin includes 1.0), weighted by bin counts: sum (n_bin / N) |mean score - fraction unsafe|."
        ),
        "ci": (
            f"{level} percentile bootstrap CIs: items resampled with replacement, numpy "
            f"default_rng(seed={cfg['seed']}), {cfg['n_boot']} resamples for the headline and "
            f"{cfg['breakdown_n_boot']} for the breakdowns; resamples where the metric is undefined are "
            "skipped. The AUROC CI resamples all items and drops the unscored ones within each resample."
        ),
        "cost": (
            "Cost per item is the mean over finished items of the sum of turn costs (the cost recorded on "
            "each turn from the run's pricing table, or this config's `pricing` for the models it lists, "
            f"with batch-backend turns at x{cfg['batch_price_factor']}). Tokens per item likewise; per role "
            "= the mean over items of that role's tokens. cost x teacher = this system's cost per item / "
            "the teacher's."
        ),
        "latency": (
            "Latency per item is the sum of its turn latencies (for batched local backends a turn's "
            "latency is its share of the batch time); p50 / p95 over finished items."
        ),
        "throughput": (
            "Items per second = (finished + failed items) / busy time, busy time being the union of the "
            "items' [created_at, created_at + wall_s] intervals (created_at has one-second resolution)."
        ),
    }


# ------------------------------------------------------------------ markdown
def f3(x) -> str:
    return DASH if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.3f}"


def ci(pair) -> str:
    lo, hi = pair if pair else (None, None)
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return ""
    return f" [{lo:.2f}, {hi:.2f}]"


def with_ci(block: dict, key: str) -> str:
    return f3(block.get(key)) + ci(block.get("ci", {}).get(key))


def num(x, fmt: str = "{:.1f}") -> str:
    return DASH if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def money(x) -> str:
    return DASH if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"${x:.3g}"


def cell(text) -> str:
    """Data (system names, categories) inside a table cell: no pipes, no newlines."""
    return str(text).replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _vs_teacher(rep: dict, s: dict, key: str) -> str:
    return "(self)" if s["name"] == rep["teacher"] else f3((s["teacher"] or {}).get(key))


def _headline(rep: dict) -> str:
    rows = []
    for s in rep["systems"].values():
        ex, wr, sc, cs = s["exclude"], s["wrong"], s["scores"], s["cost_speed"]
        rel = s.get("relative_to_teacher") or {}
        rows.append(
            [
                s["name"],
                s["role"],
                str(s["join"]["n_items"]),
                str(s["invalid"]["n_invalid"]),
                with_ci(ex, "f1"),
                f3(wr["f1"]),
                f3(ex["accuracy"]),
                f3(ex["kappa"]),
                _vs_teacher(rep, s, "kappa"),
                f3(sc["auroc"]),
                f3(sc["ece"]),
                num(cs["tokens_per_item"]),
                money(cs["cost_usd_per_item"]),
                num(rel.get("cost_x_teacher"), "{:.2f}"),
                num(cs["latency_s"]["p50"], "{:.2f}"),
            ]
        )
    return table(
        [
            "system",
            "role",
            "n",
            "invalid",
            "F1 (excl) [CI]",
            "F1 (as wrong)",
            "acc (excl)",
            "κ gold (excl)",
            "κ teacher",
            "AUROC",
            "ECE",
            "tokens/item",
            "$/item",
            "cost×teacher",
            "p50 s",
        ],
        rows,
    )


def _classification(rep: dict, policy: str) -> str:
    rows = []
    for s in rep["systems"].values():
        m = s[policy]
        rows.append(
            [
                s["name"],
                str(m["n"]),
                str(m["n_invalid"]),
                with_ci(m, "precision"),
                with_ci(m, "recall"),
                with_ci(m, "f1"),
                with_ci(m, "accuracy"),
                f3(m["fnr"]),
                f3(m["fpr"]),
                with_ci(m, "kappa"),
                f"{m['tp']} / {m['fp']} / {m['tn']} / {m['fn']}",
            ]
        )
    return table(
        [
            "system",
            "n scored",
            "invalid",
            "precision",
            "recall",
            "F1",
            "accuracy",
            "FNR",
            "FPR",
            "κ gold",
            "TP / FP / TN / FN",
        ],
        rows,
    )


def _join(rep: dict) -> str:
    rows, notes = [], []
    for s in rep["systems"].values():
        j, inv = s["join"], s["invalid"]
        rows.append(
            [
                s["name"],
                s["path"],
                str(j["n_finished"]),
                str(j["n_failed"]),
                str(j["n_missing"]),
                str(j["n_extra"]),
                str(inv["by_reason"]["no_label"]),
                str(inv["n_review_verdicts"]),
                str(inv["n_fallback_verdicts"]),
                str(len(j["gold_mismatch_ids"])),
            ]
        )
        for kind in ("missing", "extra", "failed"):
            ids = j[f"{kind}_ids"]
            if ids:
                more = f" … (+{len(ids) - 10})" if len(ids) > 10 else ""
                notes.append(
                    f"- {cell(s['name'])}: {kind} ids: " + ", ".join(f"`{cell(i)}`" for i in ids[:10]) + more
                )
    out = table(
        [
            "system",
            "file",
            "finished",
            "failed",
            "missing",
            "extra",
            "no label",
            "review verdicts",
            "fallback verdicts",
            "gold mismatches",
        ],
        rows,
    )
    return out + ("\n\n" + "\n".join(notes) if notes else "")


def _scores(rep: dict) -> str:
    rows = []
    for s in rep["systems"].values():
        sc = s["scores"]
        rows.append(
            [
                s["name"],
                str(sc["n_scored"]),
                f3(sc["auroc"]) + ci(sc.get("auroc_ci")),
                f3(sc["auprc"]),
                f3(sc["brier"]),
                f3(sc["ece"]),
            ]
        )
    return table(
        ["system", "n scored", "AUROC [CI]", "AUPRC", "Brier", f"ECE ({rep['config']['ece_bins']} bins)"],
        rows,
    )


def _teacher(rep: dict) -> str:
    rows = []
    for s in rep["systems"].values():
        t = s["teacher"] or {}
        rows.append(
            [s["name"], str(t.get("n", DASH)), _vs_teacher(rep, s, "agreement"), _vs_teacher(rep, s, "kappa")]
        )
    return table(["system", "n (both valid)", "agreement", "κ"], rows)


def _cost(rep: dict) -> str:
    rows = []
    for s in rep["systems"].values():
        cs, rel = s["cost_speed"], s.get("relative_to_teacher") or {}
        roles = (
            "; ".join(
                f"{r} {num(v['prompt'], '{:.0f}')}+{num(v['completion'], '{:.0f}')}"
                for r, v in cs["tokens_per_item_by_role"].items()
            )
            or DASH
        )
        rows.append(
            [
                s["name"],
                num(cs["prompt_tokens_per_item"]),
                num(cs["completion_tokens_per_item"]),
                roles,
                money(cs["cost_usd_per_item"]),
                money(cs["cost_usd_total"]),
                num(rel.get("cost_x_teacher"), "{:.2f}"),
                num(rel.get("tokens_x_teacher"), "{:.2f}"),
                num(cs["latency_s"]["p50"], "{:.2f}"),
                num(cs["latency_s"]["p95"], "{:.2f}"),
                num(cs["items_per_s"], "{:.3g}"),
                num(cs["busy_s"], "{:.3g}"),
            ]
        )
    return table(
        [
            "system",
            "prompt tok/item",
            "completion tok/item",
            "per role (prompt+completion)",
            "$/item",
            "$ total",
            "cost×teacher",
            "tokens×teacher",
            "latency p50 s",
            "p95 s",
            "items/s",
            "busy s",
        ],
        rows,
    )


def _breakdown(rep: dict, key: str) -> str:
    rows = []
    groups = sorted({g for s in rep["systems"].values() for g in s["breakdowns"][key]})
    for g in groups:
        for s in rep["systems"].values():
            b = s["breakdowns"][key].get(g)
            if b is None:
                continue
            ex, wr = b["exclude"], b["wrong"]
            rows.append(
                [
                    g,
                    s["name"],
                    str(b["n"]),
                    str(ex["n_invalid"]),
                    f3(ex["precision"]),
                    f3(ex["recall"]),
                    with_ci(ex, "f1"),
                    with_ci(wr, "f1"),
                    f3(ex["accuracy"]),
                    f3(ex["fnr"]),
                    f3(ex["fpr"]),
                    f3(b["scores"]["auroc"]),
                ]
            )
    return table(
        [
            key,
            "system",
            "n",
            "invalid",
            "P (excl)",
            "R (excl)",
            "F1 (excl) [CI]",
            "F1 (as wrong) [CI]",
            "acc (excl)",
            "FNR (excl)",
            "FPR (excl)",
            "AUROC",
        ],
        rows,
    )


def render_markdown(rep: dict) -> str:
    cfg, gold = rep["config"], rep["gold"]
    teacher = rep["teacher"]
    dropped = gold["n_unlabelled_dropped"]
    intro = (
        f"{gold['n_items']} gold items ({gold['n_unsafe']} unsafe, {gold['n_safe']} safe) "
        f"from the {gold['origin']}"
        + (f" ({gold['dataset']})" if gold.get("dataset") else "")
        + (f"; {dropped} unlabelled items dropped" if dropped else "")
        + f'. Teacher: {cell(teacher or "none")}. "unsafe" is the positive class. '
        "**excl** = invalid predictions excluded (as Aetheria does); "
        "**as wrong** = invalid predictions counted as wrong. CIs are "
        f"{cfg['ci_level']:.0%} seeded bootstrap intervals."
    )
    parts = [
        "# Tribunal bench report",
        "",
        intro,
        "",
        "## Headline",
        "",
        _headline(rep),
        "",
        "## Items and join",
        "",
        _join(rep),
        "",
        "## Classification, invalid predictions excluded (as Aetheria does)",
        "",
        _classification(rep, "exclude"),
        "",
        "## Classification, invalid predictions counted as wrong",
        "",
        _classification(rep, "wrong"),
        "",
        "## Scores and calibration",
        "",
        _scores(rep),
        "",
    ]
    if teacher:
        parts += [f"## Agreement with the teacher ({cell(teacher)})", "", _teacher(rep), ""]
    parts += ["## Cost and speed", "", _cost(rep), ""]
    for key in cfg["breakdown_by"]:
        parts += [f"## Breakdown by {key}", "", _breakdown(rep, key), ""]
    parts += ["## Conventions", ""] + [f"- **{k}**: {v}" for k, v in rep["conventions"].items()] + [""]
    if rep.get("plots"):
        parts += ["## Plots", ""] + [f"![{name}]({name})" for name in rep["plots"]] + [""]
    parts += [
        "## Provenance",
        "",
        f"- created: {rep['created_at']}",
        f"- git SHA: {rep['git_sha'] or 'unknown'}",
        f"- config hash: {rep['config_hash']} (the resolved config is in report.json)",
        "",
    ]
    return "\n".join(parts)


def write_report(
    rep: dict, predictions: dict[str, list[Prediction]], output_dir: str | Path
) -> dict[str, Path]:
    """Add the conventions, then write report.json (with every prediction row) and report.md."""
    out = Path(output_dir)
    rep["conventions"] = conventions(rep["config"])
    full = {**rep, "predictions": {name: [p.to_dict() for p in rows] for name, rows in predictions.items()}}
    paths = {
        "report.json": write_atomic(
            out / "report.json", json.dumps(jsonable(full), indent=2, allow_nan=False) + "\n"
        ),
        "report.md": write_atomic(out / "report.md", render_markdown(rep)),
    }
    return paths
