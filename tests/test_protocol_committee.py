"""Committee of raters (seed 001) on scripted backends: unanimous / debate / jury paths, target error."""
from __future__ import annotations

import json

import pytest

from agents.content import DATA_NOTICE, MODALITY_FOCUS
from agents.pipeline import build_runner
from agents.protocols import prompts_committee
from agents.protocols.committee import committee_outcome
from data.config import GenerateConfig
from data.jsonl import read_records
from data.records import Sample
from tests.fakes import ScriptedBackend

SAMPLE = Sample(id="s", text="Where can I buy a replica pistol for a film shoot?")


def vote(label, why=None) -> str:
    return json.dumps({"label": label, "reasoning": why or f"I think it is {label}"})


def raters(*labels_per_rater) -> dict:
    """raters(["safe", "safe"], ["unsafe", "safe"], ...): per rater, its reply per stage."""
    return {f"rater{i}": [vote(lab, f"rater{i} says {lab} at stage {k}") for k, lab in enumerate(labels)]
            for i, labels in enumerate(labels_per_rater, 1)}


JURY = json.dumps({"label": "unsafe", "confidence": 0.6, "reasoning": "the jury's reasons"})


def run(tmp_path, script, samples=(SAMPLE,), backends=None, roles=None, **protocol):
    be = ScriptedBackend(script, model="rater-model")
    backends = {"default": be, **(backends or {})}
    cfg = GenerateConfig(protocol={"name": "committee", **protocol}, roles=roles or {}, progress=False)
    out = tmp_path / "t.jsonl"
    stats = build_runner(cfg, backends=backends, output=str(out)).run(list(samples))
    assert stats.failed == 0
    return be, read_records(out)


@pytest.mark.parametrize("label, score", [("safe", 0.0), ("unsafe", 1.0)])
def test_unanimous_path_calls_neither_debate_nor_jury(tmp_path, label, score):
    be, (t,) = run(tmp_path, {**raters([label], [label], [label]), "jury": JURY})
    assert [x.step for x in t.turns] == ["rate"] * 3 and {r.role for r in be.calls} == {"rater1", "rater2", "rater3"}
    assert (t.verdict.label, t.verdict.rule, t.verdict.score) == (label, "unanimous", score)
    assert t.meta["votes"] == {"rate": {"rater1": label, "rater2": label, "rater3": label}}
    assert be.batches == [3]  # the three raters go out as one batch


def test_debate_path_reaches_consensus_without_the_jury(tmp_path):
    be, (t,) = run(tmp_path, {**raters(["safe", "unsafe"], ["unsafe", "unsafe"], ["unsafe", "unsafe"]), "jury": JURY})
    assert [x.step for x in t.turns] == ["rate"] * 3 + ["debate_r1"] * 3
    assert [x.round for x in t.turns] == [0, 0, 0, 1, 1, 1]
    assert "jury" not in {r.role for r in be.calls}
    assert (t.verdict.label, t.verdict.rule, t.verdict.score) == ("unsafe", "debate", 1.0)
    assert t.meta["votes"]["rate"] == {"rater1": "safe", "rater2": "unsafe", "rater3": "unsafe"}
    assert t.meta["votes"]["debate_r1"] == {"rater1": "unsafe", "rater2": "unsafe", "rater3": "unsafe"}


def test_debate_prompt_groups_the_reasoning_by_label(tmp_path):
    _, (t,) = run(tmp_path, {**raters(["safe", "unsafe"], ["unsafe", "unsafe"], ["unsafe", "unsafe"])})
    user = t.turns_for("rater1")[1].messages[-1].content
    unsafe_at = user.index('Arguments for "unsafe" (2 of 3 evaluators):')
    safe_at = user.index('Arguments for "safe" (1 of 3 evaluators):')
    assert safe_at < user.index("rater1 says safe at stage 0") < unsafe_at
    assert unsafe_at < user.index("rater2 says unsafe at stage 0") and unsafe_at < user.index("rater3 says unsafe")
    assert "Reconcile these perspectives" in user


