"""The matmul CPU attention against SDPA, side by side in one run: decode steps, prompts, accuracy.

    python scripts/bench_cpu_attention.py [--model smollm2] [--dtype bfloat16] [--steps 20]

Decode: one step (one new token per row) of the model over a static KV cache of L random tokens, for
batches of 1 and 16 rows. Prompt: a 1,300-token prompt of real text (this repository's README) whose
first R tokens are already in the cache (R = 0: a fresh prompt), i.e. what the per-row prefill computes.
SDPA and matmul alternate. Accuracy: teacher-forced decode logits of the same text in the benchmark dtype
under each implementation, compared with the same model in float32 (mean |logit difference|, top-1).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from transformers import StaticCache

from transformers import DynamicCache

from agents.backends.cpu_attention import register
from agents.models import load_causal_lm, load_tokenizer

IMPLS = {"sdpa": "sdpa", "matmul": register()}


def step_ms(model, impl: str, rows: int, length: int, steps: int, new: int = 64) -> float:
    model.set_attn_implementation(IMPLS[impl])
    cfg = model.config
    cache = StaticCache(config=cfg, max_cache_len=length + new)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    gen = torch.Generator().manual_seed(0)
    for layer in range(cfg.num_hidden_layers):
        kv = torch.randn(rows, cfg.num_key_value_heads, length, head_dim, generator=gen).to(model.dtype)
        cache.update(kv, kv.clone(), layer)
    ids = torch.randint(0, 1000, (rows, 1), generator=gen)
    mask = torch.ones(rows, length + new, dtype=torch.long)
    mask[:, :8] = 0  # left padding, as in a real batch
    times = []
    with torch.inference_mode():
        for i in range(steps + 3):
            t0 = time.perf_counter()
            model(input_ids=ids, attention_mask=mask[:, : length + 1 + i], cache=cache, use_cache=True,
                  position_ids=torch.full((rows, 1), length + i))
            times.append(time.perf_counter() - t0)
    return 1000 * sum(times[3:]) / steps


def prompt_ms(model, impl: str, ids, reused: int, repeats: int = 3) -> float:
    """Time to compute ids[reused:] with ids[:reused] already cached (the cached part is not timed)."""
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            model.set_attn_implementation("sdpa")
            cache = DynamicCache(config=model.config)
            if reused:
                model(input_ids=ids[:, :reused], cache=cache, use_cache=True)
            model.set_attn_implementation(IMPLS[impl])
            t0 = time.perf_counter()
            model(input_ids=ids[:, reused:], cache=cache, use_cache=True, logits_to_keep=1)
            best = min(best, time.perf_counter() - t0)
    return 1000 * best


def teacher_forced_logits(model, impl: str, ids, prompt: int, n: int):
    model.set_attn_implementation("sdpa")
    cache = StaticCache(config=model.config, max_cache_len=prompt + n)
    out = []
    with torch.inference_mode():
        model(input_ids=ids[:, : prompt - 1], cache=cache, use_cache=True)
        model.set_attn_implementation(IMPLS[impl])
        for t in range(prompt - 1, prompt + n - 1):
            o = model(input_ids=ids[:, t : t + 1], cache=cache, use_cache=True, position_ids=torch.tensor([[t]]))
            out.append(o.logits[0, -1].float())
    return torch.stack(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    model = load_causal_lm(args.model, dtype=args.dtype)
    print(f"{args.model} {args.dtype}, {torch.get_num_threads()} threads")
    print("ms per decode step (lower is better)")
    for rows, length in [(1, 400), (1, 1300), (16, 400), (16, 1300)]:
        runs: dict[str, list[float]] = {"sdpa": [], "matmul": []}
        for impl in ("sdpa", "matmul", "sdpa", "matmul"):  # alternated: drift on a noisy machine hits both
            runs[impl].append(step_ms(model, impl, rows, length, args.steps))
        t = {impl: sum(v) / len(v) for impl, v in runs.items()}
        print(f"rows={rows:2d} cached={length:4d}: sdpa {t['sdpa']:6.1f}  matmul {t['matmul']:6.1f}  "
              f"speed-up {t['sdpa'] / t['matmul']:.2f}x")
    tok = load_tokenizer(args.model)
    ids = tok(Path(__file__).resolve().parents[1].joinpath("README.md").read_text(), return_tensors="pt").input_ids
    print("ms per 1,300-token prompt with its first R tokens cached (best of 3; lower is better)")
    for reused in (0, 100, 200, 433, 700, 1100):
        t = {impl: prompt_ms(model, impl, ids[:, :1300], reused) for impl in ("sdpa", "matmul")}
        print(f"R={reused:4d}: sdpa {t['sdpa']:7.1f}  matmul {t['matmul']:7.1f}  speed-up {t['sdpa'] / t['matmul']:.2f}x"
              f"  (matmul vs a fresh SDPA prompt: {prompt_ms(model, 'sdpa', ids[:, :1300], 0) / t['matmul']:.2f}x)")
    prompt, n = min(1200, ids.shape[1] - 101), 100
    ref = teacher_forced_logits(load_causal_lm(args.model, dtype="float32"), "sdpa", ids, prompt, n)
    for impl in ("sdpa", "matmul"):
        got = teacher_forced_logits(model, impl, ids, prompt, n)
        print(f"{impl:6s} {args.dtype} vs float32 over {n} decode steps: mean |dlogit| {(got - ref).abs().mean():.4f}"
              f"  top-1 agreement {(got.argmax(-1) == ref.argmax(-1)).float().mean():.2f}")


if __name__ == "__main__":
    main()
