"""On-disk response cache: one JSON file per request hash, holding only the reply text and its usage.

Entries are written with ``write_atomic`` (a temporary file, then ``os.replace``), so a reader never sees
half a file. Nothing else is stored: no headers, no key, no request.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from agents.backends.atomic import write_atomic

log = logging.getLogger(__name__)


class CachedReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ResponseCache:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> CachedReply | None:
        p = self.path(key)
        try:
            return CachedReply.model_validate_json(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as e:  # a damaged entry is a miss; the next reply overwrites it
            log.warning("response cache: ignoring unreadable entry %s (%s)", p, type(e).__name__)
            return None

    def put(self, key: str, reply: CachedReply) -> None:
        write_atomic(self.path(key), json.dumps(reply.model_dump(), ensure_ascii=False))
