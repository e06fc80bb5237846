"""One backend interface: a batch of chat requests in, completions with usage out.

Every backend (hf, openai, batch, vllm) implements ``generate(requests) -> completions`` with the same
order. A request carries its ``custom_id`` (transcript id + step + role + round + attempt), which the
batch backend uses as the Batch API ``custom_id`` and the runner uses to match replies.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from data.records import BackendRef, Message


@dataclass
class ChatRequest:
    custom_id: str
    role: str  # protocol role name (selects the adapter / backend binding)
    messages: list[Message]
    max_tokens: int = 256
    temperature: float = 0.0
    json_mode: bool = False
    stop: list[str] | None = None

    def payload(self, model: str) -> dict[str, Any]:
        """OpenAI chat-completions body for this request (also what the cache key hashes)."""
        body: dict[str, Any] = {
            "model": model,
            "messages": [m.model_dump() for m in self.messages],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        if self.stop:
            body["stop"] = list(self.stop)
        return body


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@dataclass
class Completion:
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None  # set when the call failed after retries
    cached: bool = False
    pending: bool = False  # batch backend: not answered yet (exported for the next cycle)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. token logprobs for guard baselines


@runtime_checkable
class Backend(Protocol):
    ref: BackendRef
    price_factor: float  # 0.5 for Batch APIs, 1.0 otherwise

    def generate(self, requests: list[ChatRequest]) -> list[Completion]: ...

    def close(self) -> None: ...


class BackendError(RuntimeError):
    pass
