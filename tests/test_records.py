"""Records round-trip, located error messages, crash repair and resume."""
from __future__ import annotations

import json

import pytest

from data.jsonl import (
    JsonlAppender,
    RecordError,
    finished_ids,
    read_records,
    repair_tail,
    to_dataset,
    validate_file,
)
from data.records import BackendRef, Message, ProtocolInfo, Provenance, Sample, Transcript, Turn, Verdict


def make_transcript(i: int) -> Transcript:
    s = Sample(id=f"s{i}", source="unit", text=f"text {i}", label="unsafe" if i % 2 else "safe")
    turn = Turn(step="adjudicate", role="arbiter", backend=BackendRef(kind="hf", model="tiny"),
                messages=[Message(role="system", content="sys"), Message(role="user", content="u")], output="{}")
    return Transcript(id=f"p:h:{s.id}", sample=s, protocol=ProtocolInfo(name="p", version="p-1"), turns=[turn],
                      verdict=Verdict(label="safe", score=0.2, rule="rule3_default_safe"),
                      provenance=Provenance(tool_version="0", config_hash="h", created_at="2026-01-01T00:00:00+00:00"))


def test_round_trip(tmp_path):
    path = tmp_path / "t.jsonl"
    with JsonlAppender(path) as w:
        for i in range(3):
            w.append(make_transcript(i))
    back = read_records(path)
    assert [t.model_dump() for t in back] == [make_transcript(i).model_dump() for i in range(3)]
    ds = to_dataset(path)
    assert ds.num_rows == 3 and ds[1]["sample_id"] == "s1" and ds[1]["verdict_rule"] == "rule3_default_safe"


def test_error_names_file_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = make_transcript(0).model_dump(mode="json")
    bad = make_transcript(1).model_dump(mode="json")
    bad["verdict"]["score"] = 1.7
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(RecordError) as e:
        read_records(path)
    assert str(e.value).startswith(f"{path}:2: verdict.score: ")
    bad2 = make_transcript(2).model_dump(mode="json")
    bad2["sample"]["colour"] = "blue"  # unknown field
    path.write_text(json.dumps(good) + "\n" + "{not json\n" + json.dumps(bad2) + "\n" + json.dumps(good) + "\n")
    ok, errors = validate_file(path)
    assert ok == 1
    msgs = [str(e) for e in errors]
    assert msgs[0].startswith(f"{path}:2: <json>: not valid JSON")
    assert msgs[1].startswith(f"{path}:3: sample.colour: Extra inputs are not permitted")
    assert msgs[2].startswith(f"{path}:4: id: duplicate id")


def test_sample_without_content_is_rejected():
    with pytest.raises(ValueError, match="no content"):
        Sample(id="x", text="")


def test_truncated_tail_is_repaired_not_dropped(tmp_path):
    path = tmp_path / "t.jsonl"
    with JsonlAppender(path) as w:
        w.append(make_transcript(0))
        w.append(make_transcript(1))
    full = make_transcript(2).model_dump_json()
    with path.open("a") as f:  # a crash mid-write leaves half a line
        f.write(full[: len(full) // 2])
    assert finished_ids(path) == {"p:h:s0", "p:h:s1"}  # the fragment is not a finished id
    with pytest.raises(RecordError):
        read_records(path)
    aside = repair_tail(path)
    assert aside is not None and aside.read_text() == full[: len(full) // 2]  # kept aside, not silently lost
    assert [t.id for t in read_records(path)] == ["p:h:s0", "p:h:s1"]
    assert repair_tail(path) is None  # idempotent


def test_subject_and_modality():
    assert Sample(id="a", text="hi").subject == "prompt"
    assert Sample(id="b", prompt="q", response="r").subject == "prompt+response"
    assert Sample(id="c", response="r").subject == "response"


def test_duplicate_turn_keys_rejected():
    t = make_transcript(0)
    with pytest.raises(ValueError, match="duplicate turn"):
        Transcript.model_validate({**t.model_dump(), "turns": [t.turns[0].model_dump()] * 2})
