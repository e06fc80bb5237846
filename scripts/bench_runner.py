"""Step-synchronous runner vs a sequential per-sample loop, same model, same items, side by side.

    python scripts/bench_runner.py [-c configs/quickstart.yaml] [--items 16] [--max-tokens N] [--repeats R]
                                   [--batch-first] [key=value ...]

Both arms use the same loaded model, greedy decoding and the same per-role max tokens. The sequential
arm is the same protocol code driven one sample at a time with batch size 1 (window=1); the batched arm
sends each step of all samples as one batch. It prints how many outputs differ between the two (batching
pads on the left, which can move floating-point near-ties in greedy decoding), then, on its last line,
the throughput ratio. Each arm starts with an empty prefix cache. On a noisy machine, ``--repeats 2`` runs
sequential, batched, batched, sequential and sums the times, so neither arm gains from going first.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", default=str(Path(__file__).resolve().parent.parent / "configs/quickstart.yaml"))
    ap.add_argument("--items", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=None, help="override every role's max tokens")
    ap.add_argument("--batch-first", action="store_true", help="run the batched arm first (order check)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run both arms this many times, alternating their order; the ratio uses the summed times")
    ap.add_argument("overrides", nargs="*", default=[], help="dotted.key=value, e.g. backends.default.dtype=float32")
    args = ap.parse_args()

    from agents.backends.factory import build_backend
    from agents.backends.hf import HFBackend
    from agents.pipeline import build_runner
    from data.config import GenerateConfig, HFBackendConfig, load_config
    from data.jsonl import read_records
    from data.sources import load_samples

    overrides = ["progress=false", *args.overrides]
    cfg = load_config(args.config, GenerateConfig, overrides)
    base = cfg.backends["default"]
    assert isinstance(base, HFBackendConfig), "bench_runner compares local (hf) inference"
    if args.max_tokens:
        cfg.protocol["max_tokens"] = {r: args.max_tokens for r in
                                      ("preprocessor", "supporter", "strict", "loose", "arbiter", "critic",
                                       "defender", "judge", "analyst", "advocate")}
    samples, _ = load_samples(cfg.dataset)
    samples = samples[: args.items]
    shared: dict = {}
    batched_be = build_backend(base, shared=shared)
    seq_be = HFBackend(base.model_copy(update={"batch_size": 1}), model=batched_be.model,
                       tokenizer=batched_be.tokenizer)
    import torch

    print(f"model={base.model} dtype={base.dtype} torch_threads={torch.get_num_threads()} items={len(samples)} "
          f"protocol={cfg.protocol.get('name')}")
    tmp = Path(tempfile.mkdtemp(prefix="bench_runner_"))
    order = ["batched", "sequential"] if args.batch_first else ["sequential", "batched"]
    runs: dict[str, list[dict]] = {"sequential": [], "batched": []}
    for rep in range(args.repeats):
        for arm in order if rep % 2 == 0 else order[::-1]:  # repeats alternate the order
            be = batched_be if arm == "batched" else seq_be
            be.clear_prefix_cache()  # every arm starts cold: no prompt prefix from an earlier arm or repeat
            runner = build_runner(cfg, backends={"default": be}, output=str(tmp / f"{arm}{rep}.jsonl"))
            if arm == "sequential":
                runner.window = 1  # one sample at a time, each call alone
            t0 = time.perf_counter()
            stats = runner.run(samples)
            wall = time.perf_counter() - t0
            r = {"wall_s": wall, "items_per_s": stats.done / wall, "completion_tokens": stats.completion_tokens,
                 "gen_tokens_per_s": stats.completion_tokens / wall, "done": stats.done, "failed": stats.failed,
                 "prompt_tokens": stats.prompt_tokens, "prefix_cache": be.prefix_cache_stats()}
            runs[arm].append(r)
            be.clear_prefix_cache()  # and leaves no memory behind for the next arm
            print(f"{arm:>10}: {stats.done} items in {wall:.1f} s  {stats.done / wall:.3f} items/s  "
                  f"{stats.completion_tokens / wall:.1f} generated tok/s  ({stats.completion_tokens} generated tokens; "
                  f"prefix cache reused {r['prefix_cache']['reused_tokens']} of {stats.prompt_tokens} "
                  f"prompt tokens)" + (f"  [repeat {rep + 1}]" if args.repeats > 1 else ""), flush=True)
    arms = {arm: {"wall_s": sum(r["wall_s"] for r in rs), "done": sum(r["done"] for r in rs),
                  "completion_tokens": sum(r["completion_tokens"] for r in rs), "runs": rs}
            for arm, rs in runs.items()}
    for a in arms.values():
        a["items_per_s"] = a["done"] / a["wall_s"]
        a["gen_tokens_per_s"] = a["completion_tokens"] / a["wall_s"]
    for arm in runs:  # greedy decoding: a repeat must reproduce its arm's outputs exactly
        outs = [[(t.id, [turn.output for turn in t.turns]) for t in read_records(tmp / f"{arm}{rep}.jsonl")]
                for rep in range(args.repeats)]
        if args.repeats > 1:
            same = all(sorted(o) == sorted(outs[0]) for o in outs[1:])
            print(f"{arm} repeats reproduce their outputs exactly: {'yes' if same else 'NO'}")
    seq = {t.id: t for t in read_records(tmp / "sequential0.jsonl")}
    bat = {t.id: t for t in read_records(tmp / "batched0.jsonl")}
    n_turns = diff_turns = diff_verdicts = 0
    first_diff_turn = None
    for tid, s in seq.items():
        b = bat[tid]
        for ts, tb in zip(s.turns, b.turns):
            n_turns += 1
            if ts.output != tb.output:
                diff_turns += 1
                if first_diff_turn is None:
                    first_diff_turn = (tid, ts.step)
                break  # later turns see different inputs; count the first divergence per item
        if (s.verdict.label, s.verdict.score) != (b.verdict.label, b.verdict.score):
            diff_verdicts += 1
    print(f"items whose outputs diverge: {diff_turns}/{len(seq)} (first at {first_diff_turn}); "
          f"verdicts that differ: {diff_verdicts}/{len(seq)}")
    print("why: a divergence is a greedy near-tie flipped by left padding / different batch shapes in the "
          "matmuls (same model, same prompts); identical token ids are expected otherwise.")
    ratio = arms["batched"]["items_per_s"] / arms["sequential"]["items_per_s"]
    tok_ratio = arms["batched"]["gen_tokens_per_s"] / arms["sequential"]["gen_tokens_per_s"]
    print(json.dumps({"arms": arms, "diverging_items": diff_turns, "differing_verdicts": diff_verdicts}))
    print(f"throughput ratio (batched / sequential): {ratio:.2f}x items/s, {tok_ratio:.2f}x generated tokens/s")


if __name__ == "__main__":
    main()
