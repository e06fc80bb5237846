"""The records that cross every stage: Sample, Turn, Verdict, Transcript (schema_version 1).

A transcript is the one record Tribunal writes. Teacher runs, student runs and baselines all produce it;
training views read it; bench scores it. Each turn stores the exact chat messages sent, so a role's
training example is a replay of what the teacher saw.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = 1

Label = Literal["safe", "unsafe"]
VerdictLabel = Literal["safe", "unsafe", "review"]
Modality = Literal["text", "image", "text+image"]
Subject = Literal["prompt", "response", "prompt+response"]


class Record(BaseModel):
    """Base: unknown fields are errors, so a typo in a file never passes silently."""

    model_config = ConfigDict(extra="forbid")


class Sample(Record):
    id: str = Field(min_length=1)
    source: str = "unknown"
    text: str = ""
    prompt: str | None = None
    response: str | None = None
    image: str | None = None  # path or URL
    image_description: str | None = None
    label: Label | None = None
    category: str | None = None
    modality: Modality = "text"
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _has_content(self) -> Sample:
        if not (self.text or self.prompt or self.response or self.image or self.image_description):
            raise ValueError("sample has no content (text, prompt, response, image and image_description are all empty)")
        return self

    @property
    def subject(self) -> Subject:
        """What the agents judge: a user prompt, a model response, or a prompt with its response."""
        if self.response:
            return "prompt+response" if (self.prompt or self.text) else "response"
        return "prompt"

    @property
    def has_image(self) -> bool:
        return bool(self.image or self.image_description)


class Message(Record):
    role: Literal["system", "user", "assistant"]
    content: str
    images: list[str] | None = None  # image paths or URLs sent with this message (VLM calls only)


class BackendRef(Record):
    kind: str
    model: str
    adapter: str | None = None


class Usage(Record):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Turn(Record):
    step: str
    role: str
    round: int = 0
    attempt: int = 0
    backend: BackendRef
    messages: list[Message]
    output: str = ""
    parsed: dict[str, Any] = Field(default_factory=dict)
    parse_error: str | None = None
    fallback_used: bool = False
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    cost_usd: float = 0.0
    cached: bool = False
    error: str | None = None  # backend failure for this call (after retries)


class Retrieved(Record):
    case_id: str
    similarity: float
    label: Label | None = None
    summary: str | None = None


class Verdict(Record):
    label: VerdictLabel | None = None  # None only when the run failed to produce one
    score: float | None = Field(default=None, ge=0.0, le=1.0)  # P(unsafe)-like risk score
    ordinal: int | None = Field(default=None, ge=1, le=5)
    score10: int | None = Field(default=None, ge=1, le=10)
    band: str | None = None
    rule: str | None = None
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list)
    parse_error: str | None = None
    fallback_used: bool = False


class ProtocolInfo(Record):
    name: str
    version: str
    rounds: int = 0
    config: dict[str, Any] = Field(default_factory=dict)


class UsageTotals(Record):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    calls: int = 0


class Provenance(Record):
    tool_version: str
    git_sha: str | None = None
    config_hash: str
    created_at: str


class Transcript(Record):
    schema_version: Literal[1] = SCHEMA_VERSION
    id: str
    sample: Sample
    protocol: ProtocolInfo
    turns: list[Turn] = Field(default_factory=list)
    retrieval: list[Retrieved] = Field(default_factory=list)
    verdict: Verdict = Field(default_factory=Verdict)
    usage: UsageTotals = Field(default_factory=UsageTotals)
    provenance: Provenance
    truncation: dict[str, int] = Field(default_factory=dict)  # field -> characters cut
    error: str | None = None  # a per-item failure; such transcripts go to the errors file
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("turns")
    @classmethod
    def _turn_keys_unique(cls, turns: list[Turn]) -> list[Turn]:
        seen = set()
        for t in turns:
            key = (t.step, t.role, t.round, t.attempt)
            if key in seen:
                raise ValueError(f"duplicate turn {key}")
            seen.add(key)
        return turns

    def turns_for(self, role: str) -> list[Turn]:
        return [t for t in self.turns if t.role == role]


class Case(Record):
    """A precedent in the case library (seed 000 §3.2.2, §3.4)."""

    id: str
    label: Label
    summary: str
    key_cues: list[str] = Field(default_factory=list)
    excerpt: str = ""
    sample_id: str | None = None  # the sample it came from (the leakage guard excludes it)
    provenance: dict[str, Any] = Field(default_factory=dict)  # e.g. transcript id, curator model, created_at
