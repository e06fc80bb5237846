"""The continual-learning experiment (seed 000 §4.2.3): zero-shot against a growing case library.

The dataset is split into K sequential stratified batches (each keeps the overall label ratio). For each
batch the protocol runs twice: zero-shot (no library) and with the library as it stands; then the
library-condition transcripts of that batch are curated into the library (``--index errors`` = the
deployment protocol's FP/FN only; ``--index all`` = every processed sample, as the paper does in this
experiment). F1 per batch is printed for both conditions. Rerunning resumes (finished transcripts and
curated items are skipped).

    python -m scripts.continual --config configs/quickstart.yaml --dataset bundled --batches 2 \
        --per-batch 4 --output runs/continual_smoke [protocol.rounds=1 ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def stratified_batches(samples, k: int, per_batch: int, seed: int) -> list[list]:
    """K disjoint batches of ``per_batch`` labelled samples, each with the overall label ratio."""
    from sklearn.model_selection import StratifiedKFold

    from data.sources import stratified_sample

    labelled = [s for s in samples if s.label is not None]
    need = k * per_batch
    if need > len(labelled):
        raise ValueError(f"{k} batches x {per_batch} = {need} labelled samples needed; the dataset has {len(labelled)}")
    pool = stratified_sample(labelled, need, seed) if need < len(labelled) else labelled
    y = [s.label for s in pool]
    if k == 1:
        return [pool]
    folds = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(pool)), y)
    return [[pool[i] for i in sorted(test)] for _, test in folds]


def _verdicts(path: Path, ids: list[str]) -> dict[str, object]:
    from data.jsonl import iter_records
    from data.records import Transcript

    if not path.exists():
        return {}
    want = set(ids)
    return {t.sample.id: t for t in iter_records(path, Transcript, allow_partial_tail=True) if t.sample.id in want}


def run_continual(gen_cfg, batches, output: str | Path, *, backends: dict | None = None, curator_backend=None,
                  curator: str = "default", index: str = "errors", library_settings=None, embed_fn=None,
                  curator_max_tokens: int = 300, echo=print) -> list[dict]:
    from agents.backends.factory import build_backend
    from agents.curator import Curator
    from agents.library import CaseLibrary, LibrarySettings
    from agents.pipeline import build_runner
    from eval.metrics import binary_metrics

    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    gen_cfg = gen_cfg.model_copy(update={"library": None, "progress": False})
    if backends is None:  # built once, shared by both conditions and the curator
        shared: dict = {}
        backends = {name: build_backend(b, shared=shared) for name, b in gen_cfg.backends.items()}
    if curator_backend is None:
        if curator not in backends:
            raise ValueError(f"--curator-backend {curator!r} is not a backend of the config ({', '.join(backends)})")
        curator_backend = backends[curator]
    lib = CaseLibrary.open(out / "library", library_settings or LibrarySettings(), embed_fn=embed_fn)
    zero = build_runner(gen_cfg, backends=backends, output=str(out / "zero_shot.jsonl"))
    grow = build_runner(gen_cfg, backends=backends, resources={"library": lib}, output=str(out / "with_library.jsonl"))
    cur = Curator(curator_backend, lib, select=index, max_tokens=curator_max_tokens)
    rows = []
    echo(f"{'batch':>5} {'n':>4} {'cases':>6} {'F1 zero-shot':>13} {'F1 library':>11} {'delta':>7} {'added':>6}")
    for b, batch in enumerate(batches, 1):
        ids = [s.id for s in batch]
        cases_before = len(lib)
        zero.run(batch)
        grow.run(batch)
        z, g = _verdicts(zero.output, ids), _verdicts(grow.output, ids)
        gold = [s.label for s in batch]
        mz = binary_metrics(gold, [z[i].verdict.label if i in z else None for i in ids])
        mg = binary_metrics(gold, [g[i].verdict.label if i in g else None for i in ids])
        cs = cur.curate([g[i] for i in ids if i in g], source=str(grow.output))
        row = {"batch": b, "n": len(batch), "library_cases_before": cases_before, "f1_zero_shot": mz["f1"],
               "f1_library": mg["f1"], "delta": mg["f1"] - mz["f1"], "acc_zero_shot": mz["accuracy"],
               "acc_library": mg["accuracy"], "invalid_zero_shot": mz["n_invalid"], "invalid_library": mg["n_invalid"],
               "retrieved_per_item": float(np.mean([len(g[i].retrieval) for i in ids if i in g] or [0])),
               "curated": cs.curated, "curated_by_outcome": cs.by_outcome, "curator_failed": cs.failed}
        rows.append(row)
        echo(f"{b:>5} {len(batch):>4} {cases_before:>6} {mz['f1']:>13.4f} {mg['f1']:>11.4f} {row['delta']:>+7.4f} "
             f"{cs.curated:>6}")
    clean = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()} for r in rows]  # NaN -> null
    (out / "continual_results.json").write_text(json.dumps({"index": index, "batches": clean}, indent=2))
    return rows


def main(argv: list[str] | None = None) -> int:
    from agents.library import LibrarySettings
    from data.config import DatasetConfig, GenerateConfig, load_config
    from data.sources import load_samples

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a generate config (protocol, backends, roles)")
    p.add_argument("--dataset", required=True, help="'bundled' or a labelled .jsonl/.csv/.parquet path")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--per-batch", type=int, default=250)
    p.add_argument("--output", required=True, help="a folder: transcripts, the library, continual_results.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--index", choices=("errors", "all"), default="errors",
                   help="what is curated into the library after each batch (the paper's experiment: all)")
    p.add_argument("--curator-backend", default="default", help="a backend name from the config")
    p.add_argument("--curator-max-tokens", type=int, default=300)
    p.add_argument("--embedder", default=LibrarySettings().embedder)
    p.add_argument("--library-index", choices=("numpy", "faiss"), default="numpy")
    p.add_argument("overrides", nargs="*", default=[], help="dotted.key=value overrides of the generate config")
    args = p.parse_args(argv)
    cfg = load_config(args.config, GenerateConfig, args.overrides)
    samples, report = load_samples(DatasetConfig(path=args.dataset, require_label=True))
    print(report.summary())
    batches = stratified_batches(samples, args.batches, args.per_batch, args.seed)
    for i, b in enumerate(batches, 1):
        print(f"batch {i}: {len(b)} samples, {sum(s.label == 'unsafe' for s in b)} unsafe")
    run_continual(cfg, batches, args.output, curator=args.curator_backend, index=args.index,
                  library_settings=LibrarySettings(embedder=args.embedder, index=args.library_index),
                  curator_max_tokens=args.curator_max_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
