"""The Curator: FP/FN selection, white-box prompts, traceable cases and log, resume, replay; the continual loop."""
from __future__ import annotations

import json
import re

import pytest

from agents.content import DATA_NOTICE
from agents.curator import LOG_FILE, CurateConfig, CurationRecord, Curator, curate_file, outcome_of
from agents.library import CaseLibrary, LibrarySettings
from agents.pipeline import build_runner
from data.config import DatasetConfig, GenerateConfig
from data.jsonl import read_records
from data.records import Transcript
from data.sources import load_samples
from tests.fake_embedder import NAME, hash_embed
from tests.fakes import ScriptedBackend

SETTINGS = LibrarySettings(embedder=NAME)


def _arbiter(req) -> str:
    """Unsafe for even-numbered bundled samples, safe for odd ones: a mix of FP, FN, TP, TN."""
    n = int(re.search(r"bundled/(\d+)", req.custom_id).group(1))
    unsafe = n % 2 == 0
    return json.dumps({"benign_context_verified": not unsafe, "concrete_violation": unsafe,
                       "final_score": 0.8 if unsafe else 0.2, "evidence": [], "rationale": "because"})


def _debater(req) -> str:
    return '{"argument": "the debater says so", "risk_score": 0.5}'


def scored_run(tmp_path, n: int = 10):
    samples, _ = load_samples(DatasetConfig(path="bundled", limit=n))
    be = ScriptedBackend({"arbiter": _arbiter}, default=_debater)
    cfg = GenerateConfig(output=str(tmp_path / "run.jsonl"), progress=False)
    build_runner(cfg, backends={"default": be}).run(samples)
    return tmp_path / "run.jsonl", read_records(tmp_path / "run.jsonl")


def curator_reply(req) -> str:
    tid = req.custom_id.split("|")[0]
    if tid.endswith("bundled/004"):
        return "This one is just prose without any JSON."  # tolerated: becomes the summary, parse_error set
    return json.dumps({"summary": f"summary for {tid}", "key_cues": ["cue one", "cue two"]})


def test_curator_adds_one_traceable_case_per_error(tmp_path):
    path, transcripts = scored_run(tmp_path)
    errors = {t.id: outcome_of(t) for t in transcripts if outcome_of(t) in ("FP", "FN")}
    assert {"FP", "FN"} <= set(errors.values())  # the scripted run has both kinds
    be = ScriptedBackend({"curator": curator_reply}, model="curator-model")
    cfg = CurateConfig(transcripts=str(path), library=str(tmp_path / "lib"), library_settings=SETTINGS)
    stats = curate_file(cfg, be, embed_fn=hash_embed)
    assert stats.curated == len(errors) == stats.selected and stats.failed == 0
    assert stats.parse_errors == (1 if any(t.endswith("bundled/004") for t in errors) else 0)

    lib = CaseLibrary.load(tmp_path / "lib", embed_fn=hash_embed)
    log = {r.id: r for r in read_records(tmp_path / "lib" / LOG_FILE, CurationRecord)}
    by_tid = {t.id: t for t in transcripts}
    assert len(lib) == len(log) == len(errors)
    for case in lib.cases:
        prov = case.provenance
        tr = by_tid[prov["transcript_id"]]  # every case links back to a transcript of the run
        assert prov["error_type"] == errors[tr.id]
        assert prov["sample_id"] == case.sample_id == tr.sample.id
        assert prov["protocol"] == "aetheria" and prov["protocol_version"] == tr.protocol.version
        assert prov["curator_model"] == "curator-model" and prov["created_at"]
        assert case.label == tr.sample.label  # the gold label, not the wrong verdict
        rec = log[case.id]  # ... and to the exact curator call
        assert rec.transcript_id == tr.id and rec.transcripts_file == str(path)
        (call,) = [c for c in be.calls if c.custom_id.startswith(tr.id + "|")]
        assert rec.messages == call.messages and rec.output == curator_reply(call)  # the exact call, kept whole
        user = rec.messages[-1].content
        assert f"Gold label (correct): {tr.sample.label.upper()}" in user
        assert DATA_NOTICE in rec.messages[0].content and "<<CONTENT USER-PROMPT" in user and "<<CONTENT DEBATE" in user
        if not tr.id.endswith("bundled/004"):
            assert case.summary == f"summary for {tr.id}" and case.key_cues == ["cue one", "cue two"]
        else:
            assert rec.parse_error and case.summary.startswith("This one is just prose")


