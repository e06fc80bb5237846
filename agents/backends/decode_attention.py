"""Single-token decode attention as two batched matmuls over the key/value heads (CPU decode).

Why: on a CPU, a batch decoding together spends most of each step in attention over the KV cache
(SmolLM2 bf16, 16 rows x ~1.3k cached tokens: 71% of an 81 ms step in SDPA's CPU flash kernel, which runs
its 3-query GQA groups at a fraction of memory bandwidth). Two plain matmuls per layer,
``softmax(q K^T * scale + mask) V`` with each KV head's query group packed as the rows of one small
matrix, read the cache once each and halve that time. Measured side by side by
``scripts/bench_decode_attention.py``.

Numerics: the same as transformers' ``eager`` attention (scores in the model's dtype, softmax in float32,
probabilities cast back for the value product), without eager's ``repeat_kv`` copies. SDPA's kernel keeps
the scores in float32 instead; on SmolLM2 bf16 the two are equally close to a float32 reference (the
benchmark script prints both errors). Prompts (more than one query token) still go through SDPA.

It is registered with transformers' ``AttentionInterface`` under ``NAME`` (with SDPA's mask builder) and
chosen per model by ``use_matmul_decode``; nothing global changes for models that do not opt in.
"""
from __future__ import annotations

NAME = "tribunal_matmul_decode"


def matmul_decode_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                            is_causal=None, **kwargs):
    """transformers attention function: (B, Hq, 1, D) queries against (B, Hkv, L, D) keys and values."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    special = any(kwargs.get(k) is not None for k in ("softcap", "position_bias", "s_aux", "sinks"))
    if query.shape[2] != 1 or dropout or special or not isinstance(attention_mask, (torch.Tensor, type(None))):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    b, hq, _, d = query.shape
    hkv = key.shape[1]
    group = hq // hkv
    q = query.reshape(b, hkv, group, d)  # the heads sharing a KV head are consecutive (repeat_kv's order)
    scores = torch.matmul(q, key.transpose(-1, -2)).float()  # (B, Hkv, group, L)
    scores.mul_(scaling if scaling is not None else d**-0.5)
    if attention_mask is not None:
        mask = attention_mask
        if mask.shape[1] != 1:  # a per-head mask: (B, Hq, 1, L) -> (B, Hkv, group, L)
            mask = mask.reshape(mask.shape[0], hkv, group, mask.shape[-1])
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, float("-inf"))
        else:
            scores.add_(mask)
    probs = scores.softmax(-1).to(value.dtype)
    out = torch.matmul(probs, value)  # (B, Hkv, group, Dv)
    return out.reshape(b, hq, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def register() -> str:
    """Make ``NAME`` known to transformers (idempotent); returns it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, matmul_decode_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def use_matmul_decode(model) -> bool:
    """Switch an SDPA model to ``NAME``; models on another implementation (eager, flash, flex) keep it.
    Returns whether the switch was made."""
    if getattr(model.config, "_attn_implementation", None) not in ("sdpa", NAME):
        return False
    try:
        model.set_attn_implementation(register())
    except (ValueError, ImportError):  # a model class that refuses custom attention functions keeps its own
        return False
    return True
