"""Case-library benchmark: embedding throughput and query latency at 10k cases (numpy vs FAISS).

1. Throughput: the real embedder (all-MiniLM-L6-v2 by default) encodes ``--n-texts`` short synthetic texts
   at each ``--batch-sizes``; texts/s is printed per batch size (after one warm-up batch).
2. Latency: a store of ``--store`` cases — random L2-normalised vectors by default (``--store-kind random``;
   fast, same search cost as real embeddings), or real embeddings of synthetic texts (``--store-kind
   embedded``) — is searched with ``--queries`` real query embeddings through ``CaseLibrary.search_vector``
   (top-k with the leakage guard), numpy and FAISS side by side; p50 / p95 / mean per query in ms. The
   end-to-end ``CaseLibrary.search`` (embedding one query text + search) is timed too. Search threads are
   compared (``--search-threads``): one query is a matrix-vector product, where threads only cost.

    python -m scripts.bench_library --store 10000 --queries 200 --n-texts 1000 --batch-sizes 32,64,128
"""
from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import numpy as np

WORDS = {
    "who": ["my neighbour", "a student", "the manager", "my brother", "a nurse", "the landlord", "our team",
            "a stranger online", "my friend", "the teacher"],
    "act": ["wants to know how to", "asked me to", "is writing a story about how to", "keeps trying to",
            "explained how to", "refused to", "posted a guide to", "is worried about people who"],
    "what": ["fix a leaking tap", "pick a lock", "bake sourdough bread", "make a fake ID", "train for a marathon",
             "hack a wifi network", "store cleaning chemicals", "buy concert tickets", "hide a bruise",
             "write a cover letter", "grow tomatoes", "track someone's phone"],
    "tail": ["this weekend.", "without anyone noticing.", "for a school project.", "as fast as possible.",
             "safely at home.", "and what could go wrong?", "for a novel I am writing.", "before Monday."],
}


def synthetic_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS[k]) for k in ("who", "act", "what", "tail")) for _ in range(n)]


def throughput(embedder, n_texts: int, batch_sizes: list[int], seed: int) -> list[dict]:
    texts = synthetic_texts(n_texts, seed)
    embedder.encode(texts[:32])  # warm-up
    rows = []
    for bs in batch_sizes:
        embedder.batch_size = bs
        t0 = time.perf_counter()
        out = embedder.encode(texts)
        dt = time.perf_counter() - t0
        rows.append({"batch_size": bs, "texts": len(texts), "seconds": dt, "texts_per_s": len(texts) / dt,
                     "dim": int(out.shape[1])})
    return rows


def make_store(embedder, n: int, kind: str, seed: int, folder: Path):
    from agents.library import CaseLibrary, LibraryMeta, now_iso
    from data.records import Case

    if kind == "random":
        rng = np.random.default_rng(seed)
        vecs = rng.standard_normal((n, embedder.dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        texts = [f"synthetic case {i}" for i in range(n)]
    else:
        texts = synthetic_texts(n, seed + 1)
        vecs = embedder.encode(texts)
    cases = [Case(id=f"b{i}", label="unsafe" if i % 3 == 0 else "safe", summary=texts[i], excerpt=texts[i],
                  sample_id=f"s{i}") for i in range(n)]
    t = now_iso()
    meta = LibraryMeta(embedder=embedder.name, dim=embedder.dim, count=n, created_at=t, updated_at=t)
    return CaseLibrary(folder, meta, embedder, cases, vecs)


def time_queries(fn, queries) -> list[float]:
    out = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    from agents.embedder import DEFAULT_EMBEDDER, build_embedder
    from eval.metrics import latency_stats

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    p.add_argument("--n-texts", type=int, default=1000)
    p.add_argument("--batch-sizes", default="32,64,128")
    p.add_argument("--torch-threads", default="1,2", help="torch CPU threads to compare for throughput")
    p.add_argument("--store", type=int, default=10_000)
    p.add_argument("--store-kind", choices=("random", "embedded"), default="random")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--search-threads", default="1,2",
                   help="threads per query search to compare: numpy BLAS (library setting search_threads) and "
                        "the process's OpenMP threads for FAISS (set through torch.set_num_threads, shared)")
    args = p.parse_args(argv)

    import torch

    print(f"torch threads: {torch.get_num_threads()}, device: {args.device}")
    t0 = time.perf_counter()
    emb = build_embedder(args.embedder, device=args.device)
    dim = emb.dim  # loads the model
    print(f"embedder {args.embedder}: dim {dim}, load {time.perf_counter() - t0:.1f} s")

    print("\n== embedding throughput (short synthetic texts, ~12 words) ==")
    default_threads = torch.get_num_threads()
    for nt in [int(x) for x in args.torch_threads.split(",")]:
        torch.set_num_threads(nt)
        for r in throughput(emb, args.n_texts, [int(x) for x in args.batch_sizes.split(",")], args.seed):
            print(f"torch threads {nt}, batch {r['batch_size']:>4}: {r['texts']} texts in {r['seconds']:.2f} s = "
                  f"{r['texts_per_s']:.0f} texts/s")
    torch.set_num_threads(default_threads)

    print(f"\n== query latency: {args.store} cases ({args.store_kind} vectors), {args.queries} real queries, "
          f"top-{args.k} with the leakage guard ==")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        lib = make_store(emb, args.store, args.store_kind, args.seed, Path(tmp))
        print(f"store built in {time.perf_counter() - t0:.1f} s")
        qtexts = synthetic_texts(args.queries, args.seed + 2)
        qvecs = emb.encode(qtexts)
        results: dict[str, list[list[str]]] = {}
        omp_default = torch.get_num_threads()
        lib.search_threads = 1
        e2e = {}
        for index in ("numpy", "faiss"):  # end to end first, at the process defaults
            lib.meta.index = index
            e2e[index] = latency_stats(time_queries(lambda t: lib.search(t, k=args.k), qtexts[:50]))
        for threads in [int(x) for x in args.search_threads.split(",")]:
            lib.search_threads = threads
            torch.set_num_threads(threads)  # the OpenMP pool FAISS shares with torch
            for index in ("numpy", "faiss"):
                lib.meta.index = index
                t0 = time.perf_counter()
                lib.search_vector(qvecs[0], args.k, exclude_sample_id="s0")  # faiss: builds the index once
                first = time.perf_counter() - t0
                ids: list[list[str]] = []
                results[index] = ids
                lat = time_queries(lambda q, out=ids: out.append(
                    [c.id for c, _ in lib.search_vector(q, args.k, exclude_sample_id="s0")]), qvecs)
                s = latency_stats(lat)
                print(f"{index:>6} search_vector, {threads} thread(s): p50 {s['p50']:.3f} ms  p95 {s['p95']:.3f} ms  "
                      f"mean {s['mean']:.3f} ms  (first call {first * 1000:.1f} ms)")
            same = np.mean([a == b for a, b in zip(results["numpy"], results["faiss"])])
            print(f"numpy and faiss return the same top-{args.k} ids for {same:.1%} of queries")
        torch.set_num_threads(omp_default)
        for index, s in e2e.items():
            print(f"{index:>6} search (embed 1 query + search, library defaults): p50 {s['p50']:.2f} ms  "
                  f"p95 {s['p95']:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
