"""Read each system's transcript file (and its errors file) and join it to the gold items by sample id.

A system file holds at most one transcript per sample id (a second one is an error naming file:line).
Items in ``<stem>.errors.jsonl`` that never finished in the main file are failed predictions. Items in
the gold set that a system has neither finished nor failed are missing; items a system has that the gold
set lacks are extra (reported, not scored). Every system is scored on the same gold items.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agents.runner import errors_path
from data.config import Price
from data.jsonl import RecordError, iter_records
from data.records import Sample, Transcript
from eval import predictions as P


@dataclass
class SystemFile:
    """One system's transcripts keyed by sample id, with the line each came from."""

    name: str
    path: Path
    finished: dict[str, tuple[Transcript, int]] = field(default_factory=dict)
    failed: dict[str, tuple[Transcript, int]] = field(default_factory=dict)  # errors file, never finished
    errors_file: Path | None = None


def read_system(name: str, path: str | Path) -> SystemFile:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: transcript file of system {name!r} not found")
    sf = SystemFile(name=name, path=path)
    for lineno, tr in _numbered(path):
        sid = tr.sample.id
        if sid in sf.finished:
            first = sf.finished[sid][1]
            raise RecordError(
                path, lineno, "sample.id", f"duplicate sample id {sid!r} (first on line {first})"
            )
        sf.finished[sid] = (tr, lineno)
    err = errors_path(path)
    if err.exists():
        sf.errors_file = err
        for lineno, tr in _numbered(err):
            if tr.sample.id not in sf.finished:
                sf.failed[tr.sample.id] = (tr, lineno)  # a retried failure: the last one wins
    return sf


def _numbered(path: Path):
    """(line number, transcript) pairs; blank lines are skipped but still counted."""
    with path.open(encoding="utf-8") as f:
        nonblank = [i for i, line in enumerate(f, 1) if line.strip()]
    return zip(nonblank, iter_records(path, Transcript), strict=True)


@dataclass
class GoldSet:
    """The scored items, in order, with their gold labels."""

    samples: list[Sample]
    unlabelled: list[str] = field(default_factory=list)  # ids dropped for having no gold label
    origin: str = "dataset"  # "dataset" | "transcripts"

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.samples]


def gold_from_dataset(samples: list[Sample]) -> GoldSet:
    return GoldSet(
        samples=[s for s in samples if s.label is not None],
        unlabelled=[s.id for s in samples if s.label is None],
        origin="dataset",
    )


def gold_from_transcripts(systems: list[SystemFile]) -> GoldSet:
    """The union of every system's items, gold from ``sample.label``; conflicting labels are an error."""
    seen: dict[str, tuple[Sample, Path, int]] = {}
    for sf in systems:
        rows = [(tr, sf.path, line) for tr, line in sf.finished.values()]
        rows += [(tr, sf.errors_file, line) for tr, line in sf.failed.values()]
        for tr, path, line in rows:
            s = tr.sample
            if s.id in seen and seen[s.id][0].label != s.label:
                other, opath, oline = seen[s.id]
                raise RecordError(
                    path,
                    line,
                    "sample.label",
                    f"gold label {s.label!r} of {s.id!r} conflicts with "
                    f"{other.label!r} at {opath}:{oline}; give bench a dataset",
                )
            seen.setdefault(s.id, (s, path, line))
    samples = [s for s, _, _ in seen.values()]
    return GoldSet(
        samples=[s for s in samples if s.label is not None],
        unlabelled=[s.id for s in samples if s.label is None],
        origin="transcripts",
    )


@dataclass
class Joined:
    """A system's predictions aligned with the gold items, plus what did not line up."""

    name: str
    predictions: list[P.Prediction]
    missing: list[str]  # gold ids the system has no transcript for
    extra: list[str]  # system ids not among the gold items
    failed: list[str]  # gold ids only in the errors file
    gold_mismatch: list[str]  # gold ids whose transcript carries a different sample.label


def join(
    sf: SystemFile,
    gold: GoldSet,
    *,
    review_as: P.ReviewAs = "unsafe",
    pricing: dict[str, Price] | None = None,
    batch_factor: float = 0.5,
) -> Joined:
    ids = set(gold.ids)
    preds, missing, failed, mismatch = [], [], [], []
    for s in gold.samples:
        if s.id in sf.finished:
            tr = sf.finished[s.id][0]
            preds.append(
                P.from_transcript(
                    tr, gold=s.label, review_as=review_as, pricing=pricing, batch_factor=batch_factor
                )
            )
        elif s.id in sf.failed:
            tr = sf.failed[s.id][0]
            preds.append(
                P.from_transcript(tr, gold=s.label, failed=True, pricing=pricing, batch_factor=batch_factor)
            )
            failed.append(s.id)
        else:
            preds.append(P.missing(s, s.label))
            missing.append(s.id)
            continue
        if tr.sample.label is not None and tr.sample.label != s.label:
            mismatch.append(s.id)
        # group by the gold item's fields (the dataset is the reference for source/category/modality)
        preds[-1].source, preds[-1].category, preds[-1].modality = s.source, s.category, s.modality
    extra = [sid for sid in list(sf.finished) + list(sf.failed) if sid not in ids]
    return Joined(
        name=sf.name, predictions=preds, missing=missing, extra=extra, failed=failed, gold_mismatch=mismatch
    )
