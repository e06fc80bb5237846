"""The hf backend on a tiny random Llama: left-padded batches match one-at-a-time, adapters per role."""
from __future__ import annotations

import pytest

from agents.backends.base import ChatRequest
from agents.backends.hf import HFBackend
from data.config import HFBackendConfig
from data.records import Message


def req(i: int, text: str, role: str = "strict", max_tokens: int = 8) -> ChatRequest:
    return ChatRequest(custom_id=f"x|s|{role}|0|{i}", role=role, max_tokens=max_tokens,
                       messages=[Message(role="system", content="Judge."), Message(role="user", content=text)])


TEXTS = ["short", "a somewhat longer prompt with more words in it", "mid length prompt here", "x " * 40]


def test_batched_left_padding_matches_sequential(tiny_llama):
    be = HFBackend(HFBackendConfig(model=str(tiny_llama), batch_size=4))
    reqs = [req(i, t) for i, t in enumerate(TEXTS)]
    batched = be.generate(reqs)
    single = [be.generate([r])[0] for r in reqs]
    assert [c.text for c in batched] == [c.text for c in single]
    assert [c.prompt_tokens for c in batched] == [c.prompt_tokens for c in single]
    assert all(c.completion_tokens > 0 for c in batched)
    assert batched[0].extra["batch_size"] == 4 and single[0].extra["batch_size"] == 1


def test_per_row_prefill_equals_batched_prefill_and_one_at_a_time(tiny_llama, monkeypatch):
    reqs = [req(i, t, max_tokens=16) for i, t in enumerate(TEXTS)]
    per_row = HFBackend(HFBackendConfig(model=str(tiny_llama), batch_size=4, prefill="per_row"))
    calls = []
    orig = per_row._prefill_rows
    monkeypatch.setattr(per_row, "_prefill_rows", lambda *a: calls.append(a[0].shape) or orig(*a))
    merged = per_row.generate(reqs)
    assert calls and calls[0][0] == 4  # the merged-cache path really ran, once for the 4-row batch
    padded = HFBackend(HFBackendConfig(model=str(tiny_llama), batch_size=4, prefill="batched"),
                       model=per_row.model, tokenizer=per_row.tokenizer).generate(reqs)
    single = [per_row.generate([r])[0] for r in reqs]
    assert len(calls) == 5  # a batch of one takes the same (preallocated-cache) path
    assert [c.text for c in merged] == [c.text for c in padded] == [c.text for c in single]
    assert [c.completion_tokens for c in merged] == [c.completion_tokens for c in single]


def test_per_row_prefill_falls_back_for_sliding_window_caches(smol_tokenizer, tmp_path):
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=len(smol_tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, sliding_window=16,
                        pad_token_id=smol_tokenizer.pad_token_id, eos_token_id=smol_tokenizer.eos_token_id)
    MistralForCausalLM(cfg).save_pretrained(tmp_path / "m")
    smol_tokenizer.save_pretrained(tmp_path / "m")
    be = HFBackend(HFBackendConfig(model=str(tmp_path / "m"), batch_size=2))
    assert be._per_row_prefill_ok() is False
    assert len(be.generate([req(0, "hello"), req(1, "a longer prompt")])) == 2


def test_loading_by_local_path_and_dtype(tiny_llama):
    be = HFBackend(HFBackendConfig(model=str(tiny_llama), dtype="bfloat16", batch_size=2))
    import torch

    assert next(be.model.parameters()).dtype == torch.bfloat16
    assert be.ref.model == str(tiny_llama)
    out = be.generate([req(0, "hello"), req(1, "world")])
    assert len(out) == 2


def test_sampling_is_seeded(tiny_llama):
    cfg = HFBackendConfig(model=str(tiny_llama), temperature=1.0, seed=7)
    a = HFBackend(cfg).generate([req(0, "hello", max_tokens=12)])[0].text
    b = HFBackend(cfg).generate([req(0, "hello", max_tokens=12)])[0].text
    assert a == b


def test_role_adapters(tiny_llama, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_llama)
    lora = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    import torch

    with torch.no_grad():  # make the adapter visibly change outputs
        for n, p in lora.named_parameters():
            if "lora_" in n:
                p.mul_(50.0)
    lora.save_pretrained(tmp_path / "strict_adapter")
    be = HFBackend(HFBackendConfig(model=str(tiny_llama), adapters={"strict": str(tmp_path / "strict_adapter")}))
    plain = HFBackend(HFBackendConfig(model=str(tiny_llama)))
    assert be.ref_for("strict").adapter == str(tmp_path / "strict_adapter") and be.ref_for("loose").adapter is None
    prompt = "the same prompt for both roles"
    with_adapter = be.generate([req(0, prompt, role="strict", max_tokens=10)])[0].text
    without = be.generate([req(1, prompt, role="loose", max_tokens=10)])[0].text
    assert without == plain.generate([req(2, prompt, role="loose", max_tokens=10)])[0].text
    assert with_adapter != without
    both = be.generate([req(3, prompt, role="strict", max_tokens=10), req(4, "another prompt", role="strict",
                                                                          max_tokens=10)])
    assert both[0].text == with_adapter  # a merged-prefill batch through the adapter equals the single call


def test_unknown_model_path_fails_clearly(tmp_path):
    with pytest.raises(OSError):
        HFBackend(HFBackendConfig(model=str(tmp_path / "no-such-model")))
