"""The matmul CPU attention equals SDPA (float32): the function, inside a model, through the hf backend."""
from __future__ import annotations

import pytest
import torch

from agents.backends import cpu_attention as da
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
    out, weights = da.matmul_attention(_Module(), q, k, v, mask, scaling=d**-0.5)
    assert weights is None and out.shape == (b, 1, hkv * group, d)
    torch.testing.assert_close(out, _sdpa_reference(q, k, v, mask), atol=1e-5, rtol=1e-5)


def _causal_prefix_mask(b, q, p):
    mask = torch.ones(b, 1, q, p + q, dtype=torch.bool)
    mask[..., p:] = torch.ones(q, q, dtype=torch.bool).tril()
    return mask


@pytest.mark.parametrize("prefix", [0, 7])
def test_prompts_without_padding_equal_sdpa_across_blocks(prefix, monkeypatch):
    monkeypatch.setattr(da, "BLOCK", 4)  # 11 query tokens: three blocks, the last one partial
    torch.manual_seed(0)
    b, hkv, group, q, d = 2, 2, 3, 11, 8
    query = torch.randn(b, q, hkv * group, d).transpose(1, 2)  # the model's (non-contiguous) layout
    k, v = torch.randn(b, hkv, prefix + q, d), torch.randn(b, hkv, prefix + q, d)
    mask = _causal_prefix_mask(b, q, prefix) if prefix else None  # what sdpa_mask builds for each case
    sdpa = []
    import transformers.integrations.sdpa_attention as sdpa_mod

    real = sdpa_mod.sdpa_attention_forward
    monkeypatch.setattr(sdpa_mod, "sdpa_attention_forward", lambda *a, **kw: sdpa.append(1) or real(*a, **kw))
    out, _ = da.matmul_attention(_Module(), query, k, v, mask, scaling=d**-0.5)
    assert sdpa == []  # computed by the matmul path
    torch.testing.assert_close(out, _sdpa_reference(query, k, v, _causal_prefix_mask(b, q, prefix)),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", ["padded_prompt", "not_causal", "sliding_window", "static_cache_prefill"])
def test_other_prompts_go_to_sdpa(case, monkeypatch):
    seen = []
    import transformers.integrations.sdpa_attention as sdpa

    monkeypatch.setattr(sdpa, "sdpa_attention_forward", lambda *a, **kw: seen.append(a[1].shape) or ("sdpa", None))
    q, k = torch.randn(1, 6, 4, 8), torch.randn(1, 2, 4, 8)
    mask, kw = None, {}
    if case == "padded_prompt":
        mask = _causal_prefix_mask(1, 4, 0)
        mask[..., 0] = False  # a left pad inside the prompt
    elif case == "not_causal":
        kw["is_causal"] = False
    elif case == "sliding_window":
        kw["sliding_window"] = 2
    else:  # an empty static cache: more key slots than queries, no mask
        k = torch.randn(1, 2, 9, 8)
    assert da.matmul_attention(_Module(), q, k, k, mask, **kw)[0] == "sdpa" and len(seen) == 1


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
def test_backend_outputs_equal_sdpa_and_runs_through_matmul(which, prefill, request, monkeypatch):
    path = request.getfixturevalue(which)
    reqs = [req(i, t, max_tokens=12) for i, t in enumerate(TEXTS)]
    matmul = HFBackend(HFBackendConfig(model=str(path), batch_size=4, prefill=prefill))  # auto on the CPU
    assert matmul.attention == da.NAME and matmul.model.config._attn_implementation == da.NAME
    calls = []
    from transformers import AttentionInterface

    def counting(module, query, *a, **kw):
        calls.append(query.shape[2])
        return da.matmul_attention(module, query, *a, **kw)

    import transformers.integrations.sdpa_attention as sdpa_mod

    real, to_sdpa = sdpa_mod.sdpa_attention_forward, []
    monkeypatch.setattr(sdpa_mod, "sdpa_attention_forward", lambda *a, **kw: to_sdpa.append(1) or real(*a, **kw))
    AttentionInterface.register(da.NAME, counting)
    try:
        got = matmul.generate(reqs)
    finally:
        da.register()
    assert calls.count(1) >= 11 * 2 and any(n > 1 for n in calls)  # decode steps x layers; the prompt too
    # per-row prefill: every prompt is padding-free, so nothing falls back; a padded batch prompt does
    assert (len(to_sdpa) == 0) if prefill == "per_row" else (len(to_sdpa) == 2)  # 2 layers, one prompt
    model = HFBackend(HFBackendConfig(model=str(path), batch_size=4, prefill=prefill, attention="model"))
    assert model.attention == "model" and model.model.config._attn_implementation == "sdpa"
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
            assert da.use_matmul_attention(m)
        with torch.inference_mode():
            out = m.generate(**enc, max_new_tokens=6, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
        logits[impl] = torch.stack(out.logits)
    torch.testing.assert_close(logits["matmul"], logits["sdpa"], atol=1e-4, rtol=1e-4)


def test_models_not_on_sdpa_keep_their_attention(tiny_gqa_llama):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_gqa_llama, attn_implementation="eager")
    assert da.use_matmul_attention(m) is False and m.config._attn_implementation == "eager"


def test_short_shared_prefixes_are_reused_under_matmul_only(tiny_llama):
    """The matmul attention continues a cached prefix at no extra cost, so any shared prefix is reused;
    under SDPA only prefixes covering a third of the prompt are (agents/backends/hf.py MIN_REUSE_FRACTION)."""
    first, second = req(0, "alpha " * 60, max_tokens=6), req(1, "omega " * 60, max_tokens=6)
    out = {}
    for attention in ("matmul", "model"):
        be = HFBackend(HFBackendConfig(model=str(tiny_llama), prefill="per_row", attention=attention))
        out[attention] = [be.generate([r])[0].text for r in (first, second)]
        stats = be.prefix_cache_stats()
        assert stats["lookups"] == 2
        assert stats["hits"] == (1 if attention == "matmul" else 0), attention
        if attention == "matmul":
            assert 0 < stats["reused_tokens"] < 61 // 3  # the chat template and system prompt only
    assert out["matmul"] == out["model"]
