"""AAM, Adversarial Agent Moderation (seed 002): analyst -> advocate / defender rounds -> judge.

Steps (only the samples that need a step yield a call for it):

1. ``analyze`` (role analyst) — JSON risk points ``[{"risk", "evidence", "severity"}]`` and no verdict. Every
   ``evidence`` must be a verbatim substring of the content the analyst saw (checked after whitespace
   normalisation, one content field at a time); each point gets ``verbatim: true|false`` and the turn's
   ``parsed["evidence_violations"]`` counts the failures (also ``transcript.meta["evidence_violations"]``).
   Unverified quotes stay in the court record, marked as such.
2. ``route: analyst_gate`` (optional; default ``always_slow``) — a clean forensic scan (parsed, no verified
   risk point) passes at once (``verdict.rule = "fast_path_pass"``): the seed's fast lane in front of the
   expensive debate.
3. ``debate_r{n}_advocate`` / ``debate_r{n}_defender`` for ``rounds`` rounds (1, as in the seed's orchestrator).
   Sycophancy guard: a defender reply that concedes (``detect_concession``) is re-asked with a stronger
   instruction, at most ``max_reasks`` times (``Call.attempt`` 1, 2, ...); every attempt is kept; the last
   one enters the court record.
4. ``judge`` — PASS / REVIEW / DELETE with reasons and a confidence. Labels: PASS -> safe, DELETE -> unsafe,
   REVIEW -> ``review_as`` (default ``review``). Score: 0.5 -/+ confidence/2 for PASS / DELETE (0.0 / 1.0
   without a confidence), 0.5 for REVIEW. No decision found -> ``judge_fallback`` (REVIEW: a human looks).
"""
from __future__ import annotations

import json
import re
from typing import ClassVar, Literal

from pydantic import Field

from agents.parsing import extract_json, parse_choice, parse_str, parse_str_list
from agents.protocols import prompts_aam as P
from agents.protocols.base import Context, ProtocolConfig, ProtocolRun, register
from agents.protocols.common import (
    RoleProtocol,
    defang,
    ensure_image_description,
    parse_confidence,
    risk_from_confidence,
    text_field,
)
from data.records import Message, Turn, Verdict

Decision = Literal["PASS", "REVIEW", "DELETE"]
_CONCESSION_RES = [(name, re.compile(p, re.IGNORECASE)) for name, p in P.CONCESSION_PATTERNS]
_CUES_BEFORE = re.compile(P.CUES_BEFORE, re.IGNORECASE)
_CUES_AFTER = re.compile(P.CUES_AFTER, re.IGNORECASE)
_SENTENCE = re.compile(r"[^.!?;\n。！？；]+")
_QUOTES = "\"'“”‘’«»「」『』`"


class AAMConfig(ProtocolConfig):
    name: Literal["aam"] = "aam"
    rounds: int = Field(default=1, ge=1, le=10)
    max_reasks: int = Field(default=2, ge=0, le=5)  # sycophancy guard: re-asks per defender turn
    review_as: Literal["review", "unsafe", "safe"] = "review"  # the label REVIEW maps to
    judge_fallback: Decision = "REVIEW"  # when no decision is found in the judge's reply
    route: Literal["always_slow", "analyst_gate"] = "always_slow"


# ---------------------------------------------------------------------------- parsers (pure, tested)
def concession_matches(text: str) -> list[str]:
    """Names of the concession patterns that fire in ``text`` (see ``prompts_aam.CONCESSION_PATTERNS``).

    Per sentence: a pattern match counts unless an attribution / negation cue precedes it in the sentence
    (``CUES_BEFORE``: "the Advocate claims it should be deleted") or a contrast cue follows it
    (``CUES_AFTER``: "I agree with the Advocate that the words are harsh, but ...").
    """
    names: list[str] = []
    for sent in _SENTENCE.findall(text):
        for name, rx in _CONCESSION_RES:
            m = rx.search(sent)
            hedged = m and (_CUES_BEFORE.search(sent[: m.start()]) or _CUES_AFTER.search(sent[m.end():]))
            if m and not hedged and name not in names:
                names.append(name)
    return names


def detect_concession(text: str) -> bool:
    """True when a defender reply gives in to the Advocate (the sycophancy the seed's guard blocks)."""
    return bool(concession_matches(text))


