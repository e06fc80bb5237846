"""The embedded default end to end: the real SmolLM2 GGUF, CLI generate -> validate (short settings)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from data.jsonl import read_records
from scripts.cli import main


@pytest.mark.slow
def test_generate_with_embedded_smollm2_then_validate(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    rc = main(["generate", "-c", str(Path(__file__).resolve().parent.parent / "configs/quickstart.yaml"), "--limit", "2", "--output", str(out), "progress=false",
               "protocol.rounds=1", "protocol.max_tokens={supporter: 24, strict: 24, loose: 24, arbiter: 32}"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out.split("\n", 1)[1].split("\n}\n")[0] + "\n}")
    assert report["done"] == 2 and report["completion_tokens"] > 0 and report["tokens_per_s"] > 0
    assert main(["validate", str(out)]) == 0
    ts = read_records(out)
    assert [t.sample.id for t in ts] == ["bundled/001", "bundled/002"]
    assert all(t.turns[0].backend.model == "smollm2" and len(t.turns) == 4 for t in ts)
    assert all(t.verdict.label in {"safe", "unsafe"} for t in ts)
