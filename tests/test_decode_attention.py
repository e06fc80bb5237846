"""The matmul decode attention equals SDPA (float32), inside a model and through the hf backend."""
from __future__ import annotations

import pytest
import torch

from agents.backends import decode_attention as da
from agents.backends.hf import HFBackend
from data.config import HFBackendConfig
from tests.test_hf_backend import TEXTS, req


class _Module:
    num_key_value_groups = 3


def _sdpa_reference(q, k, v, mask):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "per_head_bool"])
def test_function_equals_sdpa(mask_kind):
    torch.manual_seed(0)
    b, hkv, group, length, d = 3, 2, 3, 17, 8
    q = torch.randn(b, hkv * group, 1, d)
    k, v = torch.randn(b, hkv, length, d), torch.randn(b, hkv, length, d)
    keep = torch.ones(b, 1, 1, length, dtype=torch.bool)
    keep[0, ..., :5] = False  # left padding of row 0
    keep[2, ..., :2] = False
    mask = {"none": None, "bool": keep,
            "float": torch.zeros(keep.shape).masked_fill(~keep, float("-inf")),
            "per_head_bool": keep.expand(b, hkv * group, 1, length).clone()}[mask_kind]
    if mask_kind == "per_head_bool":
        mask[1, 4, 0, :3] = False  # one head of one row sees less
    out, weights = da.matmul_decode_attention(_Module(), q, k, v, mask, scaling=d**-0.5)
    assert weights is None and out.shape == (b, 1, hkv * group, d)
    torch.testing.assert_close(out, _sdpa_reference(q, k, v, mask), atol=1e-5, rtol=1e-5)


def test_prompts_with_several_query_tokens_go_to_sdpa(monkeypatch):
    seen = []
    import transformers.integrations.sdpa_attention as sdpa

    monkeypatch.setattr(sdpa, "sdpa_attention_forward", lambda *a, **kw: seen.append(a[1].shape) or ("sdpa", None))
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    assert da.matmul_decode_attention(_Module(), q, k, k, None)[0] == "sdpa" and seen == [(1, 2, 4, 8)]


@pytest.fixture(scope="module")
def tiny_gqa_llama(smol_tokenizer, tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=len(smol_tokenizer), hidden_size=96, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=2048,
                      bos_token_id=smol_tokenizer.bos_token_id, eos_token_id=smol_tokenizer.eos_token_id,
                      pad_token_id=smol_tokenizer.pad_token_id)
    path = tmp_path_factory.mktemp("tiny-gqa") / "m"
    LlamaForCausalLM(cfg).save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("prefill", ["per_row", "batched"])
@pytest.mark.parametrize("which", ["tiny_llama", "tiny_gqa_llama"])
def test_backend_outputs_equal_sdpa_and_decode_runs_through_matmul(which, prefill, request, monkeypatch):
    path = request.getfixturevalue(which)
    reqs = [req(i, t, max_tokens=12) for i, t in enumerate(TEXTS)]
    matmul = HFBackend(HFBackendConfig(model=str(path), batch_size=4, prefill=prefill))  # auto on the CPU
    assert matmul.decode_attention == da.NAME and matmul.model.config._attn_implementation == da.NAME
    calls = []
    from transformers import AttentionInterface

    def counting(module, query, *a, **kw):
        calls.append(query.shape[2])
        return da.matmul_decode_attention(module, query, *a, **kw)

    AttentionInterface.register(da.NAME, counting)
    try:
        got = matmul.generate(reqs)
    finally:
        da.register()
    assert calls.count(1) >= 11 * 2 and any(n > 1 for n in calls)  # decode steps x layers; the prompt too
    model = HFBackend(HFBackendConfig(model=str(path), batch_size=4, prefill=prefill, decode_attention="model"))
    assert model.decode_attention == "model" and model.model.config._attn_implementation == "sdpa"
    ref = model.generate(reqs)
    assert [c.text for c in got] == [c.text for c in ref]
    assert [c.completion_tokens for c in got] == [c.completion_tokens for c in ref]


def test_decode_logits_equal_sdpa_on_a_left_padded_batch(tiny_gqa_llama):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_gqa_llama)
    tok.padding_side = "left"
    enc = tok(["a short one", "a much longer prompt with many more words than the first"], return_tensors="pt",
              padding=True)
    logits = {}
    for impl in ("sdpa", "matmul"):
        m = AutoModelForCausalLM.from_pretrained(tiny_gqa_llama, dtype=torch.float32).eval()
        if impl == "matmul":
            assert da.use_matmul_decode(m)
        with torch.inference_mode():
            out = m.generate(**enc, max_new_tokens=6, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
        logits[impl] = torch.stack(out.logits)
    torch.testing.assert_close(logits["matmul"], logits["sdpa"], atol=1e-4, rtol=1e-4)


def test_models_not_on_sdpa_keep_their_attention(tiny_gqa_llama):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_gqa_llama, attn_implementation="eager")
    assert da.use_matmul_decode(m) is False and m.config._attn_implementation == "eager"