def normalise_ws(text: str) -> str:
    return " ".join(text.split())


def is_verbatim(evidence: str, fields: list[str]) -> bool:
    """``evidence`` (outer quotes stripped, whitespace normalised) is a substring of one content field."""
    quote = normalise_ws(evidence).strip(_QUOTES + " ")
    if not quote:
        return False
    return any(quote in normalise_ws(f) for f in fields if f)


def parse_risk_points(text: str) -> list | None:
    """The analyst's risk points: JSON ``{"risk_points": [...]}`` (or ``points`` / ``risks``), or a bare
    JSON list. None when neither is found."""
    obj = extract_json(text)
    if obj is not None:
        for key in ("risk_points", "points", "risks"):
            if isinstance(obj.get(key), list):
                return obj[key]
    dec = json.JSONDecoder()
    start = text.find("[")
    while start >= 0:
        try:
            value, _ = dec.raw_decode(text, start)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, list):
            return value
        start = text.find("[", start + 1)
    return None


def check_points(raw: list, fields: list[str]) -> tuple[list[dict], list[str], int]:
    """Normalise the points and check their evidence. Returns (points, violating evidence, malformed count)."""
    points, violations, malformed = [], [], 0
    for item in raw:
        if not isinstance(item, dict):
            malformed += 1
            continue
        evidence = str(item.get("evidence") or item.get("quote") or "")
        point = {"risk": str(item.get("risk") or item.get("reason") or ""), "evidence": evidence,
                 "severity": str(item.get("severity") or ""), "verbatim": is_verbatim(evidence, fields)}
        if not point["verbatim"]:
            violations.append(evidence)
        points.append(point)
    return points, violations, malformed


