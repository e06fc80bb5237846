"""Local transformers backend: batched generation with left padding, optional PEFT role adapters.

One base model serves every role; a role bound to an adapter (``adapters: {strict: path}``) switches the
active adapter for that role's requests, which the runner already groups together.
"""
from __future__ import annotations

import contextlib
import time

from agents.backends.base import ChatRequest, Completion
from agents.models import load_causal_lm, load_tokenizer
from data.config import HFBackendConfig
from data.records import BackendRef


class HFBackend:
    price_factor = 1.0

    def __init__(self, cfg: HFBackendConfig, *, model=None, tokenizer=None):
        self.cfg = cfg
        self.tokenizer = tokenizer or load_tokenizer(cfg.model, gguf_file=cfg.gguf_file, revision=cfg.revision,
                                                     cache_dir=cfg.cache_dir)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = model if model is not None else load_causal_lm(
            cfg.model, gguf_file=cfg.gguf_file, revision=cfg.revision, dtype=cfg.dtype, device=cfg.device,
            load_in_4bit=cfg.load_in_4bit, load_in_8bit=cfg.load_in_8bit, cache_dir=cfg.cache_dir)
        self.adapters = dict(cfg.adapters)
        if self.adapters:
            from peft import PeftModel

            items = list(self.adapters.items())
            self.model = PeftModel.from_pretrained(self.model, items[0][1], adapter_name=items[0][0])
            for role, path in items[1:]:
                self.model.load_adapter(path, adapter_name=role)
            self.model.eval()
        self.ref = BackendRef(kind="hf", model=cfg.model)

    @property
    def device(self):
        return next(self.model.parameters()).device

    def ref_for(self, role: str) -> BackendRef:
        return BackendRef(kind="hf", model=self.cfg.model, adapter=self.adapters.get(role))

    def _adapter_ctx(self, role: str):
        if not self.adapters:
            return contextlib.nullcontext()
        if role in self.adapters:
            self.model.set_adapter(role)
            return contextlib.nullcontext()
        return self.model.disable_adapter()

    def render(self, req: ChatRequest) -> str:
        msgs = [{"role": m.role, "content": m.content} for m in req.messages]
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        import torch

        out: list[Completion | None] = [None] * len(requests)
        # group by (role, max_tokens, temperature): one adapter and one generation setting per forward
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((r.role, r.max_tokens, r.temperature or self.cfg.temperature), []).append(i)
        for (role, max_tokens, temperature), idx in groups.items():
            texts = {i: self.render(requests[i]) for i in idx}
            lengths = {i: len(self.tokenizer(texts[i], add_special_tokens=False).input_ids) for i in idx}
            order = sorted(idx, key=lambda i: lengths[i])  # similar lengths together: less padding
            bs = self.cfg.batch_size
            for s in range(0, len(order), bs):
                chunk = order[s : s + bs]
                t0 = time.perf_counter()
                enc = self.tokenizer([texts[i] for i in chunk], return_tensors="pt", padding=True,
                                     add_special_tokens=False).to(self.device)
                gen_kw = dict(max_new_tokens=max_tokens, pad_token_id=self.tokenizer.pad_token_id)
                if temperature > 0:
                    torch.manual_seed(self.cfg.seed)
                    gen_kw.update(do_sample=True, temperature=temperature, top_p=self.cfg.top_p)
                else:
                    gen_kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                with torch.inference_mode(), self._adapter_ctx(role):
                    seqs = self.model.generate(**enc, **gen_kw)
                dt = time.perf_counter() - t0
                new = seqs[:, enc.input_ids.shape[1]:]
                eos_ids = self._eos_ids()
                for row, i in enumerate(chunk):
                    toks = new[row].tolist()
                    n = len(toks)
                    for j, t in enumerate(toks):
                        if t in eos_ids:
                            n = j
                            break
                    text = self.tokenizer.decode(toks[:n], skip_special_tokens=True)
                    out[i] = Completion(text=text.strip(), prompt_tokens=int(enc.attention_mask[row].sum()),
                                        completion_tokens=min(n + 1, len(toks)), latency_s=dt / len(chunk),
                                        extra={"batch_latency_s": dt, "batch_size": len(chunk)})
        return out  # type: ignore[return-value]

    def _eos_ids(self) -> set[int]:
        ids = set()
        gc = getattr(self.model, "generation_config", None)
        e = getattr(gc, "eos_token_id", None)
        if isinstance(e, int):
            ids.add(e)
        elif e:
            ids.update(e)
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        if self.tokenizer.pad_token_id is not None:
            ids.add(self.tokenizer.pad_token_id)
        return ids

    def close(self) -> None:
        pass
