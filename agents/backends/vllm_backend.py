"""vLLM offline engine (GPU extra: ``pip install -e ".[gpu]"``): one base model, a LoRARequest per role.

Not importable on CPU-only machines (vLLM needs a CUDA torch); the factory imports it lazily, so the
rest of Tribunal never depends on it. Requests of one role share one LoRA adapter, as the runner groups
them by role; ``tensor_parallel_size`` shards the model across GPUs.
"""
from __future__ import annotations

import time

from agents.backends.base import ChatRequest, Completion
from data.config import VLLMBackendConfig
from data.records import BackendRef


class VLLMBackend:
    price_factor = 1.0

    def __init__(self, cfg: VLLMBackendConfig):
        try:
            from vllm import LLM
        except ImportError as e:  # pragma: no cover - depends on the GPU extra
            raise ImportError("the vllm backend needs the GPU extra: pip install -e '.[gpu]' (a CUDA torch)") from e
        self.cfg = cfg
        kw = dict(model=cfg.model, tensor_parallel_size=cfg.tensor_parallel_size, dtype=cfg.dtype, seed=cfg.seed,
                  gpu_memory_utilization=cfg.gpu_memory_utilization)
        if cfg.max_model_len:
            kw["max_model_len"] = cfg.max_model_len
        if cfg.adapters:
            kw.update(enable_lora=True, max_loras=max(1, len(cfg.adapters)))
        self.llm = LLM(**kw)
        self.ref = BackendRef(kind="vllm", model=cfg.model)
        self._lora_ids = {role: i + 1 for i, role in enumerate(sorted(cfg.adapters))}

    def ref_for(self, role: str) -> BackendRef:
        return BackendRef(kind="vllm", model=self.cfg.model, adapter=self.cfg.adapters.get(role))

    def _lora(self, role: str):
        if role not in self.cfg.adapters:
            return None
        from vllm.lora.request import LoRARequest

        return LoRARequest(role, self._lora_ids[role], self.cfg.adapters[role])

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        from vllm import SamplingParams

        out: list[Completion | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((r.role, r.max_tokens, r.temperature or self.cfg.temperature), []).append(i)
        for (role, max_tokens, temperature), idx in groups.items():
            params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=self.cfg.seed)
            convs = [[{"role": m.role, "content": m.content} for m in requests[i].messages] for i in idx]
            t0 = time.perf_counter()
            results = self.llm.chat(convs, params, lora_request=self._lora(role), use_tqdm=False)
            dt = time.perf_counter() - t0
            for i, res in zip(idx, results):
                o = res.outputs[0]
                out[i] = Completion(text=o.text.strip(), prompt_tokens=len(res.prompt_token_ids or []),
                                    completion_tokens=len(o.token_ids), latency_s=dt / len(idx))
        return out  # type: ignore[return-value]

    def close(self) -> None:
        pass
