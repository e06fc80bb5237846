"""Keyword / regex blocklist: the "first generation" moderation baseline (seed 002), no model call.

The list lives in a YAML file (``configs/keyword_blocklist.yaml`` by default, schema ``Blocklist``):
plain ``terms`` per category, matched case-insensitively on word boundaries (optionally tolerant of
leetspeak such as ``k1ll`` / ``b0mb`` and of a plural ``s``/``es``), and raw ``regexes`` per category
(Python syntax, case-insensitive). It scans the sample's full text, prompt, response and image
description (not the truncated prompt view: there is no context window to respect here).

Score and label: ``n`` = number of distinct list entries that matched; ``score = min(1, weight * n)``;
``label = unsafe`` when ``n >= min_matches``, else ``safe``. With the defaults (weight 0.5,
min_matches 1) one match gives score 0.5 and "unsafe", two or more give 1.0.

The protocol makes no call: its generator returns the verdict before yielding, so the runner finishes
the item at its first step and the transcript has no turns. What matched is in ``verdict.evidence`` and
``transcript.meta["keyword_matches"]`` (with the blocklist's SHA-256 in ``meta["blocklist_sha256"]``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from agents.protocols.base import Context, Protocol, ProtocolConfig, ProtocolRun, register
from data.config import Cfg, ConfigError, format_validation_error
from data.records import Verdict
from eval.baselines.files import read_text, resolve_config_file

LEET = {"a": "a4@", "b": "b8", "e": "e3", "g": "g9", "i": "i1!|", "l": "l1|", "o": "o0", "s": "s5$", "t": "t7+",
        "z": "z2"}
_START = r"(?<![^\W_])"  # not preceded by a letter or digit (leet symbols such as $ or @ are not \w)
_END = r"(?![^\W_])"


class Blocklist(Cfg):
    weight: float = Field(default=0.5, gt=0, le=1)  # score = min(1, weight * distinct entries matched)
    min_matches: int = Field(default=1, ge=1)  # unsafe when at least this many distinct entries match
    leetspeak: bool = True  # terms also match common digit/symbol substitutions
    plurals: bool = True  # terms also match with a trailing "s" / "es"
    terms: dict[str, list[str]] = Field(default_factory=dict)  # category -> words or phrases
    regexes: dict[str, list[str]] = Field(default_factory=dict)  # category -> regular expressions

    @field_validator("terms")
    @classmethod
    def _terms_not_blank(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for cat, items in v.items():
            for i, t in enumerate(items):
                if not str(t).strip():
                    raise ValueError(f"{cat}[{i}] is blank")
        return v

    @field_validator("regexes")
    @classmethod
    def _regexes_compile(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for cat, items in v.items():
            for i, r in enumerate(items):
                try:
                    re.compile(r)
                except re.error as e:
                    raise ValueError(f"{cat}[{i}] {r!r} is not a valid regular expression: {e}") from None
        return v


def term_regex(term: str, *, leetspeak: bool, plurals: bool) -> str:
    """A word-boundary regex for a word or phrase; words may be separated by spaces, '-', '_' or '.'."""
    words = []
    for word in term.lower().split():
        parts = []
        for ch in word:
            if leetspeak and ch in LEET:
                parts.append("[" + re.escape(LEET[ch]) + "]")
            else:
                parts.append(re.escape(ch))
        words.append("".join(parts))
    body = r"[\s\-_.]+".join(words)
    if plurals:
        body += "(?:e?s)?"
    return _START + body + _END


@dataclass(frozen=True)
class Entry:
    category: str
    source: str  # the term or regex as written in the list
    kind: Literal["term", "regex"]
    pattern: re.Pattern


def compile_blocklist(bl: Blocklist) -> list[Entry]:
    entries = []
    for cat, terms in bl.terms.items():
        for t in terms:
            rx = term_regex(t, leetspeak=bl.leetspeak, plurals=bl.plurals)
            entries.append(Entry(cat, t, "term", re.compile(rx, re.IGNORECASE)))
    for cat, rxs in bl.regexes.items():
        for r in rxs:
            entries.append(Entry(cat, r, "regex", re.compile(r, re.IGNORECASE)))
    return entries


def load_blocklist(path: str) -> tuple[Blocklist, str]:
    """(blocklist, sha256-prefix); errors name the file and the offending field."""
    p = resolve_config_file(path, "blocklist")
    text, sha = read_text(p)
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: top level must be a mapping")
    try:
        return Blocklist.model_validate(raw), sha
    except ValidationError as e:
        raise ConfigError(format_validation_error(p, e)) from None


def match(entries: list[Entry], text: str) -> list[dict]:
    """One record per entry that matched: category, entry, first matched text, number of matches."""
    found = []
    for e in entries:
        hits = [m.group(0) for m in e.pattern.finditer(text)]
        if hits:
            found.append({"category": e.category, "entry": e.source, "kind": e.kind, "match": hits[0],
                          "count": len(hits)})
    return found


class KeywordConfig(ProtocolConfig):
    name: Literal["keyword"] = "keyword"
    blocklist: str = "configs/keyword_blocklist.yaml"


@register
class Keyword(Protocol):
    name = "keyword"
    version = "keyword-1"
    roles = ()
    Config = KeywordConfig

    def __init__(self, cfg: KeywordConfig):
        super().__init__(cfg)
        self.blocklist, self.blocklist_sha = load_blocklist(cfg.blocklist)
        self.entries = compile_blocklist(self.blocklist)

    def run(self, ctx: Context) -> ProtocolRun:
        return self.classify(ctx)
        yield []  # unreachable: makes run() a generator, which the runner finishes at its first step

    def classify(self, ctx: Context) -> Verdict:
        s = ctx.sample
        text = "\n".join(x for x in (s.text, s.prompt, s.response, s.image_description) if x)
        found = match(self.entries, text)
        n = len(found)
        bl = self.blocklist
        ctx.transcript.meta["keyword_matches"] = found
        ctx.transcript.meta["blocklist_sha256"] = self.blocklist_sha
        label = "unsafe" if n >= bl.min_matches else "safe"
        evidence = [f"{f['category']}: {f['entry']!r} matched {f['match']!r}" for f in found]
        rationale = (f"{n} blocklist entr{'y' if n == 1 else 'ies'} matched "
                     f"(unsafe at {bl.min_matches} or more)") if n else "no blocklist entry matched"
        return Verdict(label=label, score=min(1.0, bl.weight * n), rule="keyword_blocklist", rationale=rationale,
                       evidence=evidence)