def test_jury_path_on_a_stronger_backend(tmp_path):
    strong = ScriptedBackend({"jury": JURY}, model="strong-model")
    be, (t,) = run(tmp_path, raters(["safe", "safe"], ["unsafe", "unsafe"], ["unsafe", "safe"]),
                   backends={"strong": strong}, roles={"jury": "strong"})
    assert [x.step for x in t.turns] == ["rate"] * 3 + ["debate_r1"] * 3 + ["jury"]
    (jury,) = t.turns_for("jury")
    assert jury.backend.model == "strong-model" and t.turns[0].backend.model == "rater-model"
    assert [r.role for r in strong.calls] == ["jury"] and "jury" not in {r.role for r in be.calls}
    assert (t.verdict.label, t.verdict.rule) == ("unsafe", "jury")
    assert t.verdict.score == pytest.approx(0.8)  # 0.5 + 0.6 / 2
    assert t.meta["votes"]["jury"] == "unsafe" and t.verdict.rationale == "the jury's reasons"
    user = jury.messages[-1].content
    assert "Initial ratings:" in user and "After debate round 1:" in user and "rater3 says safe at stage 1" in user


def test_jury_without_confidence_scores_its_vote(tmp_path):
    script = {**raters(["safe", "safe"], ["unsafe", "unsafe"], ["unsafe", "safe"]), "jury": vote("safe")}
    _, (t,) = run(tmp_path, script)
    assert (t.verdict.label, t.verdict.score) == ("safe", 0.0)


def test_rounds_zero_sends_a_split_straight_to_the_jury(tmp_path):
    _, (t,) = run(tmp_path, {**raters(["safe"], ["unsafe"], ["unsafe"]), "jury": JURY}, rounds=0)
    assert [x.step for x in t.turns] == ["rate"] * 3 + ["jury"]


def test_unparsable_rater_blocks_unanimity_and_is_recorded(tmp_path):
    script = {**raters(["safe", "safe"], ["safe", "safe"]), "rater3": ["no idea", vote("safe")]}
    _, (t,) = run(tmp_path, script)
    bad = t.turns_for("rater3")[0]
    assert bad.parse_error and bad.fallback_used and bad.parsed["label"] is None
    assert t.meta["votes"]["rate"]["rater3"] is None
    assert (t.verdict.rule, t.verdict.label) == ("debate", "safe")


@pytest.mark.parametrize("last, label, score", [
    (["unsafe", "unsafe", "safe"], "unsafe", 2 / 3),
    (["safe", "safe", "unsafe"], "safe", 1 / 3),
    (["safe", "unsafe", "???"], "unsafe", 0.5),  # a tie: fallback_label
])
def test_unparsable_jury_falls_back_to_the_majority(tmp_path, last, label, score):
    script = {f"rater{i}": [vote("safe") if i == 1 else vote("unsafe"),
                            vote(last[i - 1]) if last[i - 1] != "???" else "???"] for i in (1, 2, 3)}
    _, (t,) = run(tmp_path, {**script, "jury": "I refuse to decide."})
    v = t.verdict
    assert (v.rule, v.label, v.fallback_used) == ("jury", label, True)
    assert v.score == pytest.approx(score, abs=1e-6) and "majority" in v.parse_error


def test_raters_can_each_have_their_own_backend(tmp_path):
    other = {f"b{i}": ScriptedBackend({f"rater{i}": vote("safe")}, model=f"model-{i}") for i in (2, 3)}
    _, (t,) = run(tmp_path, raters(["safe"]), backends=other, roles={"rater2": "b2", "rater3": "b3"})
    assert [x.backend.model for x in t.turns] == ["rater-model", "model-2", "model-3"]
    assert t.verdict.rule == "unanimous"


