"""Tests for eval.metrics.

Every expected number below is computed by hand from the fixture (confusion
counts, concordant pairs, bin means written out in comments) - never by calling
scikit-learn again.
"""

import math

import pytest

from eval import metrics

U, S = "unsafe", "safe"
approx = pytest.approx


def isnan(x):
    return isinstance(x, float) and math.isnan(x)


def kappa_from_counts(tp, fp, tn, fn):
    """Cohen's kappa written out: (po - pe) / (1 - pe) from the 2x2 counts."""
    n = tp + fp + tn + fn
    po = (tp + tn) / n
    gold_u, gold_s = tp + fn, tn + fp
    pred_u, pred_s = tp + fp, tn + fn
    pe = (gold_u * pred_u + gold_s * pred_s) / (n * n)
    return (po - pe) / (1 - pe)


# 12 items; two invalid predictions (item 5: unsafe gold, None; item 10: safe gold, "maybe").
#   idx  gold  pred    outcome
#   1    U     U       TP
#   2    U     U       TP
#   3    U     U       TP
#   4    U     S       FN
#   5    U     None    invalid  (wrong -> FN)
#   6    S     S       TN
#   7    S     S       TN
#   8    S     S       TN
#   9    S     U       FP
#   10   S     "maybe" invalid  (wrong -> FP)
#   11   S     S       TN
#   12   S     U       FP
GOLD = [U, U, U, U, U, S, S, S, S, S, S, S]
PRED = [U, U, U, S, None, S, S, S, U, "maybe", S, U]


# --------------------------------------------------------------------------- binary_metrics
def test_labels_constant():
    assert metrics.LABELS == ("safe", "unsafe")


def test_binary_metrics_exclude_by_hand():
    m = metrics.binary_metrics(GOLD, PRED, invalid="exclude")
    # exclude: 10 items left; tp=3 fn=1 tn=4 fp=2
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (3, 2, 4, 1)
    assert m["n"] == 10 and m["n_invalid"] == 2 and m["invalid_policy"] == "exclude"
    assert m["precision"] == approx(3 / 5)  # tp / (tp + fp)
    assert m["recall"] == approx(3 / 4)  # tp / (tp + fn)
    assert m["f1"] == approx(2 * 3 / (2 * 3 + 2 + 1))  # 2tp / (2tp + fp + fn) = 2/3
    assert m["accuracy"] == approx(7 / 10)
    assert m["fnr"] == approx(1 / 4)
    assert m["fpr"] == approx(2 / 6)
    # po = 0.7; gold U/S = 4/6, pred U/S = 5/5 -> pe = (4*5 + 6*5)/100 = 0.5 -> kappa = 0.4
    assert m["kappa"] == approx(0.4)
    assert m["kappa"] == approx(kappa_from_counts(3, 2, 4, 1))


def test_binary_metrics_wrong_by_hand():
    m = metrics.binary_metrics(GOLD, PRED, invalid="wrong")
    # wrong: item 5 becomes an FN, item 10 an FP -> tp=3 fn=2 tn=4 fp=3 over 12 items
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (3, 3, 4, 2)
    assert m["n"] == 12 and m["n_invalid"] == 2 and m["invalid_policy"] == "wrong"
    assert m["precision"] == approx(3 / 6)
    assert m["recall"] == approx(3 / 5)
    assert m["f1"] == approx(6 / 11)  # 2*3 / (6 + 3 + 2)
    assert m["accuracy"] == approx(7 / 12)
    assert m["fnr"] == approx(2 / 5)
    assert m["fpr"] == approx(3 / 7)
    # po = 7/12; gold U/S = 5/7, pred U/S = 6/6 -> pe = (30 + 42)/144 = 0.5 -> kappa = (1/12)/(1/2) = 1/6
    assert m["kappa"] == approx(1 / 6)
    assert m["kappa"] == approx(kappa_from_counts(3, 3, 4, 2))


def test_invalid_policies_differ_on_same_input():
    ex = metrics.binary_metrics(GOLD, PRED, invalid="exclude")
    wr = metrics.binary_metrics(GOLD, PRED, invalid="wrong")
    assert ex["f1"] == approx(2 / 3) and wr["f1"] == approx(6 / 11)
    assert ex["accuracy"] > wr["accuracy"]
    assert (ex["n"], wr["n"]) == (10, 12)


def test_other_spellings_are_invalid_and_numpy_inputs_work():
    np = pytest.importorskip("numpy")
    m = metrics.binary_metrics(np.array([U, S, U]), np.array([U, S, "UNSAFE"], dtype=object))
    assert m["n_invalid"] == 1 and m["n"] == 2
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (1, 0, 1, 0)
    assert m["accuracy"] == 1.0


