"""The hard-example miner: rewards, parent sampling, the cycle plan, the loop, resume, pools, few-shot."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from agents.embedder import FunctionEmbedder
from agents.fewshot import few_shot_block, few_shot_examples
from agents.miner import (
    ATTEMPTS,
    NO_IMAGE,
    Attempt,
    MineConfig,
    Miner,
    RoleCall,
    parent_weights,
    plan_cycle,
    read_memory,
    reward,
    sample_parents,
    split_kind,
)
from data.config import ConfigError, validate_config
from data.jsonl import read_records
from data.records import BackendRef, Sample
from tests.fake_embedder import NAME, hash_embed
from tests.fakes import ScriptedBackend

# slot -> what the scripted committee does with the case
BEHAVIOUR = {0: "SPLIT", 1: "TARGETERR", 2: "PLAIN", 3: "PLAIN"}


# ------------------------------------------------------------------------------------------ rewards
@pytest.mark.parametrize("outcome, expected", [
    ({"path": "unanimous", "target_error": False, "label": "safe"}, 0.0),
    ({"path": "unanimous", "target_error": True, "label": "safe"}, 0.7),
    ({"path": "unanimous", "target_error": None, "label": "safe"}, 0.0),
    ({"path": "debate", "target_error": False, "label": "unsafe"}, 1.0),
    ({"path": "jury", "target_error": False, "label": "unsafe"}, 1.0),
    ({"path": "jury", "target_error": True, "label": "unsafe"}, 1.0),  # split outranks a target error
    ({"path": None, "target_error": None, "label": None}, 0.0),
    (None, 0.0),
])
def test_reward(outcome, expected):
    assert reward(outcome) == expected


def test_split_kind():
    votes = {"rate": {"rater1": "safe", "rater2": None, "rater3": "safe"}}
    assert split_kind({"path": "debate", "votes": votes}) == "unparsed_vote"
    votes["rate"]["rater2"] = "unsafe"
    assert split_kind({"path": "jury", "votes": votes}) == "disagreement"
    assert split_kind({"path": "unanimous", "votes": votes}) is None


def _attempt(i: int, r: float, cycle: int = 1) -> Attempt:
    call = RoleCall(role="architect", backend=BackendRef(kind="x", model="x"), messages=[])
    return Attempt(id=i, cycle=cycle, slot=i, kind="novel", hypothesis=f"h{i}", architect=call, reward=r,
                   created_at="t")


def test_parent_weights_is_the_formula_and_sampling_matches_it():
    rewards = [1.0, 0.7, 0.0, 0.0, 1.0, 0.7, 0.0]
    p = parent_weights(rewards)
    expected = np.array([r + 0.01 for r in rewards]) / sum(r + 0.01 for r in rewards)
    assert np.allclose(p, expected) and p.sum() == pytest.approx(1.0)
    assert parent_weights([0.0, 0.0])[0] == pytest.approx(0.5)  # base weight: no starvation
    attempts = [_attempt(i, r) for i, r in enumerate(rewards)]
    n = 200_000
    draws = sample_parents(attempts, n, np.random.default_rng(123))
    freq = np.bincount([a.id for a in draws], minlength=len(rewards)) / n
    assert np.abs(freq - expected).max() < 0.005
    assert freq[2] > 0  # a zero-reward attempt is still drawn now and then (0.01 / 3.43 ~ 0.3 %)
    same = sample_parents(attempts, 50, np.random.default_rng(7))
    assert [a.id for a in same] == [a.id for a in sample_parents(attempts, 50, np.random.default_rng(7))]


def test_plan_novel_mutated_ratio():
    seeds = [Sample(id=f"s{i}", text=f"seed {i}", label="safe") for i in range(5)]
    cfg = MineConfig(hypotheses_per_cycle=4, seeds_per_prompt=2)
    first = plan_cycle([], seeds, cfg, 1)
    assert [s.kind for s in first] == ["novel"] * 4  # nothing to mutate yet
    prior = [_attempt(i, r) for i, r in enumerate([1.0, 0.0, 0.7, 0.0])]
    plan = plan_cycle(prior, seeds, cfg, 2)
    assert [s.kind for s in plan] == ["novel"] * 3 + ["mutated"]  # 75 / 25
    assert plan[3].parent is not None and all(len(s.seeds) == 2 for s in plan)
    assert [(s.kind, s.parent and s.parent.id, [x.id for x in s.seeds]) for s in plan] == [
        (s.kind, s.parent and s.parent.id, [x.id for x in s.seeds]) for s in plan_cycle(prior, seeds, cfg, 2)]
    odd = MineConfig(hypotheses_per_cycle=2)
    mutated = sum(s.kind == "mutated" for c in range(2, 402) for s in plan_cycle(prior, seeds, odd, c))
    assert mutated / 800 == pytest.approx(0.25, abs=0.04)  # 2 x 25 % = 0.5 per cycle, rounded stochastically


def test_config_requires_committee_with_target():
    with pytest.raises(ConfigError, match="committee"):
        validate_config({"protocol": {"name": "committee"}}, MineConfig)
    with pytest.raises(ConfigError, match="unknown key"):
        validate_config({"cycle": 3}, MineConfig)


# ------------------------------------------------------------------------------------------ the loop
def _slot(req) -> int:
    return int(re.search(r"mine-c\d+-s(\d+)", req.custom_id).group(1))


def architect(req) -> str:
    beh = BEHAVIOUR[_slot(req)]
    return json.dumps({"vulnerability_hypothesis": f"hyp-{beh}", "generation_prompt": f"write a {beh} post",
                       "text_overlay": ""})


def operator(req) -> str:
    beh = re.search(r"write a (\w+) post", req.messages[-1].content).group(1)
    return json.dumps({"text": f"a {beh} post written for {req.custom_id.split('|')[0]}", "image_description": ""})


def rater(req) -> str:
    content = req.messages[-1].content
    if "SPLIT" in content:  # rater1 and rater2 disagree, and keep disagreeing in the debate
        label = "unsafe" if req.role == "rater1" else "safe"
    else:
        label = "unsafe"
    return json.dumps({"label": label, "reasoning": f"{req.role} thinks {label}"})


def target(req) -> str:
    return json.dumps({"label": "safe" if "TARGETERR" in req.messages[-1].content else "unsafe"})


def scripted() -> ScriptedBackend:
    return ScriptedBackend({"architect": architect, "operator": operator, "rater1": rater, "rater2": rater,
                            "rater3": rater, "target": target,
                            "jury": '{"label": "unsafe", "confidence": 0.6, "reasoning": "jury"}'})


def miner_cfg(tmp_path, **kw) -> MineConfig:
    base = {"output": str(tmp_path / "mine"), "cycles": 1, "hypotheses_per_cycle": 4,
            "policy": "Be safe.\nNo harm.", "seeds": {"path": "bundled", "limit": 6}, "seeds_per_prompt": 2}
    return MineConfig(**{**base, **kw})


def test_miner_cycle_rewards_pools_and_traceability(tmp_path):
    be = scripted()
    stats = Miner(miner_cfg(tmp_path), backends={"default": be}).run()
    mem = read_memory(tmp_path / "mine")
    assert stats.cycles_run == [1] and [a.id for a in mem] == [1, 2, 3, 4]
    by_slot = {a.slot: a for a in mem}
    assert by_slot[0].outcome["path"] == "jury" and by_slot[0].reward == 1.0 and by_slot[0].pool == "hard"
    assert by_slot[0].split == "disagreement" and by_slot[1].split is None
    assert by_slot[1].outcome["path"] == "unanimous" and by_slot[1].outcome["target_error"] is True
    assert by_slot[1].reward == 0.7 and by_slot[1].pool == "hard"
    assert by_slot[2].reward == 0.0 and by_slot[2].pool == "regular"
    assert all(a.image is None and a.image_status == NO_IMAGE for a in mem)
    a = by_slot[0]
    assert a.architect.messages[0].role == "system" and "Be safe." in a.architect.messages[-1].content
    assert "<<CONTENT SEED-EXAMPLES" in a.architect.messages[-1].content and a.operator.output
    assert a.sample.text.startswith("a SPLIT post") and a.transcript_id.endswith(a.sample.id)
    hard = read_records(tmp_path / "mine" / "hard.jsonl", Sample)
    regular = read_records(tmp_path / "mine" / "regular.jsonl", Sample)
    assert (len(hard), len(regular)) == (stats.hard, stats.regular) == (2, 2)
    assert {s.label for s in hard} == {"unsafe"} and hard[0].meta["attempt_id"] in (1, 2)
    from datasets import load_from_disk

    ds = load_from_disk(str(tmp_path / "mine" / "hard_dataset"))
    assert ds.num_rows == 2 and set(ds["reward"]) == {1.0, 0.7}


def test_miner_resume_continues_numbering_without_duplicates(tmp_path):
    Miner(miner_cfg(tmp_path, cycles=1), backends={"default": scripted()}).run()
    be2 = scripted()
    stats = Miner(miner_cfg(tmp_path, cycles=2), backends={"default": be2}).run()
    mem = read_memory(tmp_path / "mine")
    assert stats.cycles_run == [2]
    assert [a.id for a in mem] == list(range(1, 9)) and [a.cycle for a in mem] == [1] * 4 + [2] * 4
    assert not [c for c in be2.calls if c.custom_id.startswith("mine-c1-")]  # cycle 1 was not redone
    kinds = [a.kind for a in mem if a.cycle == 2]
    assert kinds.count("mutated") == 1
    mutated = next(a for a in mem if a.kind == "mutated")
    assert mutated.parent_id in {1, 2, 3, 4}
    assert f"ID: {mutated.parent_id}" in mutated.architect.messages[-1].content
    # a crash in the middle of writing cycle 2: two of its four attempts made it to disk
    path = tmp_path / "mine" / ATTEMPTS
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:6]))
    stats = Miner(miner_cfg(tmp_path, cycles=2), backends={"default": scripted()}).run()
    again = read_memory(tmp_path / "mine")
    assert stats.cycles_run == [2] and stats.attempts == 2
    assert [a.id for a in again] == list(range(1, 9))
    assert sorted(a.slot for a in again if a.cycle == 2) == [0, 1, 2, 3]
    assert [a.kind for a in sorted((a for a in again if a.cycle == 2), key=lambda a: a.slot)] == kinds
    assert len({a.sample.id for a in again}) == 8
    # running again with the same target does nothing
    assert Miner(miner_cfg(tmp_path, cycles=2), backends={"default": scripted()}).run().attempts == 0


def test_image_generator_is_optional(tmp_path):
    class FakeImages:
        name = "fake-images"

        def generate(self, prompt, overlay, path):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"png")
            return path

    Miner(miner_cfg(tmp_path, hypotheses_per_cycle=1), backends={"default": scripted()},
          image_generator=FakeImages()).run()
    (a,) = read_memory(tmp_path / "mine")
    assert a.image and a.image_status == "generated by fake-images" and a.sample.modality == "text+image"


def test_few_shot_from_a_pool(tmp_path):
    pool = tmp_path / "pool.jsonl"
    texts = ["knife sharpening tips for chefs", "how to sharpen a knife to hurt someone", "banana bread recipe",
             "knife fight techniques", "gardening in spring", "chef knife reviews"]
    pool.write_text("".join(Sample(id=f"p{i}", text=t, label="unsafe" if i in (1, 3) else "safe")
                            .model_dump_json() + "\n" for i, t in enumerate(texts)))
    emb = FunctionEmbedder(hash_embed, NAME)
    got = few_shot_examples(pool, "sharpen a knife", k=4, embedder=emb)
    sims = [s for _, s in got]
    assert len(got) == 4 and sims == sorted(sims, reverse=True)
    e = hash_embed(texts)
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    q = hash_embed(["sharpen a knife"])[0]
    brute = e @ (q / np.linalg.norm(q))
    assert [s.id for s, _ in got] == [f"p{i}" for i in np.argsort(-brute, kind="stable")[:4]]
    assert sims == pytest.approx(sorted(brute, reverse=True)[:4], abs=1e-5) and "p2" not in [s.id for s, _ in got]
    assert "p1" not in [s.id for s, _ in few_shot_examples(pool, "sharpen a knife", embedder=emb, exclude_id="p1")]
    assert "p2" not in [s.id for s, _ in few_shot_examples(pool, texts[2], embedder=emb)]  # near-duplicate
    block = few_shot_block(got)
    assert block.count("Classification:") == 4 and "<<CONTENT EXAMPLE" in block
