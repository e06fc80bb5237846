"""Files a baseline's protocol config names (a blocklist, a policy text): found, read and fingerprinted.

A relative path is looked up from the working directory first, then from the repository root, so
``configs/keyword_blocklist.yaml`` works from anywhere inside a checkout. A missing file is a
``ConfigError`` naming the config field.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from data.config import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_config_file(path: str, field: str) -> Path:
    p = Path(path).expanduser()
    candidates = [p] if p.is_absolute() else [p, REPO_ROOT / p]
    for c in candidates:
        if c.is_file():
            return c
    raise ConfigError(f"protocol.{field}: file not found: {path}")


def read_text(path: Path) -> tuple[str, str]:
    """The file's text and the first 16 hex digits of its SHA-256 (recorded in transcripts)."""
    text = path.read_text(encoding="utf-8")
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