def test_default_policy_is_exclude():
    assert metrics.binary_metrics(GOLD, PRED)["invalid_policy"] == "exclude"
    assert metrics.binary_metrics(GOLD, PRED)["n"] == 10


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        metrics.binary_metrics(GOLD, PRED, invalid="skip")
    with pytest.raises(ValueError):
        metrics.binary_metrics([U, "harmful"], [U, U])
    with pytest.raises(ValueError):
        metrics.binary_metrics([U, S], [U])


def test_degenerate_no_positives_gives_nan_not_exception():
    m = metrics.binary_metrics([S, S, S], [S, S, S])
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (0, 0, 3, 0)
    for k in ("precision", "recall", "f1", "fnr", "kappa"):
        assert isnan(m[k]), k
    assert m["accuracy"] == 1.0
    assert m["fpr"] == 0.0


def test_degenerate_all_unsafe_agreeing_kappa_nan():
    m = metrics.binary_metrics([U, U], [U, U])
    assert m["precision"] == 1.0 and m["recall"] == 1.0 and m["f1"] == 1.0
    assert isnan(m["kappa"])  # pe = 1
    assert isnan(m["fpr"]) and m["fnr"] == 0.0


def test_degenerate_never_predicts_unsafe():
    m = metrics.binary_metrics([U, U, S], [S, S, S])
    assert isnan(m["precision"])  # 0 / 0 predicted positives
    assert m["recall"] == 0.0 and m["f1"] == 0.0 and m["fnr"] == 1.0
    # po = 1/3; gold U/S = 2/1, pred U/S = 0/3 -> pe = 3/9 -> kappa = 0
    assert m["kappa"] == approx(0.0)


@pytest.mark.parametrize("gold,pred", [([], []), ([U, S], [None, "x"])])
def test_degenerate_nothing_to_score(gold, pred):
    m = metrics.binary_metrics(gold, pred)
    assert m["n"] == 0 and m["n_invalid"] == len(pred)
    for k in ("precision", "recall", "f1", "accuracy", "fnr", "fpr", "kappa"):
        assert isnan(m[k]), k


# --------------------------------------------------------------------------- agreement
def test_agreement_by_hand():
    a = [U, U, S, S, U, None, S]
    b = [U, S, S, S, U, U, "x"]
    r = metrics.agreement(a, b)
    # both valid on first 5: (U,U) (U,S) (S,S) (S,S) (U,U) -> 4/5 agree
    assert r["n"] == 5
    assert r["agreement"] == approx(0.8)
    # a: U=3 S=2, b: U=2 S=3 -> pe = (3*2 + 2*3)/25 = 12/25; kappa = (20/25 - 12/25)/(13/25) = 8/13
    assert r["kappa"] == approx(8 / 13)


def test_agreement_degenerate():
    assert isnan(metrics.agreement([None], [U])["agreement"])
    r = metrics.agreement([S, S], [S, S])
    assert r["agreement"] == 1.0 and isnan(r["kappa"])


# --------------------------------------------------------------------------- scores
def test_auroc_by_counting_pairs():
    gold = [U, U, U, S, S]
    scores = [0.9, 0.4, 0.6, 0.4, 0.2]
    # pos x neg pairs: (.9,.4)=1 (.9,.2)=1 (.4,.4)=0.5 tie (.4,.2)=1 (.6,.4)=1 (.6,.2)=1 -> 5.5 / 6
    m = metrics.score_metrics(gold, scores)
    assert m["auroc"] == approx(5.5 / 6)
    # Brier: (0.1^2 + 0.6^2 + 0.4^2 + 0.4^2 + 0.2^2) / 5 = 0.73 / 5
    assert m["brier"] == approx(0.146)
    assert m["n_scored"] == 5


def test_auprc_average_precision_by_hand():
    # ranked by score: U(.9) S(.8) U(.7) S(.3) U(.2); 3 positives
    # recall steps at ranks 1, 3, 5 with precision 1/1, 2/3, 3/5
    # AP = sum (R_k - R_{k-1}) * P_k = 1/3 * (1 + 2/3 + 3/5) = 34/45
    m = metrics.score_metrics([U, S, U, S, U], [0.9, 0.8, 0.7, 0.3, 0.2])
    assert m["auprc"] == approx(34 / 45)
    # AUROC here: (.9>.8)(.9>.3)(.7>.3) concordant, 3 discordant -> 3/6
    assert m["auroc"] == approx(0.5)


def test_score_metrics_drops_missing_scores():
    m = metrics.score_metrics([U, S, U, S], [0.8, None, float("nan"), 0.3])
    assert m["n_scored"] == 2 and m["n_missing_score"] == 2
    assert m["auroc"] == 1.0
    assert m["brier"] == approx((0.2**2 + 0.3**2) / 2)


