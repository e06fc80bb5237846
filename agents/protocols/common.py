"""What the seed protocols (maj, aam, committee) share: role calls with modality-aware system prompts,
the image placeholder, and small tolerant parsers for their verdict shapes.

Aetheria keeps its own helpers (it has a Preprocessor); these protocols have none, so an image without a
description gets the neutral placeholder and every role judges on the text.
"""
from __future__ import annotations

import re
from typing import ClassVar

from agents.content import IMAGE_PLACEHOLDER, MODALITY_FOCUS
from agents.parsing import extract_json, parse_choice, parse_str
from agents.protocols.base import Call, Context, Protocol
from data.records import Message, Turn


class RoleProtocol(Protocol):
    """A protocol whose roles each have one system prompt (``SYSTEM[role]``) plus the modality focus.

    Every role answers in JSON (``json_mode`` on its calls, so OpenAI-compatible backends can enforce it)
    except those in ``TEXT_ROLES``.
    """

    SYSTEM: ClassVar[dict[str, str]]
    TEXT_ROLES: ClassVar[frozenset[str]] = frozenset()

    def system(self, role: str, ctx: Context) -> str:
        return f"{self.SYSTEM[role]}\n{MODALITY_FOCUS[ctx.sample.modality]}"

    def call(self, ctx: Context, step: str, role: str, user: str, rnd: int = 0, attempt: int = 0,
             history: list[Message] | None = None, **kw) -> Call:
        """A call: system prompt, then ``history`` (earlier exchange, e.g. a re-ask), then ``user``."""
        msgs = [Message(role="system", content=self.system(role, ctx)), *(history or []),
                Message(role="user", content=user)]
        return Call(step=step, role=role, round=rnd, attempt=attempt, messages=msgs,
                    max_tokens=self.max_tokens(role), json_mode=role not in self.TEXT_ROLES, **kw)


def ensure_image_description(ctx: Context) -> None:
    """An image without a description gets the neutral placeholder (these protocols have no Preprocessor)."""
    content = ctx.content
    if ctx.sample.image and content.image_description is None:
        content.image_description, content.image_source = IMAGE_PLACEHOLDER, "placeholder"
    ctx.transcript.meta["image_source"] = content.image_source


_MARKER = re.compile(r"<{2,}\s*/?\s*(END[ _-]?)?CONTENT[^>]*>{2,}", re.IGNORECASE)


def defang(text: str) -> str:
    """A model output quoted into a later prompt (a debate record) must not carry CONTENT markers: a model
    that echoes ``<<END CONTENT ...>>`` would otherwise close the real block early. Same rule as
    ``agents.content.delimit`` applies inside the block."""
    return _MARKER.sub(lambda m: m.group(0).replace("<", "‹").replace(">", "›"), text)


def text_field(turn: Turn, *keys: str) -> tuple[str, str]:
    """The first JSON string field among ``keys``, else the raw output. Returns (text, how)."""
    for k in keys:
        v = parse_str(turn.output, k)
        if v and v.strip():
            return v.strip(), "json"
    return turn.output.strip(), "raw"


LABEL_SYNONYMS = {"safe": "safe", "unsafe": "unsafe", "compliant": "safe", "violating": "unsafe",
                  "harmful": "unsafe", "harmless": "safe"}


def parse_label(text: str, key: str = "label") -> tuple[str | None, str | None]:
    """safe | unsafe (seed 001 says Compliant | Violating; both are accepted). Returns (label, how)."""
    choice, how = parse_choice(text, key, tuple(LABEL_SYNONYMS))
    return (LABEL_SYNONYMS[choice.lower()], how) if choice else (None, None)


_CONFIDENCE_RE = re.compile(r"confidence\W{0,4}\s*[:=]\s*\**\s*(\d+(?:\.\d+)?)\s*(%?)", re.IGNORECASE)


def parse_confidence(text: str) -> float | None:
    """A confidence in [0, 1] (a JSON ``confidence`` field, else ``confidence: 0.8`` or ``80%``), or None."""
    obj = extract_json(text)
    if obj and "confidence" in obj:
        try:
            v = float(obj["confidence"])
        except (TypeError, ValueError):
            v = None
        if v is not None and 0.0 <= v <= 1.0:
            return v
    m = _CONFIDENCE_RE.search(text)
    if m:
        v = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
        if 0.0 <= v <= 1.0:
            return v
    return None


def risk_from_confidence(label: str, confidence: float | None) -> float:
    """A risk score in [0, 1] consistent with the label: 0.5 +- confidence/2 (1.0 / 0.0 without one)."""
    c = 1.0 if confidence is None else confidence
    return 0.5 + c / 2 if label == "unsafe" else 0.5 - c / 2
