"""The case library (seed 000 §3.2.2, §3.4): precedents the Aetheria Supporter retrieves, on disk.

A library is a folder::

    cases.jsonl      one ``data.records.Case`` per line, appended whole-line + fsync (JsonlAppender)
    embeddings.npy   float32 rows, L2-normalised, row i embeds line i of cases.jsonl
    library.json     embedder name, dim, count, index kind, dedupe threshold, created/updated
    curation.jsonl   (written by the Curator) the exact curator messages and output behind each case

``add`` appends the cases first, then replaces embeddings.npy atomically (temp file + os.replace), then
library.json. An interrupted add therefore leaves cases without embeddings, never the reverse; ``load``
re-embeds that missing tail. More embeddings than cases means the cases file lost lines: a clear error.

Search is cosine similarity (dot product of normalised rows) with numpy or a FAISS flat inner-product
index. The leakage guard: a case from the query's own sample id, or one whose similarity to the query is
at least ``dedupe_threshold`` (a near-duplicate of the query), is never returned.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from agents.embedder import DEFAULT_EMBEDDER, Embedder, EmbedFn, FunctionEmbedder, build_embedder
from data.config import BackendConfig, Cfg, DatasetConfig
from data.jsonl import JsonlAppender, RecordError, iter_records
from data.records import Case, Record, Sample

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
CASES, EMBEDDINGS, META = "cases.jsonl", "embeddings.npy", "library.json"


class LibraryError(RuntimeError):
    """A library folder that is missing, inconsistent or built with another embedder."""


class LibrarySettings(Cfg):
    """How a library embeds and searches (recorded in library.json when the library is created)."""

    embedder: str = DEFAULT_EMBEDDER  # a sentence-transformers model: bundled MiniLM, a local path or hub id
    batch_size: int = Field(default=64, ge=1)  # embedding batch size
    index: Literal["numpy", "faiss"] = "numpy"
    dedupe_threshold: float = Field(default=0.95, gt=0.0, le=1.0)  # similarity >= this: a near-duplicate
    # numpy BLAS threads for one query's search. One query is a matrix-vector product: threads only add
    # wake-up cost (10k cases on 2 busy cores: ~8 ms with 2 BLAS threads, ~0.2 ms with 1). Not persisted.
    # FAISS uses the process's OpenMP thread count, which it shares with torch when torch is loaded first
    # (faiss.omp_set_num_threads would silently change torch's threads), so the library never sets it.
    search_threads: int = Field(default=1, ge=1)


class LibraryBuildConfig(Cfg):
    """``tribunal library build``: seed a library from labels, or by the cold start (agents/library_seed.py)."""

    output: str  # the library folder
    mode: Literal["labels", "cold_start"] = "labels"
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    library_settings: LibrarySettings = Field(default_factory=LibrarySettings)
    # mode: labels
    summary_chars: int = Field(default=300, ge=20)
    excerpt_chars: int = Field(default=1000, ge=50)
    # mode: cold_start
    generate: str | None = None  # a generate config (protocol, backends, roles); its dataset/library are replaced
    transcripts: str | None = None  # cold-start transcripts (default: <output>/cold_start.transcripts.jsonl)
    curator: BackendConfig | None = None  # default: the generate config's "default" backend, shared
    select: Literal["errors", "all"] = "errors"
    curator_max_tokens: int = Field(default=300, ge=16)

    @model_validator(mode="after")
    def _cold_start_needs_generate(self) -> LibraryBuildConfig:
        if self.mode == "cold_start" and not self.generate:
            raise ValueError("mode cold_start needs `generate:` (a generate config with the protocol and backends)")
        return self


class LibraryMeta(Record):
    format_version: Literal[1] = FORMAT_VERSION
    embedder: str
    dim: int | None = None  # known after the first add
    count: int = 0
    index: Literal["numpy", "faiss"] = "numpy"
    dedupe_threshold: float = 0.95
    created_at: str
    updated_at: str


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def sample_text(sample: Sample) -> str:
    """What a sample says, as one text: the prompt (or text), the response, the image description.

    The same composition the Aetheria Supporter uses for its query, so cases and queries live in one space.
    """
    return "\n".join(x for x in (sample.prompt or sample.text, sample.response, sample.image_description) if x)


def case_text(case: Case) -> str:
    """What a case is embedded by: its source excerpt (queries are source content), else its summary."""
    return case.excerpt.strip() or case.summary


_THREADPOOLS = None


def _blas_limit(threads: int):
    """A context that caps numpy's BLAS threads (threadpoolctl, a scikit-learn dependency)."""
    global _THREADPOOLS
    if _THREADPOOLS is None:
        from threadpoolctl import ThreadpoolController

        _THREADPOOLS = ThreadpoolController()
    return _THREADPOOLS.limit(limits=threads, user_api="blas")


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with tmp.open("wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CaseLibrary:
    def __init__(self, folder: Path, meta: LibraryMeta, embedder: Embedder, cases: list[Case], vectors: np.ndarray):
        self.folder, self.meta, self.embedder = folder, meta, embedder
        self.cases: list[Case] = cases
        self.vectors = vectors
        self._by_id = {c.id: i for i, c in enumerate(cases)}
        self._by_sample: dict[str, list[int]] = {}
        for i, c in enumerate(cases):
            if c.sample_id is not None:
                self._by_sample.setdefault(c.sample_id, []).append(i)
        self._faiss = None
        self.search_threads = 1

    # ------------------------------------------------------------------ opening
    @staticmethod
    def _embedder(name: str, batch_size: int, embed_fn: EmbedFn | None, embedder: Embedder | None) -> Embedder:
        if embedder is not None:
            return embedder
        if embed_fn is not None:
            return FunctionEmbedder(embed_fn, name=name)
        return build_embedder(name, batch_size=batch_size)

    @classmethod
    def exists(cls, folder: str | Path) -> bool:
        return (Path(folder) / META).is_file()

    @classmethod
    def open(cls, folder: str | Path, settings: LibrarySettings | None = None, *, embed_fn: EmbedFn | None = None,
             embedder: Embedder | None = None) -> CaseLibrary:
        """Load the library in ``folder``, or create an empty one there with ``settings``.

        An existing library keeps its embedder; asking for another one is an error (different spaces).
        ``index`` and ``dedupe_threshold`` from ``settings`` apply to this session.
        """
        settings = settings or LibrarySettings()
        folder = Path(folder)
        if cls.exists(folder):
            lib = cls.load(folder, embed_fn=embed_fn, embedder=embedder, index=settings.index,
                           dedupe_threshold=settings.dedupe_threshold, batch_size=settings.batch_size,
                           search_threads=settings.search_threads)
            if lib.meta.embedder != settings.embedder and len(lib) == 0:  # nothing embedded yet: adopt it
                lib.meta.embedder, lib.meta.dim = settings.embedder, None
                lib.embedder = cls._embedder(settings.embedder, settings.batch_size, embed_fn, embedder)
                lib._write_meta()
            elif lib.meta.embedder != settings.embedder:
                raise LibraryError(f"{folder}: the library was built with embedder {lib.meta.embedder!r}, "
                                   f"not {settings.embedder!r}; use a new folder or the same embedder")
            return lib
        if folder.exists() and any(folder.glob(CASES)):
            raise LibraryError(f"{folder}: has {CASES} but no {META}; not a library this tool wrote")
        folder.mkdir(parents=True, exist_ok=True)
        t = now_iso()
        meta = LibraryMeta(embedder=settings.embedder, index=settings.index,
                           dedupe_threshold=settings.dedupe_threshold, created_at=t, updated_at=t)
        emb = cls._embedder(settings.embedder, settings.batch_size, embed_fn, embedder)
        lib = cls(folder, meta, emb, [], np.zeros((0, 0), dtype=np.float32))
        lib.search_threads = settings.search_threads
        lib._write_meta()
        return lib

    @classmethod
    def load(cls, folder: str | Path, *, embed_fn: EmbedFn | None = None, embedder: Embedder | None = None,
             index: str | None = None, dedupe_threshold: float | None = None, batch_size: int = 64,
             search_threads: int = 1) -> CaseLibrary:
        folder = Path(folder)
        meta_path = folder / META
        if not meta_path.is_file():
            raise FileNotFoundError(f"{folder}: not a case library (no {META}); build one with `tribunal library build`")
        try:
            meta = LibraryMeta.model_validate_json(meta_path.read_text(encoding="utf-8"))
        except ValidationError as e:
            err = e.errors()[0]
            raise LibraryError(f"{meta_path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        if index is not None:
            meta.index = index  # type: ignore[assignment]
        if dedupe_threshold is not None:
            meta.dedupe_threshold = dedupe_threshold
        cases_path = folder / CASES
        cases: list[Case] = []
        seen: dict[str, int] = {}
        if cases_path.exists():
            for lineno, case in enumerate(iter_records(cases_path, Case, allow_partial_tail=True), 1):
                if case.id in seen:
                    raise RecordError(cases_path, lineno, "id", f"duplicate case id {case.id!r}")
                seen[case.id] = lineno
                cases.append(case)
        emb_path = folder / EMBEDDINGS
        vectors = np.load(emb_path) if emb_path.exists() else np.zeros((0, meta.dim or 0), dtype=np.float32)
        if vectors.ndim != 2 or vectors.dtype != np.float32:
            raise LibraryError(f"{emb_path}: expected a 2-D float32 array, got {vectors.dtype} {vectors.shape}")
        if len(vectors) and meta.dim is not None and vectors.shape[1] != meta.dim:
            raise LibraryError(f"{emb_path}: rows have {vectors.shape[1]} dims but {META} says {meta.dim}")
        if len(vectors) > len(cases):
            raise LibraryError(f"{folder}: {EMBEDDINGS} has {len(vectors)} rows but {CASES} has {len(cases)} cases; "
                               "the cases file lost lines. Rebuild the library (tribunal library build).")
        lib = cls(folder, meta, cls._embedder(meta.embedder, batch_size, embed_fn, embedder), cases, vectors)
        lib.search_threads = search_threads
        if len(vectors) < len(cases):  # an interrupted add: cases were written, embeddings were not
            missing = len(cases) - len(vectors)
            log.warning("%s: %d cases have no embedding (an interrupted add); embedding them now", folder, missing)
            tail = lib.embedder.encode([case_text(c) for c in cases[len(vectors):]])
            lib.vectors = tail if len(vectors) == 0 else np.concatenate([vectors, tail])
            lib._write_vectors()
            lib._write_meta()
        elif meta.count != len(cases):
            lib._write_meta()
        return lib

    # ------------------------------------------------------------------ state
    def __len__(self) -> int:
        return len(self.cases)

    def __contains__(self, case_id: str) -> bool:
        return case_id in self._by_id

    def get(self, case_id: str) -> Case:
        return self.cases[self._by_id[case_id]]

    @property
    def path(self) -> Path:
        return self.folder

    def _write_meta(self) -> None:
        self.meta.count = len(self.cases)
        self.meta.updated_at = now_iso()
        if len(self.vectors):
            self.meta.dim = int(self.vectors.shape[1])
        data = self.meta.model_dump_json(indent=2).encode("utf-8")
        _write_atomic(self.folder / META, lambda f: f.write(data))

    def _write_vectors(self) -> None:
        _write_atomic(self.folder / EMBEDDINGS, lambda f: np.save(f, self.vectors, allow_pickle=False))

    # ------------------------------------------------------------------ writing
    def add(self, cases: Sequence[Case]) -> list[str]:
        """Embed and persist new cases; ids already in the library are skipped. Returns the added ids."""
        new: list[Case] = []
        ids = set(self._by_id)
        for c in cases:
            if c.id not in ids:
                new.append(c)
                ids.add(c.id)
        if not new:
            return []
        vecs = self.embedder.encode([case_text(c) for c in new])  # before writing: a failure writes nothing
        if len(self.vectors) and vecs.shape[1] != self.vectors.shape[1]:
            raise LibraryError(f"{self.folder}: embedder gave {vecs.shape[1]} dims, library has {self.vectors.shape[1]}")
        with JsonlAppender(self.folder / CASES) as w:
            for c in new:
                w.append(c)
        start = len(self.cases)
        self.vectors = vecs if start == 0 else np.concatenate([self.vectors, vecs])
        self._write_vectors()
        for i, c in enumerate(new, start):
            self.cases.append(c)
            self._by_id[c.id] = i
            if c.sample_id is not None:
                self._by_sample.setdefault(c.sample_id, []).append(i)
        self._write_meta()
        if self._faiss is not None:
            self._faiss.add(vecs)
        return [c.id for c in new]

    # ------------------------------------------------------------------ search
    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.encode(list(texts))

    def search(self, query: str, k: int = 3, *, exclude_sample_id: str | None = None) -> list[tuple[Case, float]]:
        """The ``k`` nearest cases to ``query``, most similar first, never the query's own sample or a
        near-duplicate of it (similarity >= dedupe_threshold)."""
        if k <= 0 or not self.cases:
            return []
        return self.search_vector(self.embed_queries([query])[0], k, exclude_sample_id=exclude_sample_id)

    def search_vector(self, q: np.ndarray, k: int, *, exclude_sample_id: str | None = None) -> list[tuple[Case, float]]:
        n = len(self.cases)
        if k <= 0 or n == 0:
            return []
        q = np.asarray(q, dtype=np.float32).reshape(-1)
        banned = set(self._by_sample.get(exclude_sample_id, ())) if exclude_sample_id is not None else set()
        thr = self.meta.dedupe_threshold
        if self.meta.index == "faiss":
            return self._search_faiss(q, k, banned, thr)
        with _blas_limit(self.search_threads):
            sims = self.vectors @ q
        sims = np.where(sims >= thr, -np.inf, sims)
        if banned:
            sims[list(banned)] = -np.inf
        m = min(k, n)
        top = np.argpartition(-sims, m - 1)[:m] if m < n else np.arange(n)
        top = sorted(top.tolist(), key=lambda i: (-sims[i], i))
        return [(self.cases[i], float(sims[i])) for i in top if np.isfinite(sims[i])]

    def _search_faiss(self, q: np.ndarray, k: int, banned: set[int], thr: float) -> list[tuple[Case, float]]:
        import faiss

        if self._faiss is None:
            self._faiss = faiss.IndexFlatIP(self.vectors.shape[1])
            self._faiss.add(np.ascontiguousarray(self.vectors))
        n = len(self.cases)
        want = min(n, k + len(banned) + 8)
        while True:
            sims, idx = self._faiss.search(q[None, :], want)
            out = [(int(i), float(s)) for s, i in zip(sims[0], idx[0]) if i >= 0 and i not in banned and s < thr]
            if len(out) >= k or want >= n:
                out.sort(key=lambda x: (-x[1], x[0]))
                return [(self.cases[i], s) for i, s in out[:k]]
            want = min(n, want * 4)

    def info(self) -> dict:
        labels: dict[str, int] = {}
        for c in self.cases:
            labels[c.label] = labels.get(c.label, 0) + 1
        return {"folder": str(self.folder), **json.loads(self.meta.model_dump_json()), "labels": labels}
