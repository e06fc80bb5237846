"""Which config class reads which configs/*.yaml file (by file-name prefix); used by the load-every-config test.

Generate configs (those with a ``protocol`` or ``backends`` section) are GenerateConfig; other verbs'
configs are named after the verb.
"""
from __future__ import annotations

import importlib
from pathlib import Path

from data.config import load_config

PREFIXES = {
    "bench_": "eval.bench:BenchConfig",
    "library_": "agents.library:LibraryBuildConfig",
    "curate_": "agents.curator:CurateConfig",
    "mine_": "agents.miner:MineConfig",
    "keyword_": None,  # data files, not configs: loaded by their owners' tests
}


def config_class(path: Path):
    for prefix, target in PREFIXES.items():
        if path.name.startswith(prefix):
            if target is None:
                return None
            mod, name = target.split(":")
            return getattr(importlib.import_module(mod), name)
    raise KeyError(f"{path}: no config class is registered for this file name (scripts/config_registry.py)")


def load_any(path: Path):
    cls = config_class(Path(path))
    return None if cls is None else load_config(path, cls)
