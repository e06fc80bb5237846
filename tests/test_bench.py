"""tribunal bench: join reporting, invalid conventions, numbers equal eval.metrics, teacher, cost, plots."""

from __future__ import annotations

import json
import math

import pytest

from data.config import ConfigError, Price, validate_config
from data.jsonl import RecordError
from data.records import (
    BackendRef,
    Message,
    ProtocolInfo,
    Provenance,
    Sample,
    Transcript,
    Turn,
    Usage,
    Verdict,
)
from eval import metrics
from eval.bench import BenchConfig, run_bench
from eval.plots import write_plots
from eval.report import write_report
from scripts.cli import main

U, S = "unsafe", "safe"
T0 = "2026-01-01T00:00:00+00:00"


def sample(
    sid: str, label: str | None, category: str = "c1", source: str = "src", image: bool = False
) -> Sample:
    return Sample(
        id=sid,
        source=source,
        text=f"content of {sid}",
        label=label,
        category=category,
        image_description="a photo" if image else None,
        modality="text+image" if image else "text",
    )


def transcript(
    s: Sample,
    label: str | None,
    score: float | None,
    *,
    turns=(("judge", 10, 5),),
    cost=0.0,
    latency=0.5,
    model="m",
    created=T0,
    wall=1.0,
    parse_error=None,
    error=None,
    system="sys",
) -> Transcript:
    """A finished transcript; ``turns`` = (role, prompt tokens, completion tokens), ``cost`` per turn."""
    tt = [
        Turn(
            step=f"s{i}",
            role=role,
            backend=BackendRef(kind="scripted", model=model),
            messages=[Message(role="user", content="x")],
            output="out",
            usage=Usage(prompt_tokens=pt, completion_tokens=ct),
            latency_s=latency,
            cost_usd=cost,
        )
        for i, (role, pt, ct) in enumerate(turns)
    ]
    return Transcript(
        id=f"{system}:{s.id}",
        sample=s,
        protocol=ProtocolInfo(name=system, version="1"),
        turns=tt,
        verdict=Verdict(label=label, score=score, parse_error=parse_error),
        provenance=Provenance(tool_version="0", config_hash="h", created_at=created),
        usage={"wall_s": wall},
        error=error,
    )


def write_jsonl(path, records) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(
            (r.model_dump_json() if hasattr(r, "model_dump_json") else json.dumps(r)) + "\n" for r in records
        )
    )
    return str(path)


def bench_cfg(tmp_path, systems, dataset=None, **kw) -> BenchConfig:
    raw = {
        "output_dir": str(tmp_path / "out"),
        "systems": systems,
        "n_boot": 50,
        "breakdown_n_boot": 20,
        **kw,
    }
    if dataset is not None:
        raw["dataset"] = dataset
    return validate_config(raw, BenchConfig)


def run_and_write(cfg: BenchConfig, plots: bool = False):
    rep, preds = run_bench(cfg, git_sha="abc")
    if plots:
        rep["plots"] = list(write_plots(rep, preds, cfg.output_dir))
    write_report(rep, preds, cfg.output_dir)
    return rep, preds


def close(a, b) -> bool:
    """Equal numbers, where report.json's null stands for eval.metrics' nan."""
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return b is not None and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


# ------------------------------------------------------------------ fixtures: 12 gold items, three systems
GOLD = [U, U, U, U, U, S, S, S, S, S, S, U]
CATS = [
    "weapons",
    "weapons",
    "hate",
    "hate",
    "self_harm",
    "benign",
    "benign",
    "benign",
    "hate",
    "weapons",
    "benign",
    "self_harm",
]
SAMPLES = [
    sample(f"i{k:02d}", g, c, source="a" if k % 2 else "b", image=k in (3, 7))
    for k, (g, c) in enumerate(zip(GOLD, CATS, strict=True))
]
TEACHER = (
    [U, U, U, S, U, S, S, U, S, S, S, U],
    [0.9, 0.8, 0.7, 0.4, 0.6, 0.1, 0.2, 0.7, 0.3, 0.2, 0.4, 0.95],
)
# the student: one verdict without a label (i04), one review (i06), i10 failed (errors file), i11 missing
STUDENT = (
    [U, U, S, S, None, "review", S, S, U, S, None, None],
    [0.8, 0.9, 0.4, 0.3, 0.5, 0.6, 0.1, 0.3, 0.6, 0.2, None, None],
)