def test_score_metrics_single_class_nan():
    m = metrics.score_metrics([S, S, S], [0.1, 0.2, 0.3])
    assert isnan(m["auroc"]) and isnan(m["auprc"])
    # Brier stays defined for a single class: (0.01 + 0.04 + 0.09) / 3
    assert m["brier"] == approx(0.14 / 3)
    m = metrics.score_metrics([U, S], [None, None])
    assert m["n_scored"] == 0 and isnan(m["auroc"]) and isnan(m["brier"]) and isnan(m["ece"])


def test_score_metrics_rejects_out_of_range():
    with pytest.raises(ValueError):
        metrics.score_metrics([U, S], [1.5, 0.2])


# 2-bin ECE example: bin [0, .5) holds probs .1 .3 (gold 0, 1); bin [.5, 1] holds .6 .7 .8 .9 (gold 1 1 0 1)
ECE_GOLD = [0, 1, 1, 1, 0, 1]
ECE_PROBS = [0.1, 0.3, 0.6, 0.7, 0.8, 0.9]


def test_ece_two_bins_by_hand():
    # bin 0: mean prob 0.2, frac pos 0.5 -> gap 0.3, weight 2/6
    # bin 1: mean prob 3.0/4 = 0.75, frac pos 3/4 -> gap 0, weight 4/6
    # ECE = 2/6 * 0.3 + 4/6 * 0 = 0.1   (the unweighted mean of gaps would be 0.15)
    assert metrics.ece(ECE_GOLD, ECE_PROBS, n_bins=2) == approx(0.1)


def test_ece_via_score_metrics_reports_bins():
    m = metrics.score_metrics([U if g else S for g in ECE_GOLD], ECE_PROBS, n_bins=2)
    assert m["ece"] == approx(0.1) and m["ece_bins"] == 2
    assert metrics.score_metrics([U, S], [0.5, 0.5])["ece_bins"] == 10


def test_reliability_bins_by_hand():
    bins = metrics.reliability_bins(ECE_GOLD, ECE_PROBS, n_bins=2)
    assert [(b["lower"], b["upper"], b["count"]) for b in bins] == [(0.0, 0.5, 2), (0.5, 1.0, 4)]
    assert bins[0]["mean_prob"] == approx(0.2) and bins[0]["frac_pos"] == approx(0.5)
    assert bins[1]["mean_prob"] == approx(0.75) and bins[1]["frac_pos"] == approx(0.75)


def test_reliability_bin_edges_and_empty_bins():
    # 0.5 belongs to the upper bin, 1.0 to the last bin, 0.3 to [0.3, 0.4) with 10 bins
    bins = metrics.reliability_bins([1, 1, 0], [0.5, 1.0, 0.3], n_bins=10)
    counts = [b["count"] for b in bins]
    assert counts == [0, 0, 0, 1, 0, 1, 0, 0, 0, 1]
    assert isnan(bins[0]["mean_prob"]) and isnan(bins[0]["frac_pos"])
    # ECE = 1/3*|0.3-0| + 1/3*|0.5-1| + 1/3*|1.0-1| = 0.8/3
    assert metrics.ece([1, 1, 0], [0.5, 1.0, 0.3]) == approx(0.8 / 3)


# --------------------------------------------------------------------------- bootstrap
BOOT_GOLD = [U] * 10 + [S] * 10
BOOT_PRED = [U] * 7 + [S] * 3 + [S] * 8 + [U] * 2  # tp=7 fn=3 tn=8 fp=2 -> acc 0.75


def _acc(g, p):
    # plain-Python accuracy keeps the 100-resample test fast; fn is arbitrary for bootstrap_ci
    return sum(x == y for x, y in zip(g, p)) / len(g)


def test_bootstrap_ci_contains_point_and_is_deterministic():
    lo, hi = metrics.bootstrap_ci(_acc, BOOT_GOLD, BOOT_PRED, n_boot=100, seed=7)
    assert lo <= 0.75 <= hi
    assert hi - lo > 0
    assert 0.0 <= lo and hi <= 1.0
    assert metrics.bootstrap_ci(_acc, BOOT_GOLD, BOOT_PRED, n_boot=100, seed=7) == (lo, hi)
    assert metrics.bootstrap_ci(_acc, BOOT_GOLD, BOOT_PRED, n_boot=100, seed=8) != (lo, hi)


def test_bootstrap_resamples_jointly():
    # a and b are identical item by item: a joint resample always agrees; independent ones would not
    a = list(range(30))
    lo, hi = metrics.bootstrap_ci(
        lambda x, y: float(sum(i == j for i, j in zip(x, y)) / len(x)), a, list(a), n_boot=100, seed=0
    )
    assert (lo, hi) == (1.0, 1.0)


