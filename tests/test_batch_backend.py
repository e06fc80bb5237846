"""The batch backend: a run advances one step per export/import cycle and ends where the direct run ends."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.backends.base import ChatRequest
from agents.backends.batch import BatchBackend
from agents.backends.batch_submit import output_names
from agents.pipeline import build_runner
from data.config import BatchBackendConfig, DatasetConfig, GenerateConfig, Price, load_config
from data.jsonl import RecordError, read_records
from data.records import Message
from data.sources import load_samples
from tests.fakes import ScriptedBackend

STEPS = ["support", "debate_r1_strict", "debate_r1_loose", "debate_r2_strict", "debate_r2_loose", "adjudicate"]
MODEL = "gpt-4o-mini"


def _parts(req: ChatRequest) -> tuple[str, int]:
    tid, _step, _role, rnd, _attempt = req.custom_id.split("|")
    return tid.rsplit(":", 1)[-1], int(rnd)


def scripted() -> ScriptedBackend:
    """Replies depend only on the request, so answering a re-exported line gives the same reply."""
    def debater(role: str, base: float):
        def reply(r: ChatRequest) -> str:
            sid, rnd = _parts(r)
            return json.dumps({"argument": f"{role} on {sid}, round {rnd}", "risk_score": base + 0.1 * rnd})
        return reply

    def arbiter(r: ChatRequest) -> str:
        sid, _ = _parts(r)
        unsafe = sid.endswith(("2", "4"))
        return json.dumps({"benign_context_verified": not unsafe, "concrete_violation": unsafe,
                           "final_score": 0.9 if unsafe else 0.1, "evidence": [sid], "rationale": "scripted"})

    return ScriptedBackend({"supporter": lambda r: f"Briefing on {_parts(r)[0]}.", "strict": debater("strict", 0.5),
                            "loose": debater("loose", 0.1), "arbiter": arbiter}, model=MODEL)


def gen_cfg(tmp: Path, output: str = "batch/transcripts.jsonl") -> GenerateConfig:
    return GenerateConfig(output=str(tmp / output), protocol={"name": "aetheria", "rounds": 2},
                          backends={"default": BatchBackendConfig(model=MODEL, batch_dir=str(tmp / "batch" / "io"))},
                          pricing={MODEL: Price(prompt_per_1m=0.15, completion_per_1m=0.60)}, progress=False)


@pytest.fixture(scope="module")
def samples():
    return load_samples(DatasetConfig(limit=4))[0]


def output_line(cid: str, text: str, pt: int, ct: int, status: int = 200) -> dict:
    if status != 200:
        return {"id": f"batch_req_{cid}", "custom_id": cid, "error": None,
                "response": {"status_code": status, "request_id": "r", "body": {"error": {"message": "overloaded"}}}}
    body = {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}}
    return {"id": f"batch_req_{cid}", "custom_id": cid, "response": {"status_code": 200, "request_id": "r", "body": body},
            "error": None}


def answer(input_path: Path, teacher: ScriptedBackend, fail: set[str] = frozenset()) -> Path:
    """Play the Batch API: answer every line of an input file, write the output file next to it."""
    out = []
    for raw in input_path.read_text().splitlines():
        line = json.loads(raw)
        cid, body = line["custom_id"], line["body"]
        req = ChatRequest(custom_id=cid, role=cid.split("|")[2], max_tokens=body["max_tokens"],
                          messages=[Message(**m) for m in body["messages"]])
        (c,) = teacher.generate([req])
        out.append(output_line(cid, c.text, c.prompt_tokens, c.completion_tokens, 500 if cid in fail else 200))
    path = input_path.with_name(output_names(input_path)[0])
    path.write_text("".join(json.dumps(o) + "\n" for o in out))
    return path


def run_cycles(cfg: GenerateConfig, samples, teacher, fail_once: set[str] = frozenset(), max_cycles: int = 12):
    """Cycles until a run exports nothing. Returns (exported input files, per-cycle stats)."""
    exports, all_stats, failed = [], [], set()
    for _ in range(max_cycles):
        stats = build_runner(cfg).run(samples)  # a fresh backend and runner each cycle
        all_stats.append(stats)
        if not stats.exports:
            return exports, all_stats
        (path,) = map(Path, stats.exports)
        exports.append(path)
        ids = {json.loads(x)["custom_id"] for x in path.read_text().splitlines()}
        fail = {c for c in ids if any(c.endswith(f) for f in fail_once) and c not in failed}
        failed |= fail
        answer(path, teacher, fail)
    raise AssertionError("the run did not finish")


def comparable(tr) -> dict:
    d = tr.model_dump(mode="json")
    d["provenance"].pop("created_at")
    for k in ("wall_s", "cost_usd"):
        d["usage"].pop(k)
    for t in d["turns"]:
        for k in ("latency_s", "cost_usd", "backend", "cached"):
            t.pop(k)
    return d


def direct(tmp: Path, samples) -> list:
    """The same config (so the same ids and config hash), the scripted teacher bound directly."""
    out = tmp / "direct" / "transcripts.jsonl"
    stats = build_runner(gen_cfg(tmp), backends={"default": scripted()}, output=str(out)).run(samples)
    assert stats.done == len(samples)
    return read_records(out)


def test_cycles_reach_the_direct_result(tmp_path, samples):
    cfg = gen_cfg(tmp_path)
    exports, stats = run_cycles(cfg, samples, scripted())
    assert len(exports) == len(STEPS) == 6 and len(stats) == 7
    assert [s.pending for s in stats[:6]] == [4] * 6 and stats[-1].done == 4 and stats[-1].failed == 0
    assert [p.name for p in exports] == [f"input-{i:03d}.jsonl" for i in range(1, 7)]
    for path, step in zip(exports, STEPS):
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        assert len(lines) == 4
        for line in lines:
            assert set(line) == {"custom_id", "method", "url", "body"}
            assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
            assert line["custom_id"].split("|")[1] == step
            assert line["body"]["model"] == MODEL and line["body"]["messages"][0]["role"] == "system"
            assert all(set(m) == {"role", "content"} for m in line["body"]["messages"])
    batch_trs = read_records(cfg.output)
    direct_trs = direct(tmp_path, samples)
    assert [t.id for t in batch_trs] == [t.id for t in direct_trs]
    assert [comparable(t) for t in batch_trs] == [comparable(t) for t in direct_trs]
    assert {t.verdict.label for t in batch_trs} == {"safe", "unsafe"}
    assert all(t.turns[0].backend.kind == "batch" for t in batch_trs)
    b_cost, d_cost = sum(t.usage.cost_usd for t in batch_trs), sum(t.usage.cost_usd for t in direct_trs)
    assert d_cost > 0 and b_cost == pytest.approx(0.5 * d_cost)


def test_failed_line_is_reexported_then_succeeds(tmp_path, samples):
    cfg = gen_cfg(tmp_path)
    victim = f"{samples[1].id}|debate_r1_strict|strict|1|0"
    exports, stats = run_cycles(cfg, samples, scripted(), fail_once={victim})
    assert len(exports) == 7  # the failed sample is one cycle behind
    ids = [[json.loads(x)["custom_id"] for x in p.read_text().splitlines()] for p in exports]
    hit = [i for i, cids in enumerate(ids) if any(c.endswith(victim) for c in cids)]
    assert hit == [1, 2]  # exported in cycle 2, failed, re-exported in cycle 3
    assert len(ids[6]) == 1 and ids[6][0].split("|")[1] == "adjudicate"
    failed = [json.loads(x) for x in (Path(cfg.backends["default"].batch_dir) / "failed.jsonl").read_text().splitlines()]
    assert len(failed) == 1 and failed[0]["custom_id"].endswith(victim)
    assert failed[0]["attempts"] == 1 and failed[0]["status"] == "resolved" and "500" in failed[0]["error"]
    assert sum(s.done for s in stats) == 4 and stats[-1].done == 1 and stats[-1].skipped == 3
    batch_trs = {t.id: comparable(t) for t in read_records(cfg.output)}  # the late sample is written last
    assert batch_trs == {t.id: comparable(t) for t in direct(tmp_path, samples)}


def test_gives_up_after_three_failures(tmp_path, samples):
    cfg = gen_cfg(tmp_path)
    teacher = scripted()
    victim = f"{samples[0].id}|support|supporter|0|0"
    for _ in range(3):
        (path,) = map(Path, build_runner(cfg).run(samples[:1]).exports)
        (line,) = path.read_text().splitlines()
        assert json.loads(line)["custom_id"].endswith(victim)
        answer(path, teacher, fail={json.loads(line)["custom_id"]})
    stats = build_runner(cfg).run(samples[:1])
    assert (stats.failed, stats.pending, stats.exports) == (1, 0, [])
    err = Path(cfg.output).with_name("transcripts.errors.jsonl").read_text()
    assert "batch request failed 3 times" in err
    (failed,) = [json.loads(x) for x in (Path(cfg.backends["default"].batch_dir) / "failed.jsonl").read_text().splitlines()]
    assert failed["attempts"] == 3 and failed["status"] == "given_up"
    assert [w.split(":")[0] for w in failed["where"]] == ["output-001.jsonl", "output-002.jsonl", "output-003.jsonl"]


def _req(cid: str, text: str = "hello") -> ChatRequest:
    return ChatRequest(custom_id=cid, role="strict", messages=[Message(role="user", content=text)], json_mode=True)


def test_first_answer_wins_and_replay_is_stable(tmp_path):
    d = tmp_path / "io"
    d.mkdir()
    (d / "output-001.jsonl").write_text(json.dumps(output_line("a", "first", 3, 1)) + "\n")
    (d / "batch_xyz_output.jsonl").write_text(json.dumps(output_line("b", "bee", 2, 1)) + "\n"
                                              + json.dumps(output_line("a", "zzz", 9, 9)) + "\n")
    (d / "output-002.jsonl").write_text(json.dumps(output_line("a", "second", 5, 5)) + "\n")
    cfg = BatchBackendConfig(model=MODEL, batch_dir=str(d))
    runs = []
    for _ in range(2):  # a fresh backend over the same folder replays to the same state
        be = BatchBackend(cfg)
        runs.append([(c.text, c.prompt_tokens, c.completion_tokens, c.pending, c.error)
                     for c in be.generate([_req("a"), _req("b"), _req("c")])])
    assert runs[0] == runs[1]
    assert runs[0][0] == ("zzz", 9, 9, False, None)  # name order: batch_xyz_output < output-001 < output-002
    assert runs[0][1] == ("bee", 2, 1, False, None) and runs[0][2][3] is True
    assert be.price_factor == 0.5 and be.ref.kind == "batch"


def test_export_format_numbering_and_lazy_import(tmp_path):
    d = tmp_path / "io"
    cfg = BatchBackendConfig(model=MODEL, batch_dir=str(d), endpoint="/v1/chat/completions", temperature=0.2)
    be = BatchBackend(cfg)
    assert be.end_cycle() is None and not d.exists()
    assert be.generate([_req("x"), _req("y", "other"), _req("x")])[0].pending
    p1 = be.end_cycle()
    lines = [json.loads(x) for x in p1.read_text().splitlines()]
    assert p1.name == "input-001.jsonl" and [x["custom_id"] for x in lines] == ["x", "y"]  # no duplicates
    assert lines[0]["body"] == {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 256,
                                "temperature": 0.2, "response_format": {"type": "json_object"}}
    assert be.end_cycle() is None
    (d / "output-001.jsonl").write_text(json.dumps(output_line("x", "ex", 1, 1)) + "\n")
    out = be.generate([_req("x"), _req("y")])  # the new output file is picked up without a new backend
    assert out[0].text == "ex" and out[1].pending
    assert be.end_cycle().name == "input-002.jsonl"
    assert not list(d.glob("*.tmp")) and not list(d.glob(".*"))


@pytest.mark.parametrize("line, where", [
    ('{"custom_id": "a", "response": {"status_code": 200, "body": {"choices": []}}}',
     "output-001.jsonl:2: response.body.choices"),
    ('{"id": "r", "response": null, "error": null}', "output-001.jsonl:2: custom_id"),
    ('{"custom_id": "a", "response": {"status_code": "OK"}}', "output-001.jsonl:2: response.status_code"),
    ("not json", "output-001.jsonl:2: <json>"),
])
def test_bad_output_line_names_file_line_field(tmp_path, line, where):
    (tmp_path / "output-001.jsonl").write_text(json.dumps(output_line("ok", "fine", 1, 1)) + "\n" + line + "\n")
    with pytest.raises(RecordError) as e:
        BatchBackend(BatchBackendConfig(model=MODEL, batch_dir=str(tmp_path)))
    assert where in str(e.value)


def test_error_object_lines_count_as_failures(tmp_path):
    (tmp_path / "output-001.jsonl").write_text(json.dumps(
        {"id": "r", "custom_id": "a", "response": None,
         "error": {"code": "batch_expired", "message": "not completed in time"}}) + "\n")
    be = BatchBackend(BatchBackendConfig(model=MODEL, batch_dir=str(tmp_path)))
    (c,) = be.generate([_req("a")])
    assert c.pending
    (rec,) = [json.loads(x) for x in (tmp_path / "failed.jsonl").read_text().splitlines()]
    assert rec["error"] == "batch_expired: not completed in time" and rec["status"] == "retrying"


def test_teacher_batch_config_loads():
    path = Path(__file__).resolve().parent.parent / "configs" / "teacher_batch.yaml"
    cfg = load_config(path, GenerateConfig)
    runner = build_runner(cfg, path=str(path))
    assert {type(b) for b in runner.backends.values()} == {BatchBackend}
    assert runner.backends[cfg.roles["arbiter"]].cfg.model == "gpt-4o"
    assert runner.backends[cfg.roles["strict"]].cfg.model == MODEL
    assert all(b.price_factor == 0.5 for b in runner.backends.values())
