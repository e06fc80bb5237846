"""JSONL storage for transcripts: atomic append, validating read, resume and crash repair.

Each finished record is one line written with a single ``write`` of the whole line, then flushed and
fsynced, so a crash can leave at most one partial *last* line. ``repair_tail`` detects that line, moves it
to ``<file>.partial-<n>`` (never silently dropped) and truncates the file back to the last good newline.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from data.records import Transcript

M = TypeVar("M", bound=BaseModel)


class RecordError(ValueError):
    """Bad input, located: ``file:line: field: problem``."""

    def __init__(self, path: Path | str, line: int, field: str, problem: str):
        self.path, self.line, self.field, self.problem = str(path), line, field, problem
        super().__init__(f"{path}:{line}: {field}: {problem}")


def _field_path(loc: tuple) -> str:
    return ".".join(str(p) for p in loc) or "<record>"


def parse_line(path: Path | str, lineno: int, line: str, model: type[M]) -> M:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise RecordError(path, lineno, "<json>", f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise RecordError(path, lineno, "<record>", f"expected a JSON object, got {type(obj).__name__}")
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        more = f" (and {e.error_count() - 1} more problems)" if e.error_count() > 1 else ""
        raise RecordError(path, lineno, _field_path(err["loc"]), err["msg"] + more) from None


def iter_records(path: Path | str, model: type[M] = Transcript, *, allow_partial_tail: bool = False) -> Iterator[M]:
    """Yield validated records. A malformed line raises RecordError naming file, line and field.

    With ``allow_partial_tail`` a last line without a newline that fails to parse is ignored
    (it is what a crash leaves; ``repair_tail`` handles it before any append).
    """
    path = Path(path)
    with path.open("r", encoding="utf-8") as f:
        lines = f.readlines()
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last_unterminated = i == len(lines) and not line.endswith("\n")
        try:
            yield parse_line(path, i, line, model)
        except RecordError:
            if allow_partial_tail and last_unterminated:
                return
            raise


def read_records(path: Path | str, model: type[M] = Transcript) -> list[M]:
    return list(iter_records(path, model))


def validate_file(path: Path | str, model: type[M] = Transcript) -> tuple[int, list[RecordError]]:
    """Check every line; return (valid count, errors) rather than stopping at the first."""
    path = Path(path)
    ok, errors, seen = 0, [], {}
    with path.open("r", encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = parse_line(path, i, line, model)
            except RecordError as e:
                errors.append(e)
                continue
            rid = getattr(rec, "id", None)
            if rid is not None and rid in seen:
                errors.append(RecordError(path, i, "id", f"duplicate id {rid!r} (first on line {seen[rid]})"))
                continue
            if rid is not None:
                seen[rid] = i
            ok += 1
    return ok, errors


def repair_tail(path: Path | str) -> Path | None:
    """If the file ends in a partial line, move that fragment aside and truncate. Returns the aside path."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return None
    with path.open("rb+") as f:
        size = f.seek(0, os.SEEK_END)
        # find the last newline
        pos, chunk = size, 65536
        last_nl = -1
        while pos > 0 and last_nl < 0:
            start = max(0, pos - chunk)
            f.seek(start)
            buf = f.read(pos - start)
            idx = buf.rfind(b"\n")
            if idx >= 0:
                last_nl = start + idx
            pos = start
        keep = last_nl + 1  # 0 when no newline at all
        if keep == size:
            return None
        f.seek(keep)
        fragment = f.read()
        n = 0
        while (aside := path.with_name(f"{path.name}.partial-{n}")).exists():
            n += 1
        aside.write_bytes(fragment)
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return aside


class JsonlAppender:
    """Append records one whole line at a time; flush + fsync after each."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired = repair_tail(self.path)
        self._f = self.path.open("ab")

    def append(self, record: BaseModel) -> None:
        line = record.model_dump_json(exclude_none=False) + "\n"
        self._f.write(line.encode("utf-8"))
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def finished_ids(path: Path | str) -> set[str]:
    """Ids already written (for resume). Tolerates a crash-truncated last line."""
    path = Path(path)
    if not path.exists():
        return set()
    ids = set()
    with path.open("r", encoding="utf-8") as f:
        lines = f.readlines()
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if i == len(lines) and not line.endswith("\n"):
            break  # partial tail: repaired before the next append
        try:
            ids.add(json.loads(line)["id"])
        except (json.JSONDecodeError, KeyError, TypeError):
            raise RecordError(path, i, "id", "cannot read the record id; run `tribunal validate` on this file") from None
    return ids


def to_dataset(path: Path | str):
    """Export a transcript file as a ``datasets.Dataset`` (one row per transcript, nested as JSON)."""
    from datasets import Dataset

    rows = []
    for t in iter_records(path, Transcript):
        rows.append(
            {
                "id": t.id,
                "sample_id": t.sample.id,
                "source": t.sample.source,
                "label": t.sample.label,
                "category": t.sample.category,
                "modality": t.sample.modality,
                "protocol": t.protocol.name,
                "protocol_version": t.protocol.version,
                "verdict_label": t.verdict.label,
                "verdict_score": t.verdict.score,
                "verdict_rule": t.verdict.rule,
                "prompt_tokens": t.usage.prompt_tokens,
                "completion_tokens": t.usage.completion_tokens,
                "cost_usd": t.usage.cost_usd,
                "transcript_json": t.model_dump_json(),
            }
        )
    return Dataset.from_list(rows)
