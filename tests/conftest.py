from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def smol_tokenizer():
    from agents.models import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def tiny_llama(smol_tokenizer, tmp_path_factory):
    """A tiny random Llama with the SmolLM2 tokenizer, saved as a normal local checkpoint."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(smol_tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                      bos_token_id=smol_tokenizer.bos_token_id, eos_token_id=smol_tokenizer.eos_token_id,
                      pad_token_id=smol_tokenizer.pad_token_id)
    model = LlamaForCausalLM(cfg)
    path = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path