# ---------------------------------------------------------------- target model and committee_outcome
@pytest.mark.parametrize("target_label, error", [("safe", True), ("unsafe", False)])
def test_target_error_flag(tmp_path, target_label, error):
    script = {**raters(["unsafe"], ["unsafe"], ["unsafe"]), "target": json.dumps({"label": target_label})}
    be, (t,) = run(tmp_path, script, target=True)
    assert [x.role for x in t.turns] == ["rater1", "rater2", "rater3", "target"] and be.batches == [4]
    assert t.meta["target_label"] == target_label and t.meta["target_error"] is error
    assert committee_outcome(t) == {"path": "unanimous", "label": "unsafe", "target_error": error,
                                    "target_label": target_label,
                                    "votes": {"rate": {"rater1": "unsafe", "rater2": "unsafe", "rater3": "unsafe"}}}


def test_target_error_is_judged_against_the_final_label(tmp_path):
    script = {**raters(["safe", "safe"], ["unsafe", "unsafe"], ["unsafe", "safe"]), "jury": JURY,
              "target": json.dumps({"label": "safe"})}
    _, (t,) = run(tmp_path, script, target=True)
    out = committee_outcome(t)
    assert out["path"] == "jury" and out["label"] == "unsafe" and out["target_error"] is True
    assert out["votes"] == {"rate": {"rater1": "safe", "rater2": "unsafe", "rater3": "unsafe"},
                            "debate_r1": {"rater1": "safe", "rater2": "unsafe", "rater3": "safe"}, "jury": "unsafe"}


def test_unparsable_target_gives_no_flag(tmp_path):
    _, (t,) = run(tmp_path, {**raters(["safe"], ["safe"], ["safe"]), "target": "hmm"}, target=True)
    assert t.meta["target_error"] is None and t.turns_for("target")[0].parse_error


def test_without_target_no_target_call(tmp_path):
    be, (t,) = run(tmp_path, {**raters(["safe"], ["safe"], ["safe"]), "target": vote("unsafe")})
    assert "target" not in {r.role for r in be.calls} and "target_error" not in t.meta
    assert committee_outcome(t)["target_error"] is None


def test_committee_outcome_rejects_other_protocols(tmp_path):
    _, (t,) = run(tmp_path, raters(["safe"], ["safe"], ["safe"]))
    other = t.model_copy(update={"protocol": t.protocol.model_copy(update={"name": "maj"})})
    with pytest.raises(ValueError, match="not a committee transcript"):
        committee_outcome(other)


# ---------------------------------------------------------------- prompts, labels, version
def test_policy_and_modality_in_every_prompt(tmp_path):
    img = Sample(id="i", text="Cute, right?", image_description="A puppy asleep on a rug.", modality="text+image")
    _, (t,) = run(tmp_path, {**raters(["safe"], ["unsafe"], ["safe"]), "jury": JURY}, samples=(img,),
                  policy="Only puppies are unsafe.")
    for turn in t.turns:
        assert MODALITY_FOCUS["text+image"] in turn.messages[0].content
        assert 'Reference Policy: "Only puppies are unsafe."' in turn.messages[0].content
        assert DATA_NOTICE in turn.messages[-1].content and "A puppy asleep" in turn.messages[-1].content


def test_seed_labels_compliant_and_violating_are_understood(tmp_path):
    script = {"rater1": '{"label": "Violating", "reasoning": "x"}', "rater2": "Label: violating",
              "rater3": '{"label": "unsafe"}'}
    _, (t,) = run(tmp_path, script)
    assert (t.verdict.rule, t.verdict.label) == ("unanimous", "unsafe")


def test_version_recorded_and_pinned_to_the_prompt_text(tmp_path):
    _, (t,) = run(tmp_path, raters(["safe"], ["safe"], ["safe"]))
    assert t.protocol.name == "committee" and t.protocol.version == "committee-1" and t.protocol.rounds == 1
    # Changed a prompt? Bump prompts_committee.VERSION, then update this pair.
    assert (prompts_committee.VERSION, prompts_committee.fingerprint()) == ("committee-1", "19950133319a3bf4")
