"""The OpenAI chat-completions request body for a ChatRequest (shared by the openai and batch backends).

``ChatRequest.payload`` dumps our ``Message`` records; the wire format differs in two ways: a message
with ``images`` becomes a list of content parts (a local file becomes a base64 data URL), and our
``images`` field never reaches the server. Temperature and JSON mode fall back to the backend config.
"""
from __future__ import annotations

import base64
import dataclasses
import mimetypes
from pathlib import Path
from typing import Any

from agents.backends.base import ChatRequest
from data.records import Message

_REMOTE = ("http://", "https://", "data:")


def image_url(ref: str) -> str:
    """A URL or data URL passes through; a local file becomes ``data:<mime>;base64,...``."""
    if ref.startswith(_REMOTE):
        return ref
    path = Path(ref)
    if not path.is_file():
        raise FileNotFoundError(f"image not found: {ref}")
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def chat_message(m: Message) -> dict[str, Any]:
    if not m.images:
        return {"role": m.role, "content": m.content}
    parts: list[dict[str, Any]] = [{"type": "text", "text": m.content}]
    parts += [{"type": "image_url", "image_url": {"url": image_url(ref)}} for ref in m.images]
    return {"role": m.role, "content": parts}


def chat_body(req: ChatRequest, model: str, *, temperature: float = 0.0, json_mode: bool = False) -> dict[str, Any]:
    """The body sent for ``req``: the request's temperature if > 0, else ``temperature``; JSON mode if
    either asks for it. Raises FileNotFoundError for a missing local image."""
    resolved = dataclasses.replace(req, temperature=req.temperature if req.temperature > 0 else temperature,
                                   json_mode=req.json_mode or json_mode)
    body = resolved.payload(model)
    body["messages"] = [chat_message(m) for m in req.messages]
    return body