@register
class AAM(RoleProtocol):
    name = "aam"
    version = P.VERSION
    roles = ("analyst", "advocate", "defender", "judge")
    Config = AAMConfig
    SYSTEM = P.SYSTEM
    default_max_tokens: ClassVar[dict[str, int]] = {"analyst": 160, "advocate": 160, "defender": 160, "judge": 160}

    def run(self, ctx: Context) -> ProtocolRun:
        cfg: AAMConfig = self.cfg
        ensure_image_description(ctx)
        content = ctx.content
        block = content.block()

        # 1. analyst: risk points with verbatim evidence, no verdict
        (an,) = yield [self.call(ctx, "analyze", "analyst", P.ANALYST_USER.format(block=block, fmt=P.ANALYST_FORMAT))]
        fields = [content.prompt or content.text, content.response, content.image_description or ""]
        points, report = self.finish_analysis(an, fields)
        ctx.transcript.meta["evidence_violations"] = an.parsed["evidence_violations"]

        # 2. optional fast lane: a clean, parsed scan passes without a debate
        if cfg.route == "analyst_gate" and points == []:
            return Verdict(label="safe", score=0.0, rule="fast_path_pass", rationale=P.FAST_PATH_RATIONALE)

        # 3. advocate / defender rounds with the sycophancy guard
        record = [report]
        reasks = unresolved = 0
        for rnd in range(1, cfg.rounds + 1):
            user = P.ADVOCATE_USER.format(block=block, record="\n\n".join(record), rnd=rnd, rounds=cfg.rounds,
                                          fmt=P.ADVOCATE_FORMAT)
            (adv,) = yield [self.call(ctx, f"debate_r{rnd}_advocate", "advocate", user, rnd)]
            record.append(f"[Advocate, round {rnd}]\n{defang(self.finish_argument(adv))}")

            user = P.DEFENDER_USER.format(block=block, record="\n\n".join(record), rnd=rnd, rounds=cfg.rounds,
                                          fmt=P.DEFENDER_FORMAT)
            history: list[Message] = []
            for attempt in range(cfg.max_reasks + 1):
                if attempt == 0:
                    call = self.call(ctx, f"debate_r{rnd}_defender", "defender", user, rnd)
                else:
                    call = self.call(ctx, f"debate_r{rnd}_defender", "defender",
                                     P.REASK.format(fmt=P.DEFENDER_FORMAT), rnd, attempt=attempt, history=history)
                (d,) = yield [call]
                argument = self.finish_argument(d)
                matches = concession_matches(d.output)
                d.parsed.update(concession=bool(matches), concession_patterns=matches)
                if not matches:
                    break
                if attempt < cfg.max_reasks:
                    reasks += 1
                    history = [*call.messages[1:], Message(role="assistant", content=d.output)]
                else:
                    unresolved += 1
                    d.parsed["conceded_after_reasks"] = True
            record.append(f"[Defender, round {rnd}]\n{defang(argument)}")
        ctx.transcript.meta["sycophancy"] = {"reasks": reasks, "unresolved": unresolved}

        # 4. judge: PASS / REVIEW / DELETE
        user = P.JUDGE_USER.format(block=block, record="\n\n".join(record), fmt=P.JUDGE_FORMAT)
        (judge,) = yield [self.call(ctx, "judge", "judge", user)]
        evidence = [p["evidence"] for p in points or [] if p["verbatim"]]
        return self.adjudicate(judge, evidence)

    # ------------------------------------------------------------------ step results
    def finish_analysis(self, turn: Turn, fields: list[str]) -> tuple[list[dict] | None, str]:
        """Parse and check the risk points; returns (points or None, the report text for the court record)."""
        raw = parse_risk_points(turn.output)
        if raw is None:
            turn.parse_error, turn.fallback_used = "no risk-point JSON found; the raw notes are used as the report", True
            turn.parsed = {"risk_points": [], "n_points": 0, "evidence_violations": 0, "violations": []}
            notes = turn.output.strip() or P.NO_POINTS
            return None, f"{P.REPORT_HEADER}\n(unstructured analyst notes)\n{defang(notes)}"
        points, violations, malformed = check_points(raw, fields)
        turn.parsed = {"risk_points": points, "n_points": len(points), "evidence_violations": len(violations),
                       "violations": violations}
        problems = []
        if malformed:
            problems.append(f"{malformed} risk points were not JSON objects and were dropped")
        if violations:
            problems.append(f"{len(violations)} evidence quotes are not verbatim substrings of the content")
        turn.parse_error = "; ".join(problems) or None
        lines = [P.REPORT_HEADER] + [
            f"{i}. risk: {p['risk'] or '?'} | severity: {p['severity'] or '?'} | evidence: \"{p['evidence']}\""
            + ("" if p["verbatim"] else f" {P.UNVERIFIED}") for i, p in enumerate(points, 1)]
        return points, defang("\n".join(lines)) if points else f"{P.REPORT_HEADER}\n{P.NO_POINTS}"

    def finish_argument(self, turn: Turn) -> str:
        argument, how = text_field(turn, "argument")
        if not argument:
            argument = "(no argument given)"
            turn.parse_error, turn.fallback_used = "empty argument", True
        turn.parsed = {"argument": argument, "parsed_by": how}
        return argument

    def adjudicate(self, turn: Turn, evidence: list[str]) -> Verdict:
        cfg: AAMConfig = self.cfg
        decision, how = parse_choice(turn.output, "decision", ("PASS", "REVIEW", "DELETE"))
        confidence = parse_confidence(turn.output)
        reasons = parse_str_list(turn.output, "reasons") or [x for x in [parse_str(turn.output, "reason")] if x]
        fallback = decision is None
        if fallback:
            decision, rule = cfg.judge_fallback, f"fallback_{cfg.judge_fallback.lower()}"
            turn.parse_error = f"no PASS / REVIEW / DELETE decision found; fallback {cfg.judge_fallback}"
        else:
            rule = f"judge_{decision.lower()}"
        label = {"PASS": "safe", "DELETE": "unsafe", "REVIEW": cfg.review_as}[decision]
        score = 0.5 if decision == "REVIEW" else risk_from_confidence("unsafe" if decision == "DELETE" else "safe",
                                                                          confidence)
        turn.fallback_used = fallback
        turn.parsed = {"decision": decision, "parsed_by": how, "confidence": confidence, "reasons": reasons,
                       "label": label}
        rationale = "; ".join(reasons) or turn.output.strip()
        return Verdict(label=label, score=round(score, 6), rule=rule, rationale=rationale, evidence=evidence,
                       parse_error=turn.parse_error, fallback_used=fallback)