def test_curator_resume_skips_curated_and_replays_the_log(tmp_path):
    path, _ = scored_run(tmp_path)
    cfg = CurateConfig(transcripts=str(path), library=str(tmp_path / "lib"), library_settings=SETTINGS)
    first = curate_file(cfg, ScriptedBackend({"curator": curator_reply}), embed_fn=hash_embed)
    again_be = ScriptedBackend({"curator": curator_reply})
    again = curate_file(cfg, again_be, embed_fn=hash_embed)
    assert again.curated == 0 and again.already_curated == first.curated and again_be.calls == []
    # a crash after the log line but before the case was added: the case is rebuilt from the log, no call
    fresh = tmp_path / "lib2"
    CaseLibrary.open(fresh, SETTINGS, embed_fn=hash_embed)
    (fresh / LOG_FILE).write_bytes((tmp_path / "lib" / LOG_FILE).read_bytes())
    be3 = ScriptedBackend({"curator": curator_reply})
    cfg3 = cfg.model_copy(update={"library": str(fresh)})
    third = curate_file(cfg3, be3, embed_fn=hash_embed)
    assert third.replayed == first.curated and third.curated == 0 and be3.calls == []
    assert sorted(c.id for c in CaseLibrary.load(fresh, embed_fn=hash_embed).cases) == sorted(first.case_ids)


def test_failed_curator_calls_are_retried_next_run(tmp_path):
    path, _ = scored_run(tmp_path)
    cfg = CurateConfig(transcripts=str(path), library=str(tmp_path / "lib"), library_settings=SETTINGS)
    failed = curate_file(cfg, ScriptedBackend({}, fail_roles={"curator"}), embed_fn=hash_embed)
    assert failed.curated == 0 and failed.failed == failed.selected > 0
    ok = curate_file(cfg, ScriptedBackend({"curator": curator_reply}), embed_fn=hash_embed)
    assert ok.curated == failed.selected


def test_select_all_and_outcomes(tmp_path):
    _, transcripts = scored_run(tmp_path)
    lib = CaseLibrary.open(tmp_path / "lib", SETTINGS, embed_fn=hash_embed)
    cur = Curator(ScriptedBackend({"curator": curator_reply}), lib, select="all")
    assert len(cur.select(transcripts)) == len(transcripts)
    t: Transcript = transcripts[0]
    assert outcome_of(t.model_copy(update={"error": "boom"})) is None
    assert outcome_of(t.model_copy(update={"sample": t.sample.model_copy(update={"label": None})})) is None


def test_continual_loop_grows_the_library(tmp_path):
    from scripts.continual import run_continual, stratified_batches

    samples, _ = load_samples(DatasetConfig(path="bundled"))
    batches = stratified_batches(samples, 3, 6, seed=1)
    assert [len(b) for b in batches] == [6, 6, 6]
    assert all(sum(s.label == "unsafe" for s in b) == 3 for b in batches)  # stratified: the overall 50/50
    assert len({s.id for b in batches for s in b}) == 18  # disjoint
    be = ScriptedBackend({"arbiter": _arbiter, "curator": curator_reply}, default=_debater)
    rows = run_continual(GenerateConfig(), batches, tmp_path / "cl", backends={"default": be}, index="all",
                         library_settings=SETTINGS, embed_fn=hash_embed, echo=lambda *_: None)
    assert [r["library_cases_before"] for r in rows] == [0, 6, 12]
    assert rows[0]["retrieved_per_item"] == 0 and rows[1]["retrieved_per_item"] > 0
    assert all(r["f1_zero_shot"] == pytest.approx(r["f1_library"]) for r in rows)  # scripted verdicts ignore cases
    assert json.loads((tmp_path / "cl" / "continual_results.json").read_text())["batches"][2]["curated"] == 6


def test_cold_start_build_runs_without_library_then_curates(tmp_path):
    from agents.library import LibraryBuildConfig
    from agents.library_seed import build_cold_start

    gen = tmp_path / "gen.yaml"
    gen.write_text("protocol: {name: aetheria, top_k: 3}\nlibrary: some/library/that/must/not/be/used\n")
    cfg = LibraryBuildConfig(output=str(tmp_path / "lib"), mode="cold_start", generate=str(gen),
                             dataset=DatasetConfig(path="bundled", limit=8), library_settings=SETTINGS)
    be = ScriptedBackend({"arbiter": _arbiter, "curator": curator_reply}, default=_debater)
    out = build_cold_start(cfg, backends={"default": be}, curator_backend=be, embed_fn=hash_embed)
    trs = read_records(tmp_path / "lib" / "cold_start.transcripts.jsonl")
    assert len(trs) == 8 and all(t.retrieval == [] for t in trs)  # the warm-up run has no library
    sup = next(c for c in be.calls if c.role == "supporter")
    assert "No case library is configured" in sup.messages[-1].content
    n_err = sum(outcome_of(t) in ("FP", "FN") for t in trs)
    assert out["curated"] == n_err == out["count"] > 0
    with pytest.raises(ValueError, match="generate"):
        LibraryBuildConfig(output="x", mode="cold_start")
