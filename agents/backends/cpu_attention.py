"""Attention as batched matmuls over the key/value heads, for CPU inference (the hf backend's default there).

Why: SDPA's CPU flash kernel is slow at the two shapes a CPU debate run spends its time in.
- Decode steps (one new token per row): a batch decoding together spends most of each step reading the KV
  cache (SmolLM2 bf16, 16 rows x ~1.3k cached tokens: 71% of an 81 ms step in SDPA, whose 3-query GQA
  groups run at a fraction of memory bandwidth). Here: ``softmax(q K^T * scale + mask) V`` with each KV
  head's query group packed as the rows of one small matrix: two matmuls that read the cache once each.
- Prompts without padding (what the per-row prefill computes), fresh or continuing a cached prefix: SDPA's
  causal kernel is slower than matmuls here, and a continued prompt gets an explicit mask under which SDPA
  computes every block (~1.4x the work per token). Here: query blocks of ``BLOCK`` tokens, each against
  only the keys it can see, the same matmul-softmax-matmul.
Anything else (padding inside a prompt, sliding windows, soft-capping, attention sinks, dropout) goes to
SDPA unchanged.
Measured side by side by ``scripts/bench_cpu_attention.py``.

Numerics: those of transformers' ``eager`` attention (scores in the model's dtype, softmax in float32,
probabilities cast back for the value product), without eager's ``repeat_kv`` copies. SDPA keeps the
scores in float32; on SmolLM2 bf16 both are equally close to a float32 reference (the script prints both).

Registered with transformers' ``AttentionInterface`` under ``NAME`` (with SDPA's mask builder) and chosen
per model by ``use_matmul_attention``; nothing changes for models that do not opt in.
"""
from __future__ import annotations

import torch

NAME = "tribunal_cpu_matmul"
BLOCK = 128  # query tokens per block of a prompt (128 beat 256 and 512 on SmolLM2, 2 cores)


def _grouped(x, hkv: int):
    """(B, Hq, q, D) -> (B, Hkv, group, q, D): the heads sharing a KV head are consecutive (repeat_kv's order)."""
    b, hq, q, d = x.shape
    return x.reshape(b, hkv, hq // hkv, q, d)


def _softmax_v(scores, value, scaling, mask):
    """scores (B, Hkv, rows, L) in the model dtype -> softmax(scores * scale + mask) @ V, float32 softmax."""
    scores = scores.float().mul_(scaling)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, float("-inf"))
        else:
            scores.add_(mask)
    return torch.matmul(scores.softmax(-1).to(value.dtype), value)


def _decode(query, key, value, mask, scaling):
    b, hq, _, d = query.shape
    hkv = key.shape[1]
    q = query.reshape(b, hkv, hq // hkv, d)  # the group's queries are the rows
    if mask is not None and mask.shape[1] != 1:  # a per-head mask: (B, Hq, 1, L) -> (B, Hkv, group, L)
        mask = mask.reshape(mask.shape[0], hkv, hq // hkv, mask.shape[-1])
    out = _softmax_v(torch.matmul(q, key.transpose(-1, -2)), value, scaling, mask)  # (B, Hkv, group, Dv)
    return out.reshape(b, hq, 1, value.shape[-1]).transpose(1, 2).contiguous()


def _continues_prefix(mask, q: int, kv: int) -> bool:
    """True when ``mask`` is exactly: every row sees the whole cached prefix, then causal over the new tokens."""
    p = kv - q
    if p <= 0 or mask is None or mask.dtype != torch.bool or mask.shape[1] != 1 or mask.shape[2] != q:
        return False
    tri = torch.ones(q, q, dtype=torch.bool, device=mask.device).tril_()
    return bool(mask[..., :p].all()) and bool(torch.equal(mask[..., p:], tri.expand_as(mask[..., p:])))


def _causal_prompt(query, key, value, scaling):
    """Queries at positions p..p+q-1 against keys 0..p+q-1 (p >= 0 cached), causal; in blocks of BLOCK queries,
    each against only the keys it can see."""
    b, hq, q, d = query.shape
    hkv, kv = key.shape[1], key.shape[2]
    group, p = hq // hkv, kv - q
    qg = _grouped(query, hkv)
    out = query.new_empty(b, hkv, group, q, value.shape[-1])
    for s in range(0, q, BLOCK):
        e = min(q, s + BLOCK)
        seen = p + e  # the last query of the block sees keys [0, p + e)
        rows = qg[:, :, :, s:e].reshape(b, hkv, group * (e - s), d)
        visible = torch.arange(seen, device=query.device)[None, :] <= torch.arange(p + s, p + e,
                                                                                   device=query.device)[:, None]
        mask = visible.repeat(group, 1)  # rows are (group, query) pairs, group-major
        block = _softmax_v(torch.matmul(rows, key[:, :, :seen].transpose(-1, -2)), value[:, :, :seen], scaling, mask)
        out[:, :, :, s:e] = block.view(b, hkv, group, e - s, -1)
    return out.reshape(b, hq, q, -1).transpose(1, 2).contiguous()


def matmul_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                     is_causal=None, **kwargs):
    """transformers attention function: (B, Hq, q, D) queries, (B, Hkv, L, D) keys and values."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    special = any(kwargs.get(k) is not None for k in ("softcap", "position_bias", "s_aux", "sinks",
                                                      "sliding_window"))
    mask_ok = attention_mask is None or isinstance(attention_mask, torch.Tensor)
    if not (dropout or special) and mask_ok:
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        q, kv = query.shape[2], key.shape[2]
        if q == 1:
            return _decode(query, key, value, attention_mask, scale), None
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        fresh = attention_mask is None and q == kv and causal  # a whole prompt, no padding
        if fresh or _continues_prefix(attention_mask, q, kv):
            return _causal_prompt(query, key, value, scale), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def register() -> str:
    """Make ``NAME`` known to transformers (idempotent); returns it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, matmul_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def use_matmul_attention(model) -> bool:
    """Switch an SDPA model to ``NAME``; models on another implementation (eager, flash, flex) keep it.
    Returns whether the switch was made."""
    if getattr(model.config, "_attn_implementation", None) not in ("sdpa", NAME):
        return False
    try:
        model.set_attn_implementation(register())
    except (ValueError, ImportError):  # a model class that refuses custom attention functions keeps its own
        return False
    return True