@pytest.fixture()
def files(tmp_path):
    ds = write_jsonl(tmp_path / "gold.jsonl", SAMPLES)
    tpath = write_jsonl(
        tmp_path / "teacher.jsonl",
        [
            transcript(
                s,
                lab,
                sc,
                turns=(("strict", 100, 20), ("loose", 100, 20), ("arbiter", 200, 40)),
                cost=0.01,
                latency=2.0,
                system="aetheria",
            )
            for s, lab, sc in zip(SAMPLES, *TEACHER, strict=True)
        ],
    )
    main_rows, err_rows = [], []
    for k, (s, lab, sc) in enumerate(zip(SAMPLES, *STUDENT, strict=True)):
        if k == 10:
            err_rows.append(transcript(s, None, None, error="backend error", system="student"))
        elif k != 11:
            main_rows.append(
                transcript(
                    s,
                    lab,
                    sc,
                    turns=(("judge", 50, 10),),
                    cost=0.001,
                    latency=0.25,
                    parse_error="no label found" if k == 4 else None,
                    system="student",
                )
            )
    extra = transcript(sample("zz_extra", S), S, 0.1, system="student")
    spath = write_jsonl(tmp_path / "student.jsonl", main_rows + [extra])
    write_jsonl(tmp_path / "student.errors.jsonl", err_rows)
    return {"dataset": ds, "teacher": tpath, "student": spath}


def systems(files, review_as="invalid"):
    return [
        {"name": "teacher", "path": files["teacher"], "role": "teacher"},
        {"name": "student", "path": files["student"], "role": "student", "review_as": review_as},
    ]


# ------------------------------------------------------------------ config
def test_config_rejects_unknown_keys_and_unknown_teacher(tmp_path):
    with pytest.raises(ConfigError, match="colour: unknown key"):
        validate_config({"systems": [{"name": "a", "path": "p"}], "colour": 1}, BenchConfig)
    with pytest.raises(ConfigError, match="teacher 'nope' is not one of the systems"):
        validate_config({"systems": [{"name": "a", "path": "p"}], "teacher": "nope"}, BenchConfig)
    with pytest.raises(ConfigError, match="unique"):
        validate_config({"systems": [{"name": "a", "path": "p"}, {"name": "a", "path": "q"}]}, BenchConfig)
    cfg = validate_config(
        {"systems": [{"name": "a", "path": "p", "role": "teacher"}, {"name": "b", "path": "q"}]}, BenchConfig
    )
    assert cfg.teacher == "a"  # the one system with role teacher


# ------------------------------------------------------------------ join
def test_join_reports_missing_extra_and_failed_ids(tmp_path, files):
    rep, preds = run_and_write(bench_cfg(tmp_path, systems(files), {"path": files["dataset"]}))
    j = rep["systems"]["student"]["join"]
    assert j["missing_ids"] == ["i11"] and j["extra_ids"] == ["zz_extra"] and j["failed_ids"] == ["i10"]
    assert (j["n_items"], j["n_finished"], j["n_failed"], j["n_missing"], j["n_extra"]) == (12, 10, 1, 1, 1)
    assert rep["systems"]["teacher"]["join"]["missing_ids"] == []
    inv = rep["systems"]["student"]["invalid"]
    assert (
        inv["by_reason"] == {"no_label": 1, "review": 1, "failed": 1, "missing": 1} and inv["n_invalid"] == 4
    )
    md = (tmp_path / "out" / "report.md").read_text()
    assert "student: missing ids: `i11`" in md and "student: extra ids: `zz_extra`" in md
    assert "student: failed ids: `i10`" in md
    # the extra item is not scored; every system is scored on the 12 gold items
    assert [p.sample_id for p in preds["student"]] == [s.id for s in SAMPLES]


