"""Scripted fake backends for tests only (never imported by the product)."""
from __future__ import annotations

from collections.abc import Callable

from agents.backends.base import ChatRequest, Completion
from data.records import BackendRef

Reply = str | Callable[[ChatRequest], str]


class ScriptedBackend:
    """Replies by role: ``{"strict": ["round-1 text", "round-2 text"], "arbiter": fn}``.

    A list is consumed per (role, sample) in call order; a callable gets the request. Token counts are
    word counts so cost accounting can be checked. ``fail_roles`` makes those calls return an error.
    """

    price_factor = 1.0

    def __init__(self, script: dict[str, list[Reply] | Reply], *, model: str = "scripted", default: Reply | None = None,
                 fail_roles: set[str] | None = None):
        self.script, self.default = script, default
        self.ref = BackendRef(kind="scripted", model=model)
        self.fail_roles = fail_roles or set()
        self.calls: list[ChatRequest] = []
        self.batches: list[int] = []
        self._pos: dict[tuple[str, str], int] = {}

    def _sample_of(self, req: ChatRequest) -> str:
        return req.custom_id.split("|")[0]

    def reply(self, req: ChatRequest) -> str:
        entry = self.script.get(req.role, self.default)
        if entry is None:
            raise KeyError(f"no scripted reply for role {req.role!r}")
        if isinstance(entry, list):
            key = (self._sample_of(req), req.role)
            i = self._pos.get(key, 0)
            self._pos[key] = i + 1
            entry = entry[min(i, len(entry) - 1)]
        return entry(req) if callable(entry) else entry

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        self.batches.append(len(requests))
        out = []
        for r in requests:
            self.calls.append(r)
            if r.role in self.fail_roles:
                out.append(Completion(error="scripted failure"))
                continue
            text = self.reply(r)
            pt = sum(len(m.content.split()) for m in r.messages)
            out.append(Completion(text=text, prompt_tokens=pt, completion_tokens=len(text.split()), latency_s=0.001))
        return out

    def close(self) -> None:
        pass
