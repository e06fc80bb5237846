"""The benchmark: score every system (teacher, students, baselines) on the same gold items, the same way.

``run_bench`` reads each system's transcripts, joins them to the gold items by sample id, and computes
with ``eval.metrics`` (scikit-learn underneath): classification metrics with invalid predictions
excluded and counted as wrong, score metrics, agreement with the teacher, seeded bootstrap CIs,
breakdowns, and cost and speed. It returns one plain dict (what report.json holds); ``eval.report``
and ``eval.plots`` turn it into files.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Literal

import sklearn
from pydantic import Field, field_validator, model_validator

from data.config import Cfg, DatasetConfig, Price, config_hash
from eval import costs, metrics
from eval import predictions as P
from eval.bootstrap_memo import classification_with_ci
from eval.join import GoldSet, Joined, gold_from_dataset, gold_from_transcripts, join, read_system

BREAKDOWN_KEYS = ("source", "category", "modality")
SCORE_KEYS = ("n_scored", "n_missing_score", "auroc", "auprc", "brier", "ece", "ece_bins")


class SystemSpec(Cfg):
    name: str = Field(min_length=1)
    path: str = Field(min_length=1)  # a transcript file (predictions of a baseline are one-turn transcripts)
    role: Literal["teacher", "student", "baseline"] = "baseline"
    review_as: Literal["unsafe", "safe", "invalid"] = "unsafe"  # how an AAM "review" verdict is scored


class BenchConfig(Cfg):
    output_dir: str = "runs/bench"
    dataset: DatasetConfig | None = None  # the gold labels; None = gold from the transcripts' sample.label
    systems: list[SystemSpec] = Field(min_length=1)
    teacher: str | None = None  # a system name; None = the one system with role "teacher", if any
    n_boot: int = Field(default=1000, ge=0)
    breakdown_n_boot: int = Field(
        default=200, ge=0
    )  # resamples for the per-group CIs (cheap: see bootstrap_memo)
    seed: int = 0
    ci_level: float = Field(default=0.95, gt=0, lt=1)
    ece_bins: int = Field(default=10, ge=1)
    pricing: dict[str, Price] = Field(default_factory=dict)  # model -> price; else the cost on the turns
    batch_price_factor: float = Field(default=0.5, gt=0)  # applied with `pricing` to batch-backend turns
    breakdown_by: list[Literal["source", "category", "modality"]] = Field(
        default_factory=lambda: list(BREAKDOWN_KEYS)
    )
    plots: bool = True

    @field_validator("systems")
    @classmethod
    def _unique_names(cls, systems: list[SystemSpec]) -> list[SystemSpec]:
        names = Counter(s.name for s in systems)
        dup = [n for n, c in names.items() if c > 1]
        if dup:
            raise ValueError(f"system names must be unique; repeated: {', '.join(dup)}")
        return systems

    @model_validator(mode="after")
    def _resolve_teacher(self) -> BenchConfig:
        names = [s.name for s in self.systems]
        if self.teacher is not None:
            if self.teacher not in names:
                raise ValueError(f"teacher {self.teacher!r} is not one of the systems ({', '.join(names)})")
            return self
        teachers = [s.name for s in self.systems if s.role == "teacher"]
        if len(teachers) > 1:
            raise ValueError(
                f"several systems have role teacher ({', '.join(teachers)}); name one in `teacher`"
            )
        self.teacher = teachers[0] if teachers else None
        return self


def _arrays(preds: list[P.Prediction]) -> tuple[list, list, list]:
    return [p.gold for p in preds], [p.label for p in preds], [p.score for p in preds]


def classification(preds: list[P.Prediction], *, invalid: str, n_boot: int, cfg: BenchConfig) -> dict:
    """metrics.metrics_with_ci of the labels (computed once per distinct resample: same numbers, faster)."""
    gold, pred, _ = _arrays(preds)
    return classification_with_ci(
        gold, pred, invalid=invalid, n_boot=n_boot, seed=cfg.seed, alpha=1 - cfg.ci_level
    )


def score_block(preds: list[P.Prediction], cfg: BenchConfig, *, n_boot: int) -> dict:
    """Score metrics over every item with a score (valid label or not), the AUROC CI, reliability bins."""
    gold, _, scores = _arrays(preds)
    out = metrics.score_metrics(gold, scores, n_bins=cfg.ece_bins)
    scored = [(g, s) for g, s in zip(gold, scores, strict=True) if s is not None]
    out["reliability"] = (
        metrics.reliability_bins([g for g, _ in scored], [s for _, s in scored], cfg.ece_bins)
        if scored
        else []
    )
    if n_boot and scored:
        out["auroc_ci"] = metrics.bootstrap_ci(
            lambda g, s: metrics.score_metrics(g, s, n_bins=cfg.ece_bins)["auroc"],
            gold,
            scores,
            n_boot=n_boot,
            seed=cfg.seed,
            alpha=1 - cfg.ci_level,
        )
    else:
        out["auroc_ci"] = (float("nan"), float("nan"))
    return out


def invalid_summary(j: Joined) -> dict:
    reasons = Counter(p.invalid_reason for p in j.predictions if p.invalid_reason)
    return {
        "n_invalid": sum(reasons.values()),
        "by_reason": {r: reasons.get(r, 0) for r in (P.NO_LABEL, P.REVIEW, P.FAILED, P.MISSING)},
        "n_review_verdicts": sum(p.raw_label == "review" for p in j.predictions),
        "n_fallback_verdicts": sum(p.fallback_used for p in j.predictions if p.ran),
        "n_verdict_parse_error": sum(bool(p.parse_error) for p in j.predictions if p.ran),
    }


def breakdown(preds: list[P.Prediction], key: str, cfg: BenchConfig) -> dict[str, dict]:
    """Per group value (None -> "unknown"): both invalid conventions with CIs, and score metrics."""
    groups: dict[str, list[P.Prediction]] = {}
    for p in preds:
        groups.setdefault("unknown" if getattr(p, key) is None else str(getattr(p, key)), []).append(p)
    out = {}
    for g in sorted(groups):
        rows = groups[g]
        gold, _, scores = _arrays(rows)
        out[g] = {
            "n": len(rows),
            "exclude": classification(rows, invalid="exclude", n_boot=cfg.breakdown_n_boot, cfg=cfg),
            "wrong": classification(rows, invalid="wrong", n_boot=cfg.breakdown_n_boot, cfg=cfg),
            "scores": metrics.score_metrics(gold, scores, n_bins=cfg.ece_bins),
        }
    return out


def score_system(j: Joined, spec: SystemSpec, cfg: BenchConfig, teacher: Joined | None) -> dict:
    preds = j.predictions
    out = {
        "name": spec.name,
        "role": spec.role,
        "path": spec.path,
        "review_as": spec.review_as,
        "join": {
            "n_items": len(preds),
            "n_finished": sum(p.ran for p in preds),
            "n_failed": len(j.failed),
            "n_missing": len(j.missing),
            "n_extra": len(j.extra),
            "missing_ids": j.missing,
            "extra_ids": j.extra,
            "failed_ids": j.failed,
            "gold_mismatch_ids": j.gold_mismatch,
        },
        "invalid": invalid_summary(j),
        "exclude": classification(preds, invalid="exclude", n_boot=cfg.n_boot, cfg=cfg),
        "wrong": classification(preds, invalid="wrong", n_boot=cfg.n_boot, cfg=cfg),
        "scores": score_block(preds, cfg, n_boot=cfg.n_boot),
        "teacher": None,
        "cost_speed": costs.cost_speed(preds),
        "breakdowns": {k: breakdown(preds, k, cfg) for k in cfg.breakdown_by},
    }
    if teacher is not None:
        out["teacher"] = metrics.agreement([p.label for p in preds], [p.label for p in teacher.predictions])
    return out


def load_gold(cfg: BenchConfig, systems: list) -> tuple[GoldSet, str | None]:
    if cfg.dataset is None:
        return gold_from_transcripts(systems), None
    from data.sources import load_samples

    samples, report = load_samples(cfg.dataset)
    return gold_from_dataset(samples), report.summary()


def run_bench(cfg: BenchConfig, *, git_sha: str | None = None) -> tuple[dict, dict[str, list[P.Prediction]]]:
    """Score every system; returns (the report dict, each system's prediction rows)."""
    files = [read_system(s.name, s.path) for s in cfg.systems]
    gold, dataset_summary = load_gold(cfg, files)
    joined = {
        s.name: join(f, gold, review_as=s.review_as, pricing=cfg.pricing, batch_factor=cfg.batch_price_factor)
        for s, f in zip(cfg.systems, files, strict=True)
    }
    teacher = joined[cfg.teacher] if cfg.teacher else None
    systems = {}
    # eval.metrics checks the inputs; skipping sklearn's re-validation makes the bootstrap ~2x faster
    with sklearn.config_context(skip_parameter_validation=True):
        for spec in cfg.systems:
            systems[spec.name] = score_system(joined[spec.name], spec, cfg, teacher)
    if cfg.teacher:
        t_cs = systems[cfg.teacher]["cost_speed"]
        for s in systems.values():
            s["relative_to_teacher"] = costs.relative_to_teacher(s["cost_speed"], t_cs)
    golds = Counter(s.label for s in gold.samples)
    report = {
        "tool": "tribunal bench",
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_sha": git_sha,
        "config": cfg.model_dump(mode="json"),
        "config_hash": config_hash(cfg),
        "gold": {
            "origin": gold.origin,
            "dataset": dataset_summary,
            "n_items": len(gold.samples),
            "n_unsafe": golds.get("unsafe", 0),
            "n_safe": golds.get("safe", 0),
            "n_unlabelled_dropped": len(gold.unlabelled),
            "unlabelled_ids": gold.unlabelled,
        },
        "teacher": cfg.teacher,
        "systems": systems,
    }
    return report, {name: j.predictions for name, j in joined.items()}
