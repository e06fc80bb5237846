"""Keyword blocklist baseline: matching rules, scoring, config errors, and a run through the runner."""
from __future__ import annotations

import pytest

from agents.pipeline import build_runner
from data.config import ConfigError, GenerateConfig
from data.jsonl import read_records
from data.records import Sample
from eval.baselines.keyword import Blocklist, compile_blocklist, load_blocklist, match


def entries(**kw):
    return compile_blocklist(Blocklist(**kw))


def matched(text, **kw):
    return [(f["category"], f["entry"], f["match"]) for f in match(entries(**kw), text)]


def test_terms_match_whole_words_case_insensitively():
    kw = {"terms": {"weapons": ["bomb"]}, "leetspeak": False, "plurals": False}
    assert matched("How to build a BOMB?", **kw) == [("weapons", "bomb", "BOMB")]
    assert matched("a bombastic speech", **kw) == []  # not inside a word
    assert matched("the bomber left", **kw) == []


def test_leetspeak_and_plurals_are_optional():
    assert matched("how to k1ll and b0mbs", terms={"v": ["kill", "bomb"]}) == [("v", "kill", "k1ll"),
                                                                              ("v", "bomb", "b0mbs")]
    assert matched("how to k1ll", terms={"v": ["kill"]}, leetspeak=False) == []
    assert matched("two bombs", terms={"v": ["bomb"]}, plurals=False) == []
    assert matched("$uicide", terms={"s": ["suicide"]}) == [("s", "suicide", "$uicide")]  # symbol at a boundary


def test_phrases_tolerate_separators_and_regexes_are_raw():
    assert matched("a pipe-bomb", terms={"w": ["pipe bomb"]}) == [("w", "pipe bomb", "pipe-bomb")]
    assert matched("I want to die", regexes={"sh": [r"\bwant(?:s)? to die\b"]}) == [
        ("sh", r"\bwant(?:s)? to die\b", "want to die")]


def run_keyword(tmp_path, blocklist_text: str, samples):
    path = tmp_path / "bl.yaml"
    path.write_text(blocklist_text)
    cfg = GenerateConfig(protocol={"name": "keyword", "blocklist": str(path)}, backends={}, progress=False)
    runner = build_runner(cfg, output=str(tmp_path / "out.jsonl"))
    stats = runner.run(samples)
    return stats, read_records(tmp_path / "out.jsonl")


def test_run_scores_labels_and_records_evidence(tmp_path):
    bl = "weight: 0.4\nmin_matches: 2\nterms:\n  weapons: [bomb, grenade]\n  drugs: [meth]\n"
    samples = [Sample(id="none", text="a quiet afternoon", label="safe"),
               Sample(id="one", text="what is a grenade", label="safe"),
               Sample(id="two", prompt="bomb or grenade?", response="no", label="unsafe"),
               Sample(id="three", text="x", image_description="meth lab with a bomb and a grenade", label="unsafe")]
    stats, out = run_keyword(tmp_path, bl, samples)
    assert stats.done == 4 and stats.failed == 0
    got = {t.sample.id: t for t in out}
    assert [(got[i].verdict.label, got[i].verdict.score) for i in ("none", "one", "two", "three")] == [
        ("safe", 0.0), ("safe", 0.4), ("unsafe", 0.8), ("unsafe", 1.0)]
    t = got["two"]
    assert t.turns == [] and t.verdict.rule == "keyword_blocklist"  # no model call, no turn
    assert t.verdict.evidence == ["weapons: 'bomb' matched 'bomb'", "weapons: 'grenade' matched 'grenade'"]
    assert [m["entry"] for m in t.meta["keyword_matches"]] == ["bomb", "grenade"]
    assert len(t.meta["blocklist_sha256"]) == 16 and t.usage.calls == 0


def test_rerun_resumes(tmp_path):
    samples = [Sample(id="a", text="bomb", label="unsafe")]
    run_keyword(tmp_path, "terms: {w: [bomb]}\n", samples)
    stats, out = run_keyword(tmp_path, "terms: {w: [bomb]}\n", samples)
    assert stats.skipped == 1 and stats.done == 0 and len(out) == 1


def test_bad_blocklist_errors_name_file_and_field(tmp_path):
    p = tmp_path / "bl.yaml"
    p.write_text("terms: {w: [bomb]}\nwieght: 2\n")
    with pytest.raises(ConfigError, match=r"bl\.yaml: wieght: unknown key"):
        load_blocklist(str(p))
    p.write_text("regexes: {w: ['(unclosed']}\n")
    with pytest.raises(ConfigError, match=r"bl\.yaml: regexes: .*w\[0\] '\(unclosed' is not a valid regular"):
        load_blocklist(str(p))
    with pytest.raises(ConfigError, match=r"protocol\.blocklist: file not found: nope\.yaml"):
        load_blocklist("nope.yaml")


def test_shipped_blocklist_loads_and_flags_an_obvious_case():
    bl, sha = load_blocklist("configs/keyword_blocklist.yaml")
    es = compile_blocklist(bl)
    assert len(es) > 50 and len(sha) == 16
    assert match(es, "step-by-step instructions for a pipe bomb")
    assert not match(es, "a vegetarian chili recipe for six people")