def test_without_a_dataset_gold_comes_from_the_transcripts(tmp_path, files):
    rep, _ = run_bench(bench_cfg(tmp_path, systems(files)))
    assert (
        rep["gold"]["origin"] == "transcripts" and rep["gold"]["n_items"] == 13
    )  # 12 + the student's extra item
    assert rep["systems"]["teacher"]["join"]["missing_ids"] == ["zz_extra"]


def test_duplicate_sample_id_is_an_error_naming_file_and_line(tmp_path, capsys):
    s = sample("dup", U)
    path = write_jsonl(
        tmp_path / "sys.jsonl",
        [
            transcript(s, U, 0.9),
            transcript(sample("other", S), S, 0.1),
            transcript(s, S, 0.2, system="again"),
        ],
    )
    cfg = bench_cfg(tmp_path, [{"name": "a", "path": path}])
    with pytest.raises(
        RecordError, match=r"sys\.jsonl:3: sample\.id: duplicate sample id 'dup' \(first on line 1\)"
    ):
        run_bench(cfg)
    cfg_path = tmp_path / "bench_dup.yaml"
    cfg_path.write_text(json.dumps(cfg.model_dump(mode="json")))
    assert main(["bench", "-c", str(cfg_path)]) == 2
    assert "sys.jsonl:3" in capsys.readouterr().err


def test_conflicting_gold_labels_without_a_dataset_are_an_error(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [transcript(sample("x", U), U, 0.9)])
    b = write_jsonl(tmp_path / "b.jsonl", [transcript(sample("x", S), S, 0.1)])
    with pytest.raises(RecordError, match=r"b\.jsonl:1: sample\.label: .*conflicts .*a\.jsonl:1"):
        run_bench(bench_cfg(tmp_path, [{"name": "a", "path": a}, {"name": "b", "path": b}]))


# ------------------------------------------------------------------ the invalid conventions
def test_an_invalid_prediction_changes_as_wrong_but_not_excluded(tmp_path):
    items = [sample(f"x{k}", g) for k, g in enumerate([U, U, S, S, U])]
    preds = [U, S, S, U, None]  # the last one is invalid
    ds = write_jsonl(tmp_path / "gold.jsonl", items)
    sysf = write_jsonl(
        tmp_path / "sys.jsonl", [transcript(s, p, None) for s, p in zip(items, preds, strict=True)]
    )
    spec = [{"name": "sys", "path": sysf}]
    without, _ = run_bench(
        bench_cfg(tmp_path, spec, {"path": ds, "limit": 4})
    )  # the invalid item is not gold
    with_inv, _ = run_bench(bench_cfg(tmp_path, spec, {"path": ds}))
    a, b = without["systems"]["sys"], with_inv["systems"]["sys"]
    for k in ("n", "precision", "recall", "f1", "accuracy", "kappa", "tp", "fp", "tn", "fn"):
        assert close(a["exclude"][k], b["exclude"][k]), k
    assert b["exclude"]["n_invalid"] == 1 and b["wrong"]["n_invalid"] == 1
    assert b["wrong"]["fn"] == a["wrong"]["fn"] + 1 and b["wrong"]["n"] == 5
    assert b["wrong"]["f1"] < a["wrong"]["f1"]  # 2*1/(2*1+1+2)=0.4 vs 2*1/(2*1+1+1)=0.5
    assert b["wrong"]["f1"] == pytest.approx(0.4) and a["wrong"]["f1"] == pytest.approx(0.5)


