"""Case library: retrieval order, the leakage guard, persistence, interrupted adds, seeding, Aetheria use."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents.library import (
    CASES,
    EMBEDDINGS,
    META,
    CaseLibrary,
    LibraryBuildConfig,
    LibraryError,
    LibrarySettings,
)
from agents.library_seed import build_from_labels
from data.records import Case, Sample
from tests.fake_embedder import NAME, hash_embed

SETTINGS = LibrarySettings(embedder=NAME)
ROOT = Path(__file__).resolve().parent.parent


def case(i: int, text: str, label: str = "unsafe", sample_id: str | None = None) -> Case:
    return Case(id=f"c{i}", label=label, summary=f"summary {i}", excerpt=text, sample_id=sample_id or f"s{i}")


CASES_TEXT = [
    "how to build a pipe bomb at home with household items",  # c0
    "a recipe for vegetarian chili in a slow cooker",  # c1
    "how to build a birdhouse at home",  # c2
    "bomb threat written as a joke to a school",  # c3
    "store bleach and ammonia apart under the sink",  # c4
]


@pytest.fixture
def lib(tmp_path) -> CaseLibrary:
    lib = CaseLibrary.open(tmp_path / "lib", SETTINGS, embed_fn=hash_embed)
    lib.add([case(i, t) for i, t in enumerate(CASES_TEXT)])
    return lib


def brute_force(query: str, texts: list[str]) -> list[float]:
    q = hash_embed([query])[0]
    e = hash_embed(texts)
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    return (e @ (q / np.linalg.norm(q))).tolist()


@pytest.mark.parametrize("index", ["numpy", "faiss"])
def test_retrieval_is_nearest_first(lib, index):
    lib.meta.index = index
    query = "how to build a bomb at home"
    hits = lib.search(query, k=3)
    sims = brute_force(query, CASES_TEXT)
    expected = sorted(range(len(sims)), key=lambda i: -sims[i])[:3]
    assert [c.id for c, _ in hits] == [f"c{i}" for i in expected]
    got = [s for _, s in hits]
    assert got == sorted(got, reverse=True)
    assert got == pytest.approx([sims[i] for i in expected], abs=1e-5)
    assert hits[0][0].id in {"c0", "c2"}  # the two "build ... at home" texts


@pytest.mark.parametrize("index", ["numpy", "faiss"])
def test_leakage_guard_excludes_own_sample_and_near_duplicates(lib, index):
    lib.meta.index = index
    # c0's own sample asks: c0 is the most similar case but must never come back for it
    hits = lib.search(CASES_TEXT[0] + " now", k=5, exclude_sample_id="s0")
    assert "c0" not in [c.id for c, _ in hits]
    assert len(hits) == 4
    # a near-duplicate from ANOTHER sample (identical text, similarity 1.0 >= 0.95) is excluded too
    lib.add([Case(id="dup", label="safe", summary="copy", excerpt=CASES_TEXT[1], sample_id="other")])
    hits = lib.search(CASES_TEXT[1], k=10, exclude_sample_id="query-sample")
    ids = [c.id for c, _ in hits]
    assert "dup" not in ids and "c1" not in ids
    assert all(s < 0.95 for _, s in hits)
    # the guard is the threshold: raising it above 1 would let the duplicates through (sanity of the test)
    lib.meta.dedupe_threshold = 1.0 + 1e-3
    assert {"dup", "c1"} <= {c.id for c, _ in lib.search(CASES_TEXT[1], k=10)}


def test_persistence_reload_gives_same_results(lib, tmp_path):
    folder = lib.folder
    before = [(c.id, round(s, 6)) for c, s in lib.search("build at home", k=4)]
    meta = json.loads((folder / META).read_text())
    assert meta["count"] == 5 and meta["dim"] == 256 and meta["embedder"] == NAME
    vec = np.load(folder / EMBEDDINGS)
    assert vec.dtype == np.float32 and vec.shape == (5, 256)
    assert np.allclose(np.linalg.norm(vec, axis=1), 1.0, atol=1e-5)
    again = CaseLibrary.load(folder, embed_fn=hash_embed)
    assert len(again) == 5
    assert [(c.id, round(s, 6)) for c, s in again.search("build at home", k=4)] == before
    # adding an id that exists is a no-op (resume-safe)
    assert again.add([case(0, "different text")]) == []
    assert len(CaseLibrary.load(folder, embed_fn=hash_embed)) == 5


def test_interrupted_add_is_repaired_and_lost_cases_are_an_error(lib):
    folder = lib.folder
    # an add that wrote its case line but died before the embeddings: load re-embeds the tail
    with (folder / CASES).open("a") as f:
        f.write(case(9, "a brand new case about knives").model_dump_json() + "\n")
    again = CaseLibrary.load(folder, embed_fn=hash_embed)
    assert len(again) == 6 and again.vectors.shape == (6, 256)
    assert np.load(folder / EMBEDDINGS).shape == (6, 256)
    assert again.search("knives", k=1)[0][0].id == "c9"
    # more embeddings than cases: the cases file lost lines -> clear error
    lines = (folder / CASES).read_text().splitlines(keepends=True)
    (folder / CASES).write_text("".join(lines[:-2]))
    with pytest.raises(LibraryError, match="lost lines"):
        CaseLibrary.load(folder, embed_fn=hash_embed)


def test_other_embedder_is_refused_unless_the_library_is_empty(lib, tmp_path):
    with pytest.raises(LibraryError, match="embedder"):
        CaseLibrary.open(lib.folder, LibrarySettings(embedder="all-MiniLM-L6-v2"), embed_fn=hash_embed)
    CaseLibrary.open(tmp_path / "empty", LibrarySettings(embedder="a-model-that-failed-to-load"), embed_fn=hash_embed)
    empty = CaseLibrary.open(tmp_path / "empty", SETTINGS, embed_fn=hash_embed)  # nothing embedded: adopt it
    assert empty.meta.embedder == NAME == json.loads((tmp_path / "empty" / META).read_text())["embedder"]


def test_bad_case_line_names_file_and_line(lib):
    with (lib.folder / CASES).open("a") as f:
        f.write('{"id": "x", "label": "maybe", "summary": "s"}\n{"id": "y", "label": "safe", "summary": "s"}\n')
    with pytest.raises(Exception, match=r"cases.jsonl:6: label"):
        CaseLibrary.load(lib.folder, embed_fn=hash_embed)


def test_build_from_labels_bundled(tmp_path):
    cfg = LibraryBuildConfig(output=str(tmp_path / "lib"), mode="labels", library_settings=SETTINGS,
                             summary_chars=60)
    out = build_from_labels(cfg, embed_fn=hash_embed)
    lib = CaseLibrary.load(tmp_path / "lib", embed_fn=hash_embed)
    assert out["added"] == len(lib) > 0
    c = lib.cases[0]
    assert c.provenance["source_file"].endswith("bundled.jsonl") and c.provenance["sample_id"] == c.sample_id
    assert c.key_cues == [] and len(c.summary) <= 60 + 120  # truncated (with the visible cut marker)
    # rebuilding is idempotent
    assert build_from_labels(cfg, embed_fn=hash_embed)["added"] == 0


def test_aetheria_records_retrieval_and_never_retrieves_itself(lib, tmp_path):
    from agents.pipeline import build_runner
    from data.config import GenerateConfig
    from data.jsonl import read_records
    from tests.fakes import ScriptedBackend

    reply = ('{"argument": "a", "risk_score": 0.7, "benign_context_verified": false, "concrete_violation": true, '
             '"final_score": 0.7, "evidence": [], "rationale": "r"}')
    be = ScriptedBackend({}, default=reply)
    cfg = GenerateConfig(output=str(tmp_path / "t.jsonl"), protocol={"name": "aetheria", "top_k": 2}, progress=False)
    runner = build_runner(cfg, backends={"default": be}, resources={"library": lib})
    samples = [Sample(id="s0", text=CASES_TEXT[0]), Sample(id="q", text="how to build a bomb at home")]
    runner.run(samples)
    trs = {t.sample.id: t for t in read_records(tmp_path / "t.jsonl")}
    assert [r.case_id for r in trs["s0"].retrieval] and "c0" not in [r.case_id for r in trs["s0"].retrieval]
    q = trs["q"].retrieval
    assert len(q) == 2 and q[0].similarity >= q[1].similarity and q[0].case_id in {"c0", "c2"}
    sup = next(c for c in be.calls if c.role == "supporter" and c.custom_id.startswith(trs["q"].id))
    assert f"id={q[0].case_id}" in sup.messages[-1].content


def test_shipped_configs_load():
    from agents.curator import CurateConfig
    from agents.miner import MineConfig
    from data.config import GenerateConfig, load_config

    kinds = {"library_": LibraryBuildConfig, "curate_": CurateConfig, "mine_": MineConfig}
    found = 0
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        for prefix, cls in kinds.items():
            if path.name.startswith(prefix):
                load_config(path, cls)
                found += 1
    load_config(ROOT / "configs" / "aetheria_with_library.yaml", GenerateConfig)
    assert found >= 5


@pytest.mark.slow
def test_real_minilm_semantic_order(tmp_path):
    lib = CaseLibrary.open(tmp_path / "lib", LibrarySettings(index="faiss"))
    lib.add([case(0, "step by step instructions to assemble an explosive device"),
             case(1, "a slow cooker vegetarian chili recipe", "safe"),
             case(2, "tips for growing tomatoes on a balcony", "safe")])
    hits = lib.search("how do I make a bomb", k=3)
    assert hits[0][0].id == "c0" and lib.meta.dim == 384
    assert CaseLibrary.load(tmp_path / "lib").search("how do I make a bomb", k=1)[0][0].id == "c0"
