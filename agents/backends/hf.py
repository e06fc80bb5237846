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

# under SDPA a reused prefix must cover this much of a prompt to pay for the masked attention of the rest
# (measured in agents/backends/prefix_cache.py); the matmul attention computes a continued prompt without that
# overhead, so any common prefix pays there (scripts/bench_cpu_attention.py: 100 of 1,300 tokens reused: 1.2x)
MIN_REUSE_FRACTION = {"sdpa": 1 / 3, "matmul": 0.0}


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
        self.attention = "model"  # which attention the model runs, after cfg.attention
        mode = cfg.attention
        if mode == "auto":
            mode = "matmul" if self.device.type == "cpu" else "model"
        if mode == "matmul":
            from agents.backends.cpu_attention import NAME, use_matmul_attention

            if use_matmul_attention(self.model):
                self.attention = NAME
        self.adapters = dict(cfg.adapters)
        if self.adapters:
            from peft import PeftModel

            items = list(self.adapters.items())
            self.model = PeftModel.from_pretrained(self.model, items[0][1], adapter_name=items[0][0])
            for role, path in items[1:]:
                self.model.load_adapter(path, adapter_name=role)
            self.model.eval()
        self.ref = BackendRef(kind="hf", model=cfg.model)
        self._per_row: bool | None = None
        self._prefix: dict = {}  # adapter (None = base model) -> PrefixCache

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
                gen_kw = {"max_new_tokens": max_tokens, "pad_token_id": self.tokenizer.pad_token_id}
                if temperature > 0:
                    torch.manual_seed(self.cfg.seed)
                    gen_kw.update(do_sample=True, temperature=temperature, top_p=self.cfg.top_p)
                else:
                    gen_kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                with torch.inference_mode(), self._adapter_ctx(role):
                    if self._use_per_row_prefill():  # a batch of one takes the same path: equal footing
                        gen_kw["cache"] = self._prefill_rows(enc.input_ids, enc.attention_mask, max_tokens, role)
                        gen_kw["disable_compile"] = True  # the cache size changes every call: no recompiles
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

    def _use_per_row_prefill(self) -> bool:
        mode = self.cfg.prefill
        if mode == "auto":
            mode = "per_row" if self.device.type == "cpu" else "batched"
        return mode == "per_row" and self._per_row_prefill_ok()

    def _per_row_prefill_ok(self) -> bool:
        """Per-row prefill merges plain full-attention KV caches; sliding-window, hybrid or recurrent caches
        would need their own merge, so those models keep the batched prefill."""
        if self._per_row is None:
            from transformers import DynamicCache

            try:
                layers = DynamicCache(config=self.model.config).layers
                self._per_row = bool(layers) and all(type(layer).__name__ == "DynamicLayer" for layer in layers)
            except Exception:  # noqa: BLE001 - an unusual config: keep the generic path
                self._per_row = False
        return self._per_row

    def _prefill_rows(self, input_ids, attention_mask, max_new_tokens: int, role: str = ""):
        """Prefill every prompt but its last token alone (no padding: the one-at-a-time computation) and
        write each row's keys and values, left-padded, into one static cache sized for the whole
        generation. ``generate`` continues from it: it feeds each row's last token at the position the
        attention mask gives it and decodes the batch together. A prompt that starts like one prefilled
        before (same system prompt; a debater's previous-round prompt) reuses that prefix's keys and
        values (``prefix_cache_mb``; 0 turns it off).

        Why: on a CPU prefill is compute-bound, so a padded batched prefill only adds work (pad tokens,
        larger attention matrices; measured 1.6x slower at 16 rows of ~1.3k tokens); decode is where
        batching pays, and a preallocated cache spares every decode step from re-allocating and copying
        the whole cache (a growing cache is concatenated once per layer per token).
        """
        from transformers import DynamicCache, StaticCache

        prefix = self._prefix_cache(role)
        width = input_ids.shape[1] - 1
        static = None
        for r in range(input_ids.shape[0]):
            ids = input_ids[r][attention_mask[r].bool()][:-1]
            if not len(ids):
                continue  # a one-token prompt: its row stays padding
            row = DynamicCache(config=self.model.config)
            min_reuse = MIN_REUSE_FRACTION["matmul" if self.attention != "model" else "sdpa"]
            hit = prefix.lookup(ids, min_reuse) if prefix is not None else None
            start = hit.tokens if hit else 0
            if hit:
                for li, (k, v) in enumerate(zip(hit.keys, hit.values)):
                    row.update(k[None], v[None], li)
            if start < len(ids):
                self.model(input_ids=ids[None, start:], cache=row, use_cache=True, logits_to_keep=1)
            if static is None:
                static = StaticCache(config=self.model.config, max_cache_len=width + 1 + max_new_tokens)
                for li, layer in enumerate(row.layers):
                    shape = (input_ids.shape[0], *layer.keys.shape[1:2], width, layer.keys.shape[-1])
                    zeros = layer.keys.new_zeros(shape)
                    static.update(zeros, layer.values.new_zeros((*shape[:3], layer.values.shape[-1])), li)
            for li, layer in enumerate(row.layers):
                static.layers[li].keys[r, :, width - len(ids) : width] = layer.keys[0]
                static.layers[li].values[r, :, width - len(ids) : width] = layer.values[0]
            if prefix is not None:
                prefix.store(ids, [layer.keys[0] for layer in row.layers], [layer.values[0] for layer in row.layers])
            del row
        return static

    def prefix_cache_stats(self) -> dict:
        """Lookups, hits and reused prompt tokens of the prefix caches (all adapters together)."""
        caches = list(self._prefix.values())
        return {"lookups": sum(c.lookups for c in caches), "hits": sum(c.hits for c in caches),
                "reused_tokens": sum(c.reused_tokens for c in caches)}

    def clear_prefix_cache(self) -> None:
        """Forget every stored prompt prefix (and its statistics)."""
        self._prefix.clear()

    def _prefix_cache(self, role: str):
        """One prefix cache per adapter (an adapter changes every key and value)."""
        if self.cfg.prefix_cache_mb <= 0:
            return None
        from agents.backends.prefix_cache import PrefixCache

        adapter = self.adapters.get(role) if self.adapters else None
        if adapter not in self._prefix:
            self._prefix[adapter] = PrefixCache(self.cfg.prefix_cache_mb * 2**20)
        return self._prefix[adapter]

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