def test_bootstrap_skips_nan_and_all_nan():
    # statistic is nan whenever the resample contains a 0, else 1.0 -> nan resamples must be skipped
    lo, hi = metrics.bootstrap_ci(lambda x: float("nan") if 0 in x else 1.0, [0, 1], n_boot=200, seed=0)
    assert (lo, hi) == (1.0, 1.0)
    lo, hi = metrics.bootstrap_ci(lambda x: float("nan"), [1, 2, 3], n_boot=20)
    assert isnan(lo) and isnan(hi)
    lo, hi = metrics.bootstrap_ci(lambda x: 0.0, [], n_boot=20)
    assert isnan(lo) and isnan(hi)


def test_metrics_with_ci():
    unsafe_scores = [0.9, 0.8, 0.7, 0.6, 0.6, 0.55, 0.5, 0.4, 0.45, 0.3]
    safe_scores = [0.1, 0.2, 0.3, 0.35, 0.2, 0.1, 0.4, 0.45, 0.7, 0.6]
    scores = unsafe_scores + safe_scores
    r = metrics.metrics_with_ci(BOOT_GOLD, BOOT_PRED, scores, n_boot=100, seed=3)
    # point estimates by hand: tp=7 fn=3 tn=8 fp=2
    assert r["accuracy"] == approx(0.75)
    assert r["precision"] == approx(7 / 9) and r["recall"] == approx(0.7)
    assert r["f1"] == approx(14 / 19)  # 2*7 / (14 + 2 + 3)
    assert r["kappa"] == approx(0.5)  # po 0.75, pe = (10*9 + 10*11)/400 = 0.5
    assert set(r["ci"]) == {"f1", "accuracy", "precision", "recall", "kappa", "auroc"}
    for k, (lo, hi) in r["ci"].items():
        assert lo <= r[k] <= hi, k
        assert hi > lo, k
    # same seed -> same resamples as bootstrap_ci on that single metric
    f1_ci = metrics.bootstrap_ci(
        lambda g, p: metrics.binary_metrics(g, p)["f1"], BOOT_GOLD, BOOT_PRED, n_boot=100, seed=3
    )
    assert r["ci"]["f1"] == approx(f1_ci)


def test_metrics_with_ci_without_scores_has_no_auroc():
    r = metrics.metrics_with_ci(GOLD, PRED, invalid="wrong", n_boot=50, seed=0)
    assert "auroc" not in r["ci"] and r["invalid_policy"] == "wrong"
    assert r["f1"] == approx(6 / 11)


# --------------------------------------------------------------------------- breakdown
def test_breakdown_by_group():
    groups = ["a", "a", "a", "b", "b", None, None]
    gold = [U, U, S, U, S, S, U]
    pred = [U, S, S, U, U, None, U]
    scores = [0.9, 0.2, 0.1, 0.8, 0.6, 0.5, None]
    r = metrics.breakdown(groups, gold, pred, scores)
    assert list(r) == ["a", "b", "unknown"]
    # a: tp=1 fn=1 tn=1 -> acc 2/3, recall 1/2, precision 1
    a = r["a"]
    assert (a["tp"], a["fp"], a["tn"], a["fn"]) == (1, 0, 1, 1)
    assert a["accuracy"] == approx(2 / 3) and a["recall"] == approx(0.5) and a["precision"] == 1.0
    assert a["auroc"] == approx(1.0)  # pos .9, .2 vs neg .1 -> both concordant
    # b: tp=1 fp=1 -> acc 1/2, precision 1/2
    b = r["b"]
    assert (b["tp"], b["fp"], b["tn"], b["fn"]) == (1, 1, 0, 0)
    assert b["precision"] == approx(0.5) and b["fpr"] == 1.0
    # unknown: item 6 invalid (excluded), item 7 tp; only item 6 has a score (single class -> auroc nan)
    u = r["unknown"]
    assert u["n"] == 1 and u["n_invalid"] == 1 and u["tp"] == 1
    assert u["n_scored"] == 1 and isnan(u["auroc"])


def test_breakdown_wrong_policy_and_no_scores():
    r = metrics.breakdown([None, None], [S, U], [None, U], invalid="wrong")
    assert list(r) == ["unknown"]
    assert (r["unknown"]["fp"], r["unknown"]["tp"]) == (1, 1)
    assert "auroc" not in r["unknown"]


# --------------------------------------------------------------------------- latency
def test_latency_stats_by_hand():
    r = metrics.latency_stats([3.0, 1.0, None, 4.0, 2.0, 100.0])
    assert r["n"] == 5
    assert r["p50"] == approx(3.0)
    # sorted 1 2 3 4 100; p95 position 0.95*4 = 3.8 -> 4 + 0.8*(100-4) = 80.8
    assert r["p95"] == approx(80.8)
    assert r["mean"] == approx(22.0)
    assert isnan(metrics.latency_stats([])["p50"])
