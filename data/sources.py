"""Dataset sources: local JSONL / CSV / Parquet with a column and label mapping, hub ids through
``datasets.load_dataset``, and the bundled sample set. Every row becomes a validated ``Sample``.

A bad row is an error naming ``file:line: field: problem``, or (``invalid: skip``) is skipped and counted.
"""
from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from data.config import DatasetConfig
from data.jsonl import RecordError
from data.records import Sample

FIELDS = ("id", "source", "text", "prompt", "response", "label", "category", "image", "image_description", "meta")
DEFAULT_LABELS = {"safe": "safe", "unsafe": "unsafe", "benign": "safe", "harmful": "unsafe", "0": "safe", "1": "unsafe"}


def bundled_path() -> Path:
    return Path(__file__).resolve().parent / "samples" / "bundled.jsonl"


@dataclass
class LoadReport:
    path: str
    rows: int = 0
    kept: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)  # first few skip reasons

    def summary(self) -> str:
        s = f"{self.path}: {self.kept} samples from {self.rows} rows"
        if self.skipped:
            s += f", {self.skipped} invalid rows skipped (e.g. {self.problems[0]})"
        return s


def _rows(cfg: DatasetConfig) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number as a person counts it, raw row) pairs."""
    path = bundled_path() if cfg.path == "bundled" else Path(cfg.path)
    fmt = cfg.format
    if fmt == "auto":
        suffix = path.suffix.lower()
        fmt = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}.get(suffix)
        if fmt is None:
            fmt = "hub" if not path.exists() or path.is_dir() else None
        if fmt is None:
            raise RecordError(path, 0, "dataset.format", f"cannot tell the format of {path.name}; set dataset.format")
    if fmt == "jsonl":
        if not path.exists():
            raise FileNotFoundError(f"{path}: dataset file not found")
        with path.open(encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise RecordError(path, i, "<json>", f"not valid JSON ({e.msg})") from None
                if not isinstance(row, dict):
                    raise RecordError(path, i, "<record>", "expected a JSON object")
                yield i, row
    elif fmt == "csv":
        import pandas as pd

        df = pd.read_csv(path, dtype=str, keep_default_na=False)
        for i, row in enumerate(df.to_dict(orient="records")):
            yield i + 2, row  # header is line 1
    elif fmt == "parquet":
        import pandas as pd

        df = pd.read_parquet(path)
        for i, row in enumerate(df.to_dict(orient="records")):
            yield i + 1, row
    else:  # hub id (or a local folder / loading script): the real datasets.load_dataset path
        from datasets import load_dataset

        ds = load_dataset(cfg.path, cfg.subset, split=cfg.split)
        for i, row in enumerate(ds):
            yield i + 1, dict(row)


def _clean(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, float) and v != v:  # NaN from pandas
        return None
    return v


def row_to_sample(row: dict[str, Any], cfg: DatasetConfig, source: str, lineno: int, path: str) -> Sample:
    cols = {f: cfg.columns.get(f, f) for f in FIELDS}
    for ours, theirs in cfg.columns.items():
        if ours not in FIELDS:
            raise RecordError(path, lineno, f"dataset.columns.{ours}", f"unknown field (known: {', '.join(FIELDS)})")
        if theirs not in row:
            raise RecordError(path, lineno, theirs, f"column mapped to {ours!r} is missing from the data")
    get = lambda f: _clean(row.get(cols[f]))
    raw_label = get("label")
    label = None
    if raw_label is not None and str(raw_label).strip() != "":
        key = str(raw_label).strip()
        if isinstance(raw_label, float) and raw_label.is_integer():
            key = str(int(raw_label))
        mapping = {**DEFAULT_LABELS, **cfg.label_map}
        label = mapping.get(key, mapping.get(key.lower()))
        if label is None:
            raise RecordError(path, lineno, cols["label"], f"unknown label {raw_label!r}; add it to dataset.label_map")
    elif cfg.require_label:
        raise RecordError(path, lineno, cols["label"], "label is missing")
    text = str(get("text") or "")
    prompt = get("prompt")
    response = get("response")
    image = get("image")
    desc = get("image_description")
    if not (text.strip() or (prompt and str(prompt).strip()) or (response and str(response).strip()) or image or desc):
        raise RecordError(path, lineno, cols["text"], "empty content (no text, prompt, response or image)")
    has_img = bool(image or desc)
    has_txt = bool(text.strip() or prompt or response)
    modality = "text+image" if has_img and has_txt else "image" if has_img else "text"
    sid = get("id")
    meta = get("meta") if isinstance(get("meta"), dict) else {}
    try:
        return Sample(
            id=str(sid) if sid not in (None, "") else f"{source}/{lineno}",
            source=str(get("source") or source), text=text,
            prompt=str(prompt) if prompt else None, response=str(response) if response else None,
            image=str(image) if image else None, image_description=str(desc) if desc else None,
            label=label, category=str(get("category")) if get("category") not in (None, "") else None,
            modality=modality, meta=meta,
        )
    except ValidationError as e:
        err = e.errors()[0]
        raise RecordError(path, lineno, ".".join(map(str, err["loc"])) or "<row>", err["msg"]) from None


def load_samples(cfg: DatasetConfig) -> tuple[list[Sample], LoadReport]:
    path = str(bundled_path()) if cfg.path == "bundled" else cfg.path
    source = cfg.source or ("bundled" if cfg.path == "bundled" else Path(cfg.path).stem)
    report = LoadReport(path=path)
    out: list[Sample] = []
    seen: dict[str, int] = {}
    for lineno, row in _rows(cfg):
        report.rows += 1
        try:
            s = row_to_sample(row, cfg, source, lineno, path)
            if s.id in seen:
                raise RecordError(path, lineno, cfg.columns.get("id", "id"),
                                  f"duplicate sample id {s.id!r} (first on line {seen[s.id]})")
            seen[s.id] = lineno
        except RecordError as e:
            if cfg.invalid == "error":
                raise
            report.skipped += 1
            if len(report.problems) < 5:
                report.problems.append(str(e))
            continue
        out.append(s)
    if cfg.sample_n is not None and cfg.sample_n < len(out):
        out = stratified_sample(out, cfg.sample_n, cfg.seed)
    if cfg.limit is not None:
        out = out[: cfg.limit]
    report.kept = len(out)
    return out, report


def stratified_sample(samples: list[Sample], n: int, seed: int) -> list[Sample]:
    """A seeded subset keeping the label proportions (order of the original file preserved)."""
    rng = random.Random(seed)
    by: dict[Any, list[int]] = {}
    for i, s in enumerate(samples):
        by.setdefault(s.label, []).append(i)
    chosen: list[int] = []
    total = len(samples)
    quotas = {k: round(n * len(v) / total) for k, v in by.items()}
    diff = n - sum(quotas.values())
    for k in sorted(by, key=lambda k: -len(by[k]))[: abs(diff)]:
        quotas[k] += 1 if diff > 0 else -1
    for k, idx in by.items():
        chosen += rng.sample(idx, min(quotas[k], len(idx)))
    return [samples[i] for i in sorted(chosen)]
