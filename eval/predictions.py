"""One transcript -> one prediction row: what bench scores, whatever protocol or baseline made it.

The predicted label is the verdict's label after mapping "review" (AAM's third outcome) to
``review_as``; it is ``None`` (an invalid prediction) when the verdict has no label, when "review" maps
to "invalid", when the item failed (it sits in the run's errors file) or when the system never ran it.
Tokens, cost and latency are summed over the transcript's turns; latency is the sum of turn latencies
(for batched local backends each turn's latency is its share of the batch time).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Literal

from data.config import Price
from data.records import Sample, Transcript, Turn

ReviewAs = Literal["unsafe", "safe", "invalid"]
# why a prediction is invalid (None when it is valid)
NO_LABEL, REVIEW, FAILED, MISSING = "no_label", "review", "failed", "missing"


@dataclass
class Prediction:
    sample_id: str
    gold: str | None
    label: str | None  # "safe" | "unsafe" | None (invalid)
    score: float | None = None  # P(unsafe)-like verdict score
    transcript_id: str | None = None
    raw_label: str | None = None  # the verdict label as written (safe | unsafe | review | None)
    invalid_reason: str | None = None  # no_label | review | failed | missing
    parse_error: str | None = None
    fallback_used: bool = False
    rule: str | None = None
    source: str | None = None
    category: str | None = None
    modality: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_by_role: dict[str, dict[str, int]] = field(default_factory=dict)  # role -> prompt/completion/calls
    cost_usd: float = 0.0
    latency_s: float = 0.0  # sum of turn latencies
    wall_s: float = 0.0  # the transcript's usage.wall_s (start to finish of this item in its run)
    created_at: str | None = None

    @property
    def ran(self) -> bool:
        """The system produced a finished transcript for this item (not failed, not missing)."""
        return self.invalid_reason not in (FAILED, MISSING)

    @property
    def started_at(self) -> datetime | None:
        return datetime.fromisoformat(self.created_at) if self.created_at else None

    def to_dict(self) -> dict:
        return asdict(self)


def turn_cost(turn: Turn, pricing: dict[str, Price] | None, batch_factor: float) -> float:
    """The turn's recorded cost, or a price from ``pricing`` when its model is listed there."""
    price = (pricing or {}).get(turn.backend.model)
    if price is None:
        return turn.cost_usd
    factor = batch_factor if turn.backend.kind == "batch" else 1.0
    return (
        (
            turn.usage.prompt_tokens * price.prompt_per_1m
            + turn.usage.completion_tokens * price.completion_per_1m
        )
        / 1e6
        * factor
    )


def map_label(raw: str | None, review_as: ReviewAs) -> tuple[str | None, str | None]:
    """(label, invalid_reason) for a verdict label."""
    if raw in ("safe", "unsafe"):
        return raw, None
    if raw == "review":
        return (None, REVIEW) if review_as == "invalid" else (review_as, None)
    return None, NO_LABEL


def _sample_fields(sample: Sample) -> dict:
    return {"source": sample.source, "category": sample.category, "modality": sample.modality}


def from_transcript(
    tr: Transcript,
    *,
    gold: str | None = None,
    review_as: ReviewAs = "unsafe",
    failed: bool = False,
    pricing: dict[str, Price] | None = None,
    batch_factor: float = 0.5,
) -> Prediction:
    """A prediction row; ``failed`` marks a transcript from the errors file (always invalid)."""
    by_role: dict[str, dict[str, int]] = {}
    for t in tr.turns:
        r = by_role.setdefault(t.role, {"prompt": 0, "completion": 0, "calls": 0})
        r["prompt"] += t.usage.prompt_tokens
        r["completion"] += t.usage.completion_tokens
        r["calls"] += 1
    if failed:
        label, reason = None, FAILED
    else:
        label, reason = map_label(tr.verdict.label, review_as)
    return Prediction(
        sample_id=tr.sample.id,
        gold=gold if gold is not None else tr.sample.label,
        label=label,
        score=tr.verdict.score,
        transcript_id=tr.id,
        raw_label=tr.verdict.label,
        invalid_reason=reason,
        parse_error=tr.error if failed else tr.verdict.parse_error,
        fallback_used=tr.verdict.fallback_used,
        rule=tr.verdict.rule,
        **_sample_fields(tr.sample),
        prompt_tokens=sum(t.usage.prompt_tokens for t in tr.turns),
        completion_tokens=sum(t.usage.completion_tokens for t in tr.turns),
        tokens_by_role=by_role,
        cost_usd=sum(turn_cost(t, pricing, batch_factor) for t in tr.turns),
        latency_s=sum(t.latency_s for t in tr.turns),
        wall_s=tr.usage.wall_s,
        created_at=tr.provenance.created_at,
    )


def missing(sample: Sample, gold: str | None) -> Prediction:
    """The row for a dataset item the system has no transcript for."""
    return Prediction(
        sample_id=sample.id, gold=gold, label=None, invalid_reason=MISSING, **_sample_fields(sample)
    )
