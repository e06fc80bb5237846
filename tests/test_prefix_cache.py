"""The hf backend's prefix cache: longest-common-prefix lookup, LRU byte budget, and outputs equal to a
full prefill (tiny random Llama, fp32)."""
from __future__ import annotations

import torch

from agents.backends.base import ChatRequest
from agents.backends.hf import HFBackend
from agents.backends.prefix_cache import PrefixCache
from data.config import HFBackendConfig
from data.records import Message


def kv(n: int, fill: float):
    return [torch.full((2, n, 4), fill)], [torch.full((2, n, 4), -fill)]


def test_lookup_returns_the_longest_common_prefix_and_its_slices():
    pc = PrefixCache(max_bytes=10**6)
    pc.store(torch.tensor([1, 2, 3, 4]), *kv(4, 1.0))
    pc.store(torch.tensor([1, 2, 9, 9, 9]), *kv(5, 2.0))
    hit = pc.lookup(torch.tensor([1, 2, 3, 7, 7]))
    assert hit.tokens == 3 and hit.keys[0].shape == (2, 3, 4) and float(hit.keys[0][0, 0, 0]) == 1.0
    assert float(hit.values[0][0, 0, 0]) == -1.0
    assert pc.lookup(torch.tensor([5, 6])) is None  # nothing in common
    assert pc.lookup(torch.tensor([1, 2, 3, 4])).tokens == 4  # an identical prompt is reused whole
    assert pc.hits == 2 and pc.reused_tokens == 7 and pc.lookups == 3
    assert pc.lookup(torch.tensor([1, 2, 3, 0, 0, 0, 0]), min_fraction=0.5) is None  # 3 of 7: too little
    assert pc.lookup(torch.tensor([1, 2, 3, 0, 0]), min_fraction=0.5).tokens == 3


def test_lru_evicts_beyond_the_byte_budget():
    one = 2 * 2 * 4 * 4 * 4  # keys + values, (2 heads, 4 tokens, 4 dims), fp32
    pc = PrefixCache(max_bytes=2 * one)
    pc.store(torch.tensor([1, 1, 1, 1]), *kv(4, 1.0))
    pc.store(torch.tensor([2, 2, 2, 2]), *kv(4, 2.0))
    assert pc.lookup(torch.tensor([1, 1, 0])).tokens == 2  # touching [1,...] makes [2,...] the oldest
    pc.store(torch.tensor([3, 3, 3, 3]), *kv(4, 3.0))
    assert len(pc) == 2 and pc.lookup(torch.tensor([2, 2])) is None
    assert pc.lookup(torch.tensor([1, 1])).tokens == 2 and pc.lookup(torch.tensor([3])).tokens == 1
    pc.store(torch.tensor(list(range(100))), *kv(100, 1.0))  # larger than the whole budget: not kept
    assert len(pc) == 2


def req(i, system, user, max_tokens=12):
    return ChatRequest(custom_id=f"x|s|strict|0|{i}", role="strict", max_tokens=max_tokens,
                       messages=[Message(role="system", content=system), Message(role="user", content=user)])


def test_reused_prefixes_give_the_same_outputs_as_a_full_prefill(tiny_llama):
    system = "You are the strict debater. " * 6
    first = [req(0, system, "content A, round 1"), req(1, system, "content B is a little longer, round 1")]
    second = [req(2, system, "content A, round 1\nopponent said something\nround 2"),
              req(3, system, "content B is a little longer, round 1\nround 2")]
    cached = HFBackend(HFBackendConfig(model=str(tiny_llama), batch_size=2, prefill="per_row"))
    plain = HFBackend(HFBackendConfig(model=str(tiny_llama), batch_size=2, prefill="per_row", prefix_cache_mb=0),
                      model=cached.model, tokenizer=cached.tokenizer)
    out_cached = [c.text for c in cached.generate(first) + cached.generate(second)]
    out_plain = [c.text for c in plain.generate(first) + plain.generate(second)]
    assert out_cached == out_plain
    pc = cached._prefix[None]
    n_system = len(cached.tokenizer(cached.render(first[0]), add_special_tokens=False).input_ids) // 2
    # the second row of the first batch reuses the system prompt; round 2 reuses each round-1 prompt
    assert pc.hits == 3 and pc.reused_tokens > 3 * n_system // 2
    assert plain._prefix == {}
