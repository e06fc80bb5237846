"""Views: transcripts -> training examples for the student side (role adapters, arbiter distillation).

Each turn stores the exact messages the teacher saw, so a role example is a faithful replay: the prompt is
``turn.messages`` and the completion is ``turn.output`` — no prompt is rebuilt at training time. The
output is trl's conversational prompt-completion format (``{"prompt": [...], "completion": [...]}``),
which ``SFTTrainer`` trains with completion-only loss.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from data.jsonl import iter_records
from data.records import Transcript


def _keep(t: Transcript, *, correct_only: bool) -> bool:
    if t.error:
        return False
    if correct_only and t.sample.label is not None and t.verdict.label != t.sample.label:
        return False
    return True


def role_examples(transcripts: Iterable[Transcript], role: str, *, correct_only: bool = False,
                  skip_parse_errors: bool = True) -> list[dict]:
    """One example per teacher turn of ``role`` (every round and attempt)."""
    rows = []
    for t in transcripts:
        if not _keep(t, correct_only=correct_only):
            continue
        for turn in t.turns:
            if turn.role != role or turn.error or (skip_parse_errors and turn.parse_error):
                continue
            rows.append({
                "id": f"{t.id}|{turn.step}|{turn.attempt}",
                "prompt": [{"role": m.role, "content": m.content} for m in turn.messages],
                "completion": [{"role": "assistant", "content": turn.output}],
                "role": role, "round": turn.round, "sample_id": t.sample.id, "protocol": t.protocol.name,
                "protocol_version": t.protocol.version, "teacher": turn.backend.model,
            })
    return rows


def arbiter_examples(transcripts: Iterable[Transcript], final_role: str = "arbiter", *,
                     correct_only: bool = False) -> list[dict]:
    """Distillation targets for the compact judge: the final role's prompt -> a verdict JSON
    (label, calibrated score, rationale) taken from the transcript's verdict, not re-parsed text."""
    rows = []
    for t in transcripts:
        if not _keep(t, correct_only=correct_only) or t.verdict.label is None:
            continue
        finals = [x for x in t.turns if x.role == final_role and not x.error]
        if not finals:
            continue
        turn = finals[-1]
        target = {"label": t.verdict.label, "score": t.verdict.score, "rule": t.verdict.rule,
                  "rationale": t.verdict.rationale[:1000]}
        rows.append({
            "id": t.id, "prompt": [{"role": m.role, "content": m.content} for m in turn.messages],
            "completion": [{"role": "assistant", "content": json.dumps(target, ensure_ascii=False)}],
            "label": t.verdict.label, "score": t.verdict.score, "gold": t.sample.label, "sample_id": t.sample.id,
        })
    return rows


def role_dataset(path: str | Path, role: str, **kw):
    from datasets import Dataset

    return Dataset.from_list(role_examples(iter_records(path), role, **kw))
