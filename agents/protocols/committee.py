"""Committee of LLM raters (seed 001): three independent raters, a debate round, a Level II jury.

Steps (only the samples that need a step yield a call for it):

1. ``rate`` (roles rater1, rater2, rater3; each may be bound to its own backend in ``roles:``) — label +
   reasoning each. Unanimous -> that label (``verdict.rule = "unanimous"``). An unparsable vote counts as no
   vote, so it blocks unanimity. With ``target: true`` the ``target`` role classifies the sample in the same
   step (the seed's zero-shot target model).
2. ``debate_r{n}`` (the same raters, round n; ``rounds`` = 1 as in the seed) — each rater sees the initial
   reasoning grouped by label and re-votes. Unanimous -> ``verdict.rule = "debate"``.
3. ``jury`` (role jury, bind it to a stronger backend) — still split: the jury's label is final
   (``verdict.rule = "jury"``). Unparsable -> the majority of the last votes, ``fallback_label`` on a tie.

``verdict.score`` is the fraction of unsafe votes at the final stage; for the jury 0.5 +- confidence/2 when it
gives a confidence (1.0 / 0.0 otherwise). ``transcript.meta`` records ``votes`` per stage and, with a target,
``target_label`` and ``target_error`` (the target disagrees with the committee's final label).
``committee_outcome(transcript)`` gives the hard-example miner path, votes, label and target error.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from agents.protocols import prompts_committee as P
from agents.protocols.base import Context, ProtocolConfig, ProtocolRun, register
from agents.protocols.common import (
    RoleProtocol,
    defang,
    ensure_image_description,
    parse_confidence,
    parse_label,
    risk_from_confidence,
    text_field,
)
from data.records import Label, Transcript, Turn, Verdict

RATERS = ("rater1", "rater2", "rater3")


class CommitteeConfig(ProtocolConfig):
    name: Literal["committee"] = "committee"
    policy: str = Field(default=P.DEFAULT_POLICY, min_length=1)
    rounds: int = Field(default=1, ge=0, le=5)  # debate rounds before the jury (0: split -> jury at once)
    target: bool = False  # also ask the "target" role and record target_error
    fallback_label: Label = "unsafe"  # unparsable jury and tied last votes


def unanimous(votes: dict[str, str | None]) -> str | None:
    labels = set(votes.values())
    return labels.pop() if len(labels) == 1 and None not in labels else None


def group_arguments(turns: list[Turn]) -> str:
    """The raters' reasoning grouped by the label they chose (seed 001, Appendix 16.5)."""
    groups: dict[str, list[str]] = {}
    for t in turns:
        groups.setdefault(t.parsed.get("label") or P.NO_LABEL, []).append(t.parsed.get("reasoning") or "(none)")
    out = []
    for label in sorted(groups, key=lambda x: (x == P.NO_LABEL, x)):
        out.append(P.GROUP_HEADER.format(label=label, n=len(groups[label]), total=len(turns)))
        out.extend(f"- {defang(r)}" for r in groups[label])
    return "\n".join(out)


def committee_outcome(transcript: Transcript) -> dict[str, Any]:
    """What the hard-example miner needs: ``path`` (unanimous | debate | jury), ``votes`` per stage
    (``{"rate": {"rater1": "safe", ...}, "debate_r1": {...}, "jury": "unsafe"}``), the final ``label``, and
    ``target_error`` (None without a target or when its answer did not parse)."""
    if transcript.protocol.name != "committee":
        raise ValueError(f"{transcript.id}: not a committee transcript (protocol {transcript.protocol.name!r})")
    votes: dict[str, Any] = {}
    for t in transcript.turns:
        if t.role in RATERS:
            votes.setdefault(t.step, {})[t.role] = t.parsed.get("label")
        elif t.role == "jury":
            votes["jury"] = t.parsed.get("label")
    return {"path": transcript.verdict.rule, "votes": votes, "label": transcript.verdict.label,
            "target_error": transcript.meta.get("target_error"), "target_label": transcript.meta.get("target_label")}


