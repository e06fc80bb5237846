"""A deterministic tiny embedder for tests: hashed bag of words (no model load)."""
from __future__ import annotations

import numpy as np
from sklearn.feature_extraction.text import HashingVectorizer

NAME = "hash-bow-256"
_VEC = HashingVectorizer(n_features=256, alternate_sign=False, norm="l2")


def hash_embed(texts) -> np.ndarray:
    return _VEC.transform(list(texts)).toarray().astype(np.float32)
