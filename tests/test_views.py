"""Training views replay the exact teacher messages; trl's chat template renders them."""
from __future__ import annotations

import json

from agents.pipeline import build_runner
from data.config import GenerateConfig
from data.jsonl import read_records
from data.records import Sample
from data.views import arbiter_examples, role_dataset, role_examples
from tests.fakes import ScriptedBackend


def test_role_and_arbiter_views(tmp_path, smol_tokenizer):
    script = {"supporter": "brief", "strict": [json.dumps({"argument": "a", "risk_score": 0.9}), "no score"],
              "loose": json.dumps({"argument": "b", "risk_score": 0.2}),
              "arbiter": json.dumps({"benign_context_verified": False, "concrete_violation": True, "final_score": 0.8})}
    be = ScriptedBackend(script)
    samples = [Sample(id="u", text="bad request", label="unsafe"), Sample(id="s", text="fine", label="safe")]
    out = tmp_path / "t.jsonl"
    build_runner(GenerateConfig(protocol={"name": "aetheria"}, progress=False), backends={"default": be},
                 output=str(out)).run(samples)
    ts = read_records(out)
    strict = role_examples(ts, "strict")
    assert len(strict) == 2  # round 2 of each sample had a parse error and is skipped
    sent = [r for r in be.calls if r.role == "strict"][0]
    assert strict[0]["prompt"] == [m.model_dump(exclude={"images"}) for m in sent.messages]  # exact replay
    assert len(role_examples(ts, "strict", skip_parse_errors=False)) == 4
    arb = arbiter_examples(ts)
    assert [json.loads(r["completion"][0]["content"])["label"] for r in arb] == ["unsafe", "unsafe"]
    assert len(arbiter_examples(ts, correct_only=True)) == 1  # the safe sample was judged unsafe
    ds = role_dataset(out, "loose")
    text = smol_tokenizer.apply_chat_template(ds[0]["prompt"] + ds[0]["completion"], tokenize=False)
    assert "bad request" in text and '"risk_score": 0.2' in text
