"""``metrics.metrics_with_ci`` for labels, computed once per distinct resample instead of once per resample.

Every classification metric depends on a resample only through how many items fall in each
(gold, prediction) cell: gold safe/unsafe x prediction safe/unsafe/invalid. So this draws exactly the
resamples ``eval.metrics`` draws (the same ``default_rng(seed)`` calls), reduces each to its cell counts,
and calls ``metrics.binary_metrics`` (scikit-learn) once per distinct count vector. The result is the
same dict as ``metrics.metrics_with_ci(gold, pred, None, ...)`` (tests check equality); small groups,
where many resamples coincide, get their CIs many times faster.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eval import metrics

_PRED_CODES = {"safe": 0, "unsafe": 1}  # anything else is invalid: code 2


def _cells(gold: Sequence[str], pred: Sequence[str | None]) -> np.ndarray:
    g = np.array([1 if x == "unsafe" else 0 for x in gold], dtype=np.int64)
    p = np.array([_PRED_CODES.get(x, 2) if isinstance(x, str) else 2 for x in pred], dtype=np.int64)
    return g * 3 + p  # cell 0..5


def _arrays_for(counts: tuple[int, ...]) -> tuple[list[str], list[str | None]]:
    gold, pred = [], []
    for cell, c in enumerate(counts):
        g, p = divmod(cell, 3)
        gold += ["unsafe" if g else "safe"] * c
        pred += [("safe", "unsafe", None)[p]] * c
    return gold, pred


def classification_with_ci(
    gold: Sequence[str],
    pred: Sequence[str | None],
    *,
    invalid: str = "exclude",
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict:
    """Equal to ``metrics.metrics_with_ci(gold, pred, None, invalid=, n_boot=, seed=, alpha=)``."""
    gold, pred = list(gold), list(pred)
    point = metrics.binary_metrics(gold, pred, invalid=invalid)
    n = len(gold)
    cells = _cells(gold, pred)
    cache: dict[tuple[int, ...], dict] = {}
    boots = []
    if n and n_boot >= 1:
        rng = np.random.default_rng(seed)
        for _ in range(int(n_boot)):
            idx = rng.integers(0, n, size=n)  # the draw eval.metrics makes for each resample
            key = tuple(np.bincount(cells[idx], minlength=6).tolist())
            if key not in cache:
                cache[key] = metrics.binary_metrics(*_arrays_for(key), invalid=invalid)
            boots.append(cache[key])
    point["ci"] = {k: metrics._percentile_ci([b[k] for b in boots], alpha) for k in metrics.CI_KEYS}
    point["ci_level"] = 1 - alpha
    point["n_boot"] = int(n_boot)
    return point