def test_review_as_maps_review_verdicts(tmp_path, files):
    cfg = bench_cfg(tmp_path, systems(files, review_as="unsafe"), {"path": files["dataset"]})
    rep, preds = run_bench(cfg)
    p = {x.sample_id: x for x in preds["student"]}["i05"]
    assert p.raw_label == "review" and p.label == U and p.invalid_reason is None
    assert rep["systems"]["student"]["invalid"]["n_review_verdicts"] == 1
    assert rep["systems"]["student"]["invalid"]["by_reason"]["review"] == 0


def test_report_says_which_headline_is_which(tmp_path, files):
    run_and_write(bench_cfg(tmp_path, systems(files), {"path": files["dataset"]}))
    md = (tmp_path / "out" / "report.md").read_text()
    assert "F1 (excl) [CI]" in md and "F1 (as wrong)" in md
    assert "## Classification, invalid predictions excluded (as Aetheria does)" in md
    assert "## Classification, invalid predictions counted as wrong" in md
    assert "## Conventions" in md and "10 equal-width bins" in md and "default_rng(seed=0)" in md
    for key in ("source", "category", "modality"):
        assert f"## Breakdown by {key}" in md


# -------------------------------------------------------- numbers equal eval.metrics on the same arrays
def test_report_json_numbers_equal_eval_metrics(tmp_path, files):
    cfg = bench_cfg(tmp_path, systems(files), {"path": files["dataset"]}, seed=7, ece_bins=5)
    run_and_write(cfg)
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (
        rep["git_sha"] == "abc"
        and rep["config"]["seed"] == 7
        and rep["config"]["systems"][1]["name"] == "student"
    )
    # the student's arrays written out by hand from the fixture (review as invalid; failed, missing invalid)
    pred = [U, U, S, S, None, None, S, S, U, S, None, None]
    scores = [0.8, 0.9, 0.4, 0.3, 0.5, 0.6, 0.1, 0.3, 0.6, 0.2, None, None]
    st = rep["systems"]["student"]
    for policy in ("exclude", "wrong"):
        want = metrics.metrics_with_ci(GOLD, pred, None, invalid=policy, n_boot=50, seed=7)
        for k, v in want.items():
            if k == "ci":
                for ck, (lo, hi) in v.items():
                    assert close(st[policy]["ci"][ck][0], lo) and close(st[policy]["ci"][ck][1], hi), (
                        policy,
                        ck,
                    )
            elif k != "invalid_policy":
                assert close(st[policy][k], v) if isinstance(v, float) else st[policy][k] == v, (policy, k)
        # the CI contains the point estimate
        lo, hi = st[policy]["ci"]["f1"]
        assert lo <= st[policy]["f1"] <= hi
    sm = metrics.score_metrics(GOLD, scores, n_bins=5)
    for k in ("n_scored", "n_missing_score", "auroc", "auprc", "brier", "ece", "ece_bins"):
        assert close(st["scores"][k], sm[k]) if isinstance(sm[k], float) else st["scores"][k] == sm[k], k
    want_bins = metrics.reliability_bins(GOLD[:10], scores[:10], 5)  # the ten scored items
    assert [b["count"] for b in st["scores"]["reliability"]] == [b["count"] for b in want_bins]
    assert all(
        close(a["mean_prob"], b["mean_prob"]) and close(a["frac_pos"], b["frac_pos"])
        for a, b in zip(st["scores"]["reliability"], want_bins, strict=True)
    )
    auroc_ci = metrics.bootstrap_ci(
        lambda g, s: metrics.score_metrics(g, s, n_bins=5)["auroc"], GOLD, scores, n_boot=50, seed=7
    )
    assert close(st["scores"]["auroc_ci"][0], auroc_ci[0]) and close(st["scores"]["auroc_ci"][1], auroc_ci[1])
    # teacher agreement and kappa
    ag = metrics.agreement(pred, TEACHER[0])
    assert st["teacher"]["n"] == ag["n"] == 8
    assert close(st["teacher"]["agreement"], ag["agreement"]) and close(st["teacher"]["kappa"], ag["kappa"])
    assert close(rep["systems"]["teacher"]["teacher"]["kappa"], 1.0)
    # breakdowns: the point values equal metrics.breakdown on the same arrays
    for key, groups in (
        ("category", CATS),
        ("source", [s.source for s in SAMPLES]),
        ("modality", [s.modality for s in SAMPLES]),
    ):
        for policy in ("exclude", "wrong"):
            want = metrics.breakdown(groups, GOLD, pred, scores, invalid=policy, n_bins=5)
            got = st["breakdowns"][key]
            assert sorted(got) == sorted(want)
            for g, w in want.items():
                for k in ("n", "n_invalid", "precision", "recall", "f1", "accuracy", "fnr", "fpr", "kappa"):
                    assert (
                        close(got[g][policy][k], w[k])
                        if isinstance(w[k], float)
                        else got[g][policy][k] == w[k]
                    )
                for k in ("auroc", "auprc", "brier", "ece"):
                    assert close(got[g]["scores"][k], w[k]), (key, g, k)
    assert st["breakdowns"]["modality"]["text+image"]["n"] == 2


