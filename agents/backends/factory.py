"""Build a backend from its config (lazy imports: the openai SDK or vLLM load only when used)."""
from __future__ import annotations

from agents.backends.base import Backend
from data.config import BatchBackendConfig, HFBackendConfig, OpenAIBackendConfig, VLLMBackendConfig


def build_backend(cfg, *, shared: dict | None = None) -> Backend:
    """``shared`` lets several backend entries with the same hf model reuse one loaded model."""
    if isinstance(cfg, HFBackendConfig):
        from agents.backends.hf import HFBackend

        key = ("hf", cfg.model, cfg.gguf_file, cfg.revision, cfg.dtype, cfg.device, tuple(sorted(cfg.adapters.items())))
        if shared is not None and key in shared:
            base: HFBackend = shared[key]
            return HFBackend(cfg, model=base.model, tokenizer=base.tokenizer)
        be = HFBackend(cfg)
        if shared is not None:
            shared[key] = be
        return be
    if isinstance(cfg, OpenAIBackendConfig):
        from agents.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(cfg)
    if isinstance(cfg, BatchBackendConfig):
        from agents.backends.batch import BatchBackend

        return BatchBackend(cfg)
    if isinstance(cfg, VLLMBackendConfig):
        from agents.backends.vllm_backend import VLLMBackend

        return VLLMBackend(cfg)
    raise TypeError(f"unknown backend config {type(cfg).__name__}")
