"""Cost and speed of one system from its prediction rows: tokens, dollars, latency, throughput.

Per-item averages are over the items the system finished (failed and missing items are counted, not
averaged). Latency is the sum of an item's turn latencies (p50 / p95 over items). Throughput is items
(finished + failed) per second of *busy time*: the union of the intervals [created_at, created_at +
wall_s] of the item transcripts, so items processed together in one batch are not counted twice and gaps
between resumed runs are left out (created_at has one-second resolution).
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np

from eval.metrics import latency_stats
from eval.predictions import FAILED, Prediction

NAN = float("nan")


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else NAN


def busy_seconds(preds: list[Prediction]) -> float:
    """Length of the union of the items' [start, start + wall_s] intervals (nan when none is recorded)."""
    spans = sorted(
        (p.started_at, p.started_at + timedelta(seconds=p.wall_s))
        for p in preds
        if p.started_at is not None and p.wall_s > 0
    )
    if not spans:
        return NAN
    total, (cur_lo, cur_hi) = 0.0, spans[0]
    for lo, hi in spans[1:]:
        if lo > cur_hi:
            total += (cur_hi - cur_lo).total_seconds()
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    return total + (cur_hi - cur_lo).total_seconds()


def cost_speed(preds: list[Prediction]) -> dict:
    done = [p for p in preds if p.ran]
    failed = [p for p in preds if p.invalid_reason == FAILED]
    roles = sorted({r for p in done for r in p.tokens_by_role})
    per_role = {
        r: {
            k: _mean([p.tokens_by_role.get(r, {}).get(k, 0) for p in done])
            for k in ("prompt", "completion", "calls")
        }
        for r in roles
    }
    busy = busy_seconds(done + failed)
    n_run = len(done) + len(failed)
    return {
        "n_finished": len(done),
        "n_failed": len(failed),
        "prompt_tokens_per_item": _mean([p.prompt_tokens for p in done]),
        "completion_tokens_per_item": _mean([p.completion_tokens for p in done]),
        "tokens_per_item": _mean([p.prompt_tokens + p.completion_tokens for p in done]),
        "tokens_per_item_by_role": per_role,
        "cost_usd_per_item": _mean([p.cost_usd for p in done]),
        "cost_usd_total": float(sum(p.cost_usd for p in done + failed)),
        "latency_s": latency_stats([p.latency_s for p in done]),
        "wall_s_per_item": latency_stats([p.wall_s for p in done]),
        "busy_s": busy,
        "items_per_s": n_run / busy if busy and np.isfinite(busy) and busy > 0 else NAN,
    }


def ratio(a: float, b: float) -> float:
    """a / b, nan when b is zero or either is nan (e.g. a teacher with no recorded cost)."""
    if not (np.isfinite(a) and np.isfinite(b)) or b == 0:
        return NAN
    return float(a / b)


def relative_to_teacher(cs: dict, teacher: dict) -> dict:
    return {
        "cost_x_teacher": ratio(cs["cost_usd_per_item"], teacher["cost_usd_per_item"]),
        "tokens_x_teacher": ratio(cs["tokens_per_item"], teacher["tokens_per_item"]),
        "latency_p50_x_teacher": ratio(cs["latency_s"]["p50"], teacher["latency_s"]["p50"]),
    }