# ------------------------------------------------------------------ cost and speed
def test_cost_tokens_latency_and_relative_to_teacher(tmp_path, files):
    rep, _ = run_bench(bench_cfg(tmp_path, systems(files), {"path": files["dataset"]}))
    t, s = rep["systems"]["teacher"]["cost_speed"], rep["systems"]["student"]["cost_speed"]
    assert t["cost_usd_per_item"] == pytest.approx(0.03) and s["cost_usd_per_item"] == pytest.approx(0.001)
    assert (
        t["prompt_tokens_per_item"] == 400
        and t["completion_tokens_per_item"] == 80
        and t["tokens_per_item"] == 480
    )
    assert t["tokens_per_item_by_role"]["arbiter"] == {"prompt": 200, "completion": 40, "calls": 1}
    assert s["tokens_per_item"] == 60 and s["n_finished"] == 10 and s["n_failed"] == 1
    assert t["latency_s"]["p50"] == pytest.approx(6.0) and s["latency_s"]["p95"] == pytest.approx(0.25)
    rel = rep["systems"]["student"]["relative_to_teacher"]
    assert rel["cost_x_teacher"] == pytest.approx(0.001 / 0.03) and rel["tokens_x_teacher"] == pytest.approx(
        60 / 480
    )
    assert rel["latency_p50_x_teacher"] == pytest.approx(0.25 / 6.0)
    assert rep["systems"]["teacher"]["relative_to_teacher"]["cost_x_teacher"] == pytest.approx(1.0)


def test_pricing_override_and_throughput_from_busy_time(tmp_path):
    items = [sample(f"x{k}", U) for k in range(3)]
    ds = write_jsonl(tmp_path / "gold.jsonl", items)
    starts = ["2026-01-01T00:00:00+00:00", "2026-01-01T00:00:01+00:00", "2026-01-01T00:00:10+00:00"]
    sysf = write_jsonl(
        tmp_path / "sys.jsonl",
        [
            transcript(
                s, U, 0.9, turns=(("judge", 1000, 500),), cost=123.0, model="gpt-x", created=c, wall=2.0
            )
            for s, c in zip(items, starts, strict=True)
        ],
    )
    cfg = bench_cfg(
        tmp_path,
        [{"name": "sys", "path": sysf}],
        {"path": ds},
        pricing={"gpt-x": {"prompt_per_1m": 2.0, "completion_per_1m": 8.0}},
    )
    assert isinstance(cfg.pricing["gpt-x"], Price)
    rep, _ = run_bench(cfg)
    cs = rep["systems"]["sys"]["cost_speed"]
    assert cs["cost_usd_per_item"] == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)  # the override, not 123
    assert cs["busy_s"] == pytest.approx(5.0)  # [0, 3] and [10, 12]
    assert cs["items_per_s"] == pytest.approx(3 / 5.0)
    assert rep["teacher"] is None and "relative_to_teacher" not in rep["systems"]["sys"]