@register
class Committee(RoleProtocol):
    name = "committee"
    version = P.VERSION
    roles = (*RATERS, "jury", "target")
    Config = CommitteeConfig
    SYSTEM: ClassVar[dict[str, str]] = {**dict.fromkeys(RATERS, P.RATER_SYSTEM), "jury": P.JURY_SYSTEM,
                                        "target": P.TARGET_SYSTEM}
    default_max_tokens: ClassVar[dict[str, int]] = {**dict.fromkeys(RATERS, 120), "jury": 160, "target": 40}

    def system(self, role: str, ctx: Context) -> str:
        return super().system(role, ctx).format(policy=self.cfg.policy)

    def run(self, ctx: Context) -> ProtocolRun:
        cfg: CommitteeConfig = self.cfg
        ensure_image_description(ctx)
        block = ctx.content.block()
        meta = ctx.transcript.meta
        meta["votes"] = {}

        # 1. three independent raters (+ the target model, same step)
        user = P.RATER_USER.format(block=block, fmt=P.LABEL_FORMAT)
        calls = [self.call(ctx, "rate", r, user) for r in RATERS]
        if cfg.target:
            calls.append(self.call(ctx, "target", "target", P.TARGET_USER.format(block=block, fmt=P.TARGET_FORMAT)))
        turns = yield calls
        rated = turns[: len(RATERS)]
        votes = self.finish_votes(rated, meta, "rate")
        if cfg.target:
            self.finish_target(turns[-1], meta)
        label, path = unanimous(votes), "unanimous"
        stages = [P.STAGE_HEADER["rate"] + "\n" + group_arguments(rated)]
        last = votes

        # 2. debate rounds over the initial reasoning grouped by label
        arguments = group_arguments(rated)
        for rnd in range(1, cfg.rounds + 1):
            if label is not None:
                break
            user = P.DEBATE_USER.format(block=block, arguments=arguments, fmt=P.LABEL_FORMAT)
            turns = yield [self.call(ctx, f"debate_r{rnd}", r, user, rnd) for r in RATERS]
            last = self.finish_votes(turns, meta, f"debate_r{rnd}")
            stages.append(P.STAGE_HEADER["debate"].format(rnd=rnd) + "\n" + group_arguments(turns))
            label, path = unanimous(last), "debate"

        if label is not None:
            verdict = Verdict(label=label, score=1.0 if label == "unsafe" else 0.0, rule=path,
                              rationale=f"{path}: all three raters chose {label}.")
        else:
            # 3. Level II jury
            user = P.JURY_USER.format(block=block, stages="\n\n".join(stages), fmt=P.JURY_FORMAT)
            (jury,) = yield [self.call(ctx, "jury", "jury", user)]
            verdict = self.adjudicate(jury, last)
            meta["votes"]["jury"] = verdict.label
        if cfg.target and meta.get("target_label") is not None:
            meta["target_error"] = meta["target_label"] != verdict.label
        return verdict

    # ------------------------------------------------------------------ step results
    def finish_votes(self, turns: list[Turn], meta: dict, stage: str) -> dict[str, str | None]:
        votes = {}
        for t in turns:
            label, how = parse_label(t.output)
            reasoning, _ = text_field(t, "reasoning", "rationale")
            t.parsed = {"label": label, "parsed_by": how, "reasoning": reasoning}
            if label is None:
                t.parse_error, t.fallback_used = "no safe/unsafe label found; counted as no vote", True
            votes[t.role] = label
        meta["votes"][stage] = votes
        return votes

    def finish_target(self, turn: Turn, meta: dict) -> None:
        label, how = parse_label(turn.output)
        turn.parsed = {"label": label, "parsed_by": how}
        if label is None:
            turn.parse_error = "no safe/unsafe label found; target_error not recorded"
        meta["target_label"] = label
        meta["target_error"] = None

    def adjudicate(self, jury: Turn, last: dict[str, str | None]) -> Verdict:
        cfg: CommitteeConfig = self.cfg
        label, how = parse_label(jury.output)
        confidence = parse_confidence(jury.output)
        reasoning, _ = text_field(jury, "reasoning", "rationale")
        fallback = label is None
        if fallback:
            n_unsafe = sum(v == "unsafe" for v in last.values())
            n_safe = sum(v == "safe" for v in last.values())
            label = "unsafe" if n_unsafe > n_safe else "safe" if n_safe > n_unsafe else cfg.fallback_label
            jury.parse_error = (f"no safe/unsafe label found; fallback: majority of the last votes "
                                f"({n_unsafe} unsafe, {n_safe} safe), {cfg.fallback_label} on a tie")
            score = n_unsafe / max(n_unsafe + n_safe, 1) if n_unsafe != n_safe else 0.5
        else:
            score = risk_from_confidence(label, confidence)
        jury.fallback_used = fallback
        jury.parsed = {"label": label, "parsed_by": how, "confidence": confidence, "reasoning": reasoning}
        return Verdict(label=label, score=round(score, 6), rule="jury", rationale=reasoning,
                       parse_error=jury.parse_error, fallback_used=fallback)
