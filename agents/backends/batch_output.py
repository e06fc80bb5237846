"""Reading OpenAI Batch API output files: one validated line per request, located errors for bad lines.

The official line format::

    {"id": "batch_req_...", "custom_id": "...", "error": null,
     "response": {"status_code": 200, "request_id": "...", "body": {<chat completion>}}}

A request that failed has a non-200 ``status_code`` (the body holds ``{"error": {...}}``) or an ``error``
object. Unknown fields are ignored (the API adds fields over time); missing or mistyped ones we need raise
``RecordError`` naming ``file:line: field``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from data.jsonl import RecordError, parse_line


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class BatchResponse(_Lenient):
    status_code: int
    request_id: str | None = None
    body: dict[str, Any] = Field(default_factory=dict)


class BatchOutputLine(_Lenient):
    id: str | None = None
    custom_id: str = Field(min_length=1)
    response: BatchResponse | None = None
    error: dict[str, Any] | None = None


class _ChoiceMessage(_Lenient):
    content: str | None = None


class _Choice(_Lenient):
    message: _ChoiceMessage


class _Usage(_Lenient):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ChatCompletionBody(_Lenient):
    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


@dataclass
class BatchResult:
    custom_id: str
    where: str  # "file:line"
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None  # set for a failed request


def _failure(line: BatchOutputLine) -> str | None:
    if line.error:
        return f"{line.error.get('code') or 'error'}: {line.error.get('message') or line.error}"
    if line.response is None:
        return "no response and no error"
    if line.response.status_code != 200:
        err = line.response.body.get("error") if isinstance(line.response.body, dict) else None
        msg = err.get("message") if isinstance(err, dict) else None
        return f"status {line.response.status_code}" + (f": {msg}" if msg else "")
    return None


def read_output_file(path: Path | str) -> list[BatchResult]:
    path = Path(path)
    out = []
    with path.open("r", encoding="utf-8") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            line = parse_line(path, lineno, raw, BatchOutputLine)
            where = f"{path.name}:{lineno}"
            failed = _failure(line)
            if failed is not None:
                out.append(BatchResult(custom_id=line.custom_id, where=where, error=failed))
                continue
            try:
                body = ChatCompletionBody.model_validate(line.response.body)
            except ValidationError as e:
                err = e.errors()[0]
                field = ".".join(["response", "body", *(str(p) for p in err["loc"])])
                raise RecordError(path, lineno, field, err["msg"]) from None
            usage = body.usage or _Usage()
            out.append(BatchResult(custom_id=line.custom_id, where=where, text=body.choices[0].message.content or "",
                                   prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens))
    return out
