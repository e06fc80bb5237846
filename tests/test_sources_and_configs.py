"""Dataset sources (JSONL / CSV / Parquet / datasets.load_dataset), configs, CLI."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from data.config import ConfigError, DatasetConfig, GenerateConfig, load_config
from data.jsonl import RecordError
from data.sources import load_samples

ROOT = Path(__file__).resolve().parent.parent


def test_bundled_set_is_balanced_and_valid():
    samples, rep = load_samples(DatasetConfig())
    assert len(samples) == 40 and rep.skipped == 0
    labels = [s.label for s in samples]
    assert labels.count("safe") == 20 and labels.count("unsafe") == 20
    assert {s.modality for s in samples} >= {"text", "text+image"}
    assert any(s.subject == "prompt+response" for s in samples)


ROWS = [
    {"uid": "1", "content": "hello there", "y": "harmful", "cat": "x"},
    {"uid": "2", "content": "nice day", "y": "ok", "cat": "y"},
]
MAP = dict(columns={"id": "uid", "text": "content", "label": "y", "category": "cat"},
           label_map={"harmful": "unsafe", "ok": "safe"})


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "hub"])
def test_column_and_label_mapping_each_format(tmp_path, fmt):
    if fmt == "jsonl":
        path = tmp_path / "d.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    elif fmt == "csv":
        path = tmp_path / "d.csv"
        pd.DataFrame(ROWS).to_csv(path, index=False)
    elif fmt == "parquet":
        path = tmp_path / "d.parquet"
        pd.DataFrame(ROWS).to_parquet(path)
    else:  # the hub path: datasets.load_dataset on a local folder, exactly as for a hub id
        path = tmp_path / "hubrepo"
        path.mkdir()
        (path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    cfg = DatasetConfig(path=str(path), format="hub" if fmt == "hub" else "auto", source="mine", **MAP)
    samples, _ = load_samples(cfg)
    assert [(s.id, s.text, s.label, s.category, s.source) for s in samples] == [
        ("1", "hello there", "unsafe", "x", "mine"), ("2", "nice day", "safe", "y", "mine")]


def test_invalid_rows_error_or_skip(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"text": "fine", "label": "safe"}, {"text": "", "label": "safe"}, {"text": "hm", "label": "maybe"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RecordError, match=r"d\.jsonl:2: text: empty content"):
        load_samples(DatasetConfig(path=str(path)))
    samples, rep = load_samples(DatasetConfig(path=str(path), invalid="skip"))
    assert len(samples) == 1 and rep.skipped == 2 and "unknown label 'maybe'" in rep.problems[1]
    assert "2 invalid rows skipped" in rep.summary()


def test_csv_error_names_the_line(tmp_path):
    path = tmp_path / "d.csv"
    pd.DataFrame([{"text": "a", "label": "safe"}, {"text": "b", "label": "??"}]).to_csv(path, index=False)
    with pytest.raises(RecordError, match=r"d\.csv:3: label: unknown label"):
        load_samples(DatasetConfig(path=str(path)))


def test_stratified_sample_is_seeded_and_balanced(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"id": str(i), "text": f"t{i}", "label": "unsafe" if i < 30 else "safe"} for i in range(100)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, _ = load_samples(DatasetConfig(path=str(path), sample_n=20, seed=1))
    b, _ = load_samples(DatasetConfig(path=str(path), sample_n=20, seed=1))
    assert [s.id for s in a] == [s.id for s in b]
    assert sum(s.label == "unsafe" for s in a) == 6


def test_every_config_file_loads():
    from agents.protocols.base import build_protocol

    files = sorted((ROOT / "configs").glob("*.yaml"))
    assert files
    loaded = 0
    for f in files:
        import yaml

        from scripts.config_registry import PREFIXES, load_any

        raw = yaml.safe_load(f.read_text())
        if any(f.name.startswith(p) for p in PREFIXES):  # another verb's config (bench, library, curate, mine)
            load_any(f)
        else:  # a generate config
            assert "protocol" in raw, f"{f}: a generate config needs a protocol section"
            cfg = load_config(f, GenerateConfig)
            build_protocol(cfg.protocol, str(f))
        loaded += 1
    assert loaded == len(files)


def test_unknown_key_is_an_error_naming_it(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("protocol: {name: aetheria}\nbackends: {default: {kind: hf, modle: x}}\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: backends\.default\.modle: unknown key"):
        load_config(p, GenerateConfig)
    p.write_text("protocol: {name: aetheria, rounds: 2, roundz: 3}\n")
    cfg = load_config(p, GenerateConfig)
    from agents.protocols.base import build_protocol

    with pytest.raises(ConfigError, match=r"protocol\.roundz: unknown key"):
        build_protocol(cfg.protocol, str(p))


def test_overrides_apply_and_are_typed(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("protocol: {name: aetheria}\n")
    cfg = load_config(p, GenerateConfig, ["protocol.rounds=3", "content.max_chars=500", "limit=2"])
    assert cfg.protocol["rounds"] == 3 and cfg.content.max_chars == 500 and cfg.limit == 2


def test_cli_validate(tmp_path, capsys):
    from scripts.cli import main

    bad = tmp_path / "t.jsonl"
    bad.write_text('{"id": 1}\n')
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:1:" in out and "0 valid transcripts, 1 problems" in out