# ------------------------------------------------------------------ outputs
def test_cli_writes_report_and_valid_pngs(tmp_path, files, capsys):
    cfg = bench_cfg(tmp_path, systems(files), {"path": files["dataset"]})
    cfg_path = tmp_path / "bench_test.yaml"
    cfg_path.write_text(json.dumps(cfg.model_dump(mode="json")))
    out = tmp_path / "cli_out"
    assert main(["bench", "-c", str(cfg_path), "--output", str(out), "n_boot=20"]) == 0
    for name in ("pr_curves.png", "reliability.png", "cost_vs_f1.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
    rep = json.loads((out / "report.json").read_text())
    assert rep["config"]["n_boot"] == 20 and rep["plots"] == [
        "pr_curves.png",
        "reliability.png",
        "cost_vs_f1.png",
    ]
    assert (
        len(rep["predictions"]["student"]) == 12
        and rep["predictions"]["student"][11]["invalid_reason"] == "missing"
    )
    md = (out / "report.md").read_text()
    assert "![pr_curves.png](pr_curves.png)" in md and "| teacher | teacher | 12 | 0 |" in md
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary files
    assert "student: 10 finished, 1 failed, 1 missing, 1 extra ids" in capsys.readouterr().out


def test_nan_is_null_in_report_json(tmp_path):
    items = [sample(f"x{k}", U) for k in range(3)]  # one class only: AUROC undefined
    ds = write_jsonl(tmp_path / "gold.jsonl", items)
    sysf = write_jsonl(tmp_path / "sys.jsonl", [transcript(s, U, 0.9) for s in items])
    run_and_write(bench_cfg(tmp_path, [{"name": "sys", "path": sysf}], {"path": ds}), plots=True)
    text = (tmp_path / "out" / "report.json").read_text()
    assert "NaN" not in text and json.loads(text)["systems"]["sys"]["scores"]["auroc"] is None


@pytest.mark.parametrize(
    "n, invalid", [(0, "exclude"), (1, "wrong"), (4, "exclude"), (4, "wrong"), (23, "exclude")]
)
def test_memoised_bootstrap_equals_metrics_with_ci(n, invalid):
    from eval.bootstrap_memo import classification_with_ci

    gold = [(U, S)[k % 2] for k in range(n)]
    pred = [(U, S, None, "review", U)[(k * 7) % 5] for k in range(n)]
    got = classification_with_ci(gold, pred, invalid=invalid, n_boot=60, seed=3)
    want = metrics.metrics_with_ci(gold, pred, None, invalid=invalid, n_boot=60, seed=3)
    assert set(got) == set(want)
    for k, v in want.items():
        if k == "ci":
            assert all(close(got["ci"][c][i], v[c][i]) for c in v for i in (0, 1))
        else:
            assert close(got[k], v) if isinstance(v, float) else got[k] == v, k


def test_degenerate_inputs_still_give_a_report_and_plots(tmp_path):
    items = [sample("x0", U), sample("x1", S), sample("x2", None)]  # x2 has no gold label: dropped
    ds = write_jsonl(tmp_path / "gold.jsonl", items)
    allbad = write_jsonl(tmp_path / "bad.jsonl", [transcript(s, None, None) for s in items[:2]])
    empty = write_jsonl(tmp_path / "empty.jsonl", [])
    rep, _ = run_and_write(
        bench_cfg(
            tmp_path,
            [{"name": "bad", "path": allbad, "role": "teacher"}, {"name": "empty", "path": empty}],
            {"path": ds},
        ),
        plots=True,
    )
    assert rep["gold"]["unlabelled_ids"] == ["x2"] and rep["gold"]["n_items"] == 2
    assert math.isnan(rep["systems"]["bad"]["exclude"]["f1"]) and rep["systems"]["bad"]["wrong"]["fn"] == 1
    assert rep["systems"]["empty"]["join"]["missing_ids"] == ["x0", "x1"]
    assert (tmp_path / "out" / "cost_vs_f1.png").read_bytes()[:4] == b"\x89PNG"
