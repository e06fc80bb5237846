"""Seeding a case library (``tribunal library build``): from labels, or by the paper's cold start.

- ``mode: labels`` — one case per labelled sample: summary = the truncated text, no key cues, provenance =
  source file + sample id. Fast; no model call.
- ``mode: cold_start`` — run the protocol of a generate config over the dataset WITHOUT a library, then
  run the Curator over the resulting transcripts (errors by default) and add what it writes.
"""
from __future__ import annotations

from pathlib import Path

from agents.backends.base import Backend
from agents.content import truncate
from agents.curator import Curator
from agents.library import CaseLibrary, LibraryBuildConfig, now_iso, sample_text
from data.config import GenerateConfig, load_config
from data.jsonl import iter_records
from data.records import Case, Sample, Transcript
from data.sources import load_samples


def case_from_sample(sample: Sample, source_file: str, summary_chars: int, excerpt_chars: int) -> Case:
    text = sample_text(sample)
    summary, _ = truncate(text, summary_chars)
    excerpt, _ = truncate(text, excerpt_chars)
    return Case(id=f"lbl-{sample.id}", label=sample.label, summary=summary, key_cues=[], excerpt=excerpt,
                sample_id=sample.id,
                provenance={"source": "labels", "source_file": source_file, "sample_id": sample.id,
                            "dataset_source": sample.source, "category": sample.category, "created_at": now_iso()})


def build_from_labels(cfg: LibraryBuildConfig, *, embed_fn=None) -> dict:
    samples, report = load_samples(cfg.dataset)
    labelled = [s for s in samples if s.label is not None]
    lib = CaseLibrary.open(cfg.output, cfg.library_settings, embed_fn=embed_fn)
    source = report.path
    added = lib.add([case_from_sample(s, source, cfg.summary_chars, cfg.excerpt_chars) for s in labelled])
    return {"mode": "labels", "load": report.summary(), "unlabelled_skipped": len(samples) - len(labelled),
            "added": len(added), "already_present": len(labelled) - len(added), **lib.info()}


def build_cold_start(cfg: LibraryBuildConfig, *, path: str = "<config>", backends: dict[str, Backend] | None = None,
                     curator_backend: Backend | None = None, embed_fn=None) -> dict:
    from agents.backends.factory import build_backend
    from agents.pipeline import build_runner

    gen = load_config(cfg.generate, GenerateConfig)
    gen = gen.model_copy(update={"dataset": cfg.dataset, "library": None, "progress": False})
    out = cfg.transcripts or str(Path(cfg.output) / "cold_start.transcripts.jsonl")
    runner = build_runner(gen, path=cfg.generate, backends=backends, output=out)
    samples, report = load_samples(cfg.dataset)
    if gen.limit:
        samples = samples[: gen.limit]
    stats = runner.run(samples)
    if curator_backend is None:
        curator_backend = build_backend(cfg.curator) if cfg.curator is not None else runner.backends["default"]
    ids = {s.id for s in samples}
    transcripts = [t for t in iter_records(out, Transcript, allow_partial_tail=True) if t.sample.id in ids]
    lib = CaseLibrary.open(cfg.output, cfg.library_settings, embed_fn=embed_fn)
    cur = Curator(curator_backend, lib, select=cfg.select, max_tokens=cfg.curator_max_tokens)
    cs = cur.curate(transcripts, source=out)
    return {"mode": "cold_start", "load": report.summary(), "transcripts": out, "run_done": stats.done,
            "run_skipped": stats.skipped, "run_failed": stats.failed, "selected": cs.selected,
            "by_outcome": cs.by_outcome, "curated": cs.curated, "already_curated": cs.already_curated,
            "curator_failed": cs.failed, "curator_parse_errors": cs.parse_errors, **lib.info()}
